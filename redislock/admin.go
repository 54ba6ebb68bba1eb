package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	bsmlock "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
)

var (
	//go:embed inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)

	//go:embed purge.lua
	purgeLua    string
	purgeScript = redis.NewScript(purgeLua)

	//go:embed unlock.lua
	unlockLua    string
	unlockScript = redis.NewScript(unlockLua)
)

// ErrNoScan reports a client that InFlight cannot SCAN: one that implements
// redis.Scripter only.
var ErrNoScan = errors.New("redislock: client cannot SCAN")

// PurgeLockTTL is how long Purge holds a key's lock at most: if the process
// dies half-way, requests of that key get 409 for as long.
const PurgeLockTTL = 10 * time.Second

// scanCount is the COUNT hint of InFlight's SCAN: keys looked at per call.
const scanCount = 1000

var _ core.Admin = (*Store)(nil)

// Inspect implements core.Admin in one script. A key that holds both a
// record and a lock (a purge in progress) is reported as its record, which
// is what a request of that key gets. LockedAt is the time of the process
// that took the lock.
func (s *Store) Inspect(ctx context.Context, key string) (core.KeyState, error) {
	resp, lock, err := s.Keys(key)
	if err != nil {
		return core.KeyState{}, err
	}
	now := time.Now()
	res, err := inspectScript.Run(ctx, s.client, []string{resp, lock}).Slice()
	if err != nil {
		return core.KeyState{}, fmt.Errorf("redislock: inspect: %w", err)
	}
	var (
		recTTL, lockTTL int64
		rec, token      string
		ok              = len(res) == 4
	)
	if ok {
		recTTL, ok = res[0].(int64)
	}
	if ok {
		rec, ok = res[1].(string)
	}
	if ok {
		lockTTL, ok = res[2].(int64)
	}
	if ok {
		token, ok = res[3].(string)
	}
	if !ok {
		return core.KeyState{}, fmt.Errorf("%w to inspect: %v", ErrUnexpectedReply, res)
	}
	switch {
	case recTTL != -2:
		return core.KeyState{Key: key, Record: []byte(rec), Expires: expiry(now, recTTL)}, nil
	case lockTTL != -2:
		return core.KeyState{Key: key, LockedAt: tokenTime(token), Expires: expiry(now, lockTTL)}, nil
	}
	return core.KeyState{}, core.ErrNotFound
}

// Purge implements core.Admin: it takes the key's lock with bsm/redislock
// (core.ErrInFlight if a request holds it), so that no request starts on
// the key meanwhile, deletes the record and releases the lock. It
// publishes the purge for the replay caches (SetInvalidate) in the same
// script: a user whose ACL does not allow publishing on the channel
// "<prefix>:purged" deletes the record and gets an error saying so.
func (s *Store) Purge(ctx context.Context, key string) error {
	resp, lock, err := s.Keys(key)
	if err != nil {
		return err
	}
	l, err := bsmlock.Obtain(ctx, s.client, lock, PurgeLockTTL, &bsmlock.Options{Token: newToken()})
	if errors.Is(err, bsmlock.ErrNotObtained) {
		return core.ErrInFlight
	}
	if err != nil {
		return fmt.Errorf("redislock: purge: %w", err)
	}
	res, err := purgeScript.Run(ctx, s.client, []string{resp, lock}, l.Token(), s.purged, key).Result()
	n, ok := res.(int64)
	unpublished, _ := res.(string) // deleted, not published
	if err == nil && !ok && unpublished == "" {
		err = fmt.Errorf("%w to purge: %v", ErrUnexpectedReply, res)
	}
	// Released even if the purge's context ended: the lock would hold the
	// key's requests off until it expires.
	relErr := l.Release(context.WithoutCancel(ctx))
	switch {
	case err != nil:
		return fmt.Errorf("redislock: purge: %w", err)
	case n == -1:
		return fmt.Errorf("redislock: purge: lock lost after %v; record not deleted", PurgeLockTTL)
	case relErr != nil:
		return fmt.Errorf("redislock: purge: record deleted, but the lock (expiring in %v) not released: %w", PurgeLockTTL, relErr)
	case unpublished != "":
		return fmt.Errorf("redislock: purge: record deleted, but not published on %s (replay caches keep it until it expires): %s",
			s.purged, unpublished)
	case n == 0:
		return core.ErrNotFound
	}
	return nil
}

// Unlock implements core.Admin in one script, then, under
// core.Config.Quota, a second that ends the lock's count in its scope (in
// another slot): if that one fails, the count ends when the lock would have
// expired.
func (s *Store) Unlock(ctx context.Context, key string) error {
	_, lock, err := s.Keys(key)
	if err != nil {
		return err
	}
	token, err := unlockScript.Run(ctx, s.client, []string{lock}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return core.ErrNotFound
	case err != nil:
		return fmt.Errorf("redislock: unlock: %w", err)
	}
	s.quotaLeave(context.WithoutCancel(ctx), token) // the lock is gone: its count goes too
	return nil
}

// InFlight implements core.Admin: it SCANs the lock keys of the Store's
// prefix (on each master of a Cluster, each shard of a Ring) and reads each
// lock's token and TTL in a pipeline per SCAN step. It walks the whole
// keyspace, 1000 keys per step (SCAN's COUNT) without blocking Redis, and
// keeps at most 2×limit locks in memory; bound its time with ctx. Locks whose
// time is unknown (tokens of an older release) come last. The client must
// implement redis.Cmdable (every go-redis client does), else ErrNoScan.
func (s *Store) InFlight(ctx context.Context, limit int) ([]core.KeyState, error) {
	if limit <= 0 {
		return nil, nil
	}
	var (
		mu  sync.Mutex
		out []core.KeyState
	)
	add := func(found []core.KeyState) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, found...)
		if len(out) > 2*limit {
			sortLocks(out)
			out = out[:limit]
		}
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return s.scanLocks(ctx, n, add) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return s.scanLocks(ctx, n, add) })
	case redis.Cmdable:
		err = s.scanLocks(ctx, c, add)
	default:
		err = fmt.Errorf("%w: %T", ErrNoScan, s.client)
	}
	if err != nil {
		return nil, err
	}
	sortLocks(out)
	return out[:min(limit, len(out))], nil
}

// scanLocks SCANs one node for lock keys and hands each step's locks to add.
func (s *Store) scanLocks(ctx context.Context, c redis.Cmdable, add func([]core.KeyState)) error {
	match := globEscape(s.lockPrefix) + "*}"
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return fmt.Errorf("redislock: inflight: %w", err)
		}
		if len(keys) > 0 {
			now := time.Now()
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Get(ctx, k)
					p.PTTL(ctx, k)
				}
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("redislock: inflight: %w", err)
			}
			found := make([]core.KeyState, 0, len(keys))
			for i, k := range keys {
				token, err := cmds[2*i].(*redis.StringCmd).Result()
				ttl := cmds[2*i+1].(*redis.DurationCmd).Val()
				id, pre := strings.CutPrefix(k, s.lockPrefix)
				id, suf := strings.CutSuffix(id, "}")
				if !pre || !suf || err != nil {
					continue // expired since the SCAN, or not a lock of ours
				}
				st := core.KeyState{Key: id, LockedAt: tokenTime(token)}
				if ttl > 0 {
					st.Expires = now.Add(ttl)
				}
				found = append(found, st)
			}
			add(found)
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// sortLocks sorts locks oldest first, those of unknown time last.
func sortLocks(locks []core.KeyState) {
	slices.SortFunc(locks, func(a, b core.KeyState) int {
		switch {
		case a.LockedAt.IsZero() != b.LockedAt.IsZero():
			if a.LockedAt.IsZero() {
				return 1
			}
			return -1
		case !a.LockedAt.Equal(b.LockedAt):
			return a.LockedAt.Compare(b.LockedAt)
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// expiry returns the expiry of a key whose PTTL was ms at now; zero if it
// has no TTL.
func expiry(now time.Time, ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(ms) * time.Millisecond)
}

// globEscape escapes the characters of a SCAN MATCH pattern in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*?[]^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SetInvalidate implements core.Invalidator: invalidate gets the key of
// every record purged through any Store of this prefix, in any process,
// over Redis Pub/Sub, as long as the client can subscribe (a Client,
// ClusterClient or UniversalClient; not a bare Scripter). A purge published
// while the subscription reconnects is missed: that copy replays until it
// expires. The Store subscribes once, at the first call, for all of them;
// the subscription ends with Close, or when the client is closed.
func (s *Store) SetInvalidate(invalidate func(key string)) {
	sub, ok := s.client.(interface {
		Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	})
	if !ok {
		return
	}
	s.invalidateMu.Lock()
	if s.closed {
		s.invalidateMu.Unlock()
		return
	}
	s.invalidate = append(s.invalidate, invalidate)
	first := !s.subscribed
	s.subscribed = true
	s.invalidateMu.Unlock()
	if !first {
		return
	}
	ps := sub.Subscribe(context.Background(), s.purged) // dials: not under the lock
	s.invalidateMu.Lock()
	closed := s.closed
	if !closed {
		s.sub = ps
	}
	s.invalidateMu.Unlock()
	if closed {
		ps.Close() //nolint:errcheck // Close ran while it subscribed
		return
	}
	go func() {
		for msg := range ps.Channel() {
			s.invalidateMu.Lock()
			fns := s.invalidate // appended to, never changed
			s.invalidateMu.Unlock()
			for _, f := range fns {
				f(msg.Payload)
			}
		}
	}()
}

// Close ends the subscription of SetInvalidate, if any, and drops the
// functions it fed (the Engines' replay caches); later SetInvalidate calls
// subscribe to nothing. Call it once the Engines on the Store stop serving:
// after it they hear of no purge (one being delivered may still reach
// them), and replay a purged record until it expires. It does not close
// the client, which the Store never owns. A Store without ReplayCache
// Engines needs no Close.
func (s *Store) Close() {
	s.invalidateMu.Lock()
	ps := s.sub
	s.closed, s.sub, s.invalidate = true, nil, nil
	s.invalidateMu.Unlock()
	if ps != nil {
		ps.Close() //nolint:errcheck // closing a subscription fails only on a closed client
	}
}
