package redislock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
)

// DefaultPrefix is the key prefix of a Store made without Options.Prefix:
// records live under "idempotency:{id}", locks under "idempotency-lock:{id}".
const DefaultPrefix = "idempotency"

// Errors of this package; Redis and network errors are wrapped as they come,
// with a "redislock: <operation>:" prefix.
var (
	// ErrInvalidStoreKey reports a store key that would break the key layout:
	// empty, or holding a brace. The Engine never hands over such a key.
	ErrInvalidStoreKey = errors.New("redislock: invalid store key")
	// ErrUnexpectedReply reports a script reply of an unexpected type, such
	// as when something else wrote to the store's keys.
	ErrUnexpectedReply = errors.New("redislock: unexpected reply")
	// ErrUnsupportedURL reports a URL scheme NewClient does not know.
	ErrUnsupportedURL = errors.New("redislock: unsupported URL scheme")
	// ErrNilClient reports New called without a client.
	ErrNilClient = errors.New("redislock: nil client")
	// ErrInvalidPrefix reports an Options.Prefix that holds a brace or ends
	// in a suffix of the key layout's.
	ErrInvalidPrefix = errors.New("redislock: invalid prefix")
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed complete.lua
	completeLua    string
	completeScript = redis.NewScript(completeLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed refresh.lua
	refreshLua    string
	refreshScript = redis.NewScript(refreshLua)

	//go:embed savestep.lua
	saveStepLua    string
	saveStepScript = redis.NewScript(saveStepLua)

	//go:embed loadsteps.lua
	loadStepsLua    string
	loadStepsScript = redis.NewScript(loadStepsLua)

	//go:embed runid.lua
	runIDLua    string
	runIDScript = redis.NewScript(runIDLua)
)

// Options configures a Store. A nil *Options means the defaults.
type Options struct {
	// Prefix starts the keys of a request, "<Prefix>:{id}" (the record) and
	// others, such as "<Prefix>-lock:{id}" (docs/redis.md, "Key layout"); it
	// must not hold a brace, nor end in one of those others' suffixes
	// ("-lock", "-steps", "-quota", "-rate"), which would share keys with
	// the store of the shorter prefix. Optional. Default: DefaultPrefix.
	Prefix string

	// DisableBatching sends every script alone, so that a go-redis hook sees
	// each request's own context and command (docs/redis.md, "Batching").
	// Optional. Default: false, batching on *redis.Client and *redis.ClusterClient.
	DisableBatching bool
}

// Store is a core.Store on Redis: a single node, Sentinel (a failover
// client) or Cluster. It is safe for concurrent use and keeps no state of
// its own besides its scripts waiting for a batch, so any number of
// instances may share one Redis. Make one with New; the zero value is not
// usable.
type Store struct {
	client     redis.Scripter
	batch      *batcher             // of a *redis.Client; nil: see cluster
	cluster    *redis.ClusterClient // batches per master, in nodes; nil: no batching
	nodes      sync.Map             // a cluster master's address → its *batcher
	respPrefix string               // "<prefix>:{"
	lockPrefix string               // "<prefix>-lock:{"
	stepPrefix string               // "<prefix>-steps:{"
	purged     string               // "<prefix>:purged", the Pub/Sub channel of purges

	invalidateMu sync.Mutex
	invalidate   []func(key string) // of SetInvalidate: fed by one subscription to purged
	subscribed   bool               // the first SetInvalidate took (or is taking) the subscription
	sub          *redis.PubSub      // that subscription, once taken
	closed       bool               // Close was called: no subscription

	quotaPrefix, ratePrefix string // "<prefix>-quota:{", "<prefix>-rate:{" (quota.go)
}

var (
	_ core.Store        = (*Store)(nil)
	_ core.Checkpointer = (*Store)(nil)
)

// isNil reports whether client is nil or a nil pointer in the interface,
// such as a *redis.Client variable that was never set.
func isNil(client redis.Scripter) bool {
	if client == nil {
		return true
	}
	v := reflect.ValueOf(client)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// New returns a Store over client: a *redis.Client, *redis.ClusterClient,
// failover client or any redis.UniversalClient (all of them implement
// redis.Scripter, the only part the Store uses). opts may be nil. It returns
// ErrNilClient without a client (nil, or a nil *redis.Client) and
// ErrInvalidPrefix for a prefix that holds a brace (which would move the
// Redis Cluster hash tag) or ends in a suffix of the key layout's.
func New(client redis.Scripter, opts *Options) (*Store, error) {
	prefix := DefaultPrefix
	if opts != nil && opts.Prefix != "" {
		prefix = opts.Prefix
	}
	switch {
	case isNil(client):
		return nil, ErrNilClient
	case strings.ContainsAny(prefix, "{}"):
		return nil, fmt.Errorf("%w: %q holds a brace", ErrInvalidPrefix, prefix)
	}
	for _, suffix := range []string{"-lock", "-steps", "-quota", "-rate"} {
		if strings.HasSuffix(prefix, suffix) {
			return nil, fmt.Errorf("%w: %q ends in %q, as the keys of prefix %q do", ErrInvalidPrefix, prefix, suffix, strings.TrimSuffix(prefix, suffix))
		}
	}
	s := &Store{client: client, respPrefix: prefix + ":{", lockPrefix: prefix + "-lock:{", stepPrefix: prefix + "-steps:{", purged: prefix + ":purged",
		quotaPrefix: prefix + "-quota:{", ratePrefix: prefix + "-rate:{"}
	if opts != nil && opts.DisableBatching {
		return s, nil
	}
	switch c := client.(type) {
	case *redis.Client:
		s.batch = newBatcher(c, c)
	case *redis.ClusterClient:
		s.cluster = c
	}
	return s, nil
}

// Keys returns the Redis keys of a store key: the response key, which holds
// the record, and the lock key, which holds the owner token. Both carry the
// store key as their hash tag, so they share a Redis Cluster slot.
func (s *Store) Keys(key string) (response, lock string, err error) {
	// An empty tag is no tag ("{}" hashes the whole key), and a brace would
	// end or move it: either could split the two keys across slots.
	if key == "" || strings.ContainsAny(key, "{}") {
		return "", "", fmt.Errorf("%w %q", ErrInvalidStoreKey, key)
	}
	return s.respPrefix + key + "}", s.lockPrefix + key + "}", nil
}

// Acquire implements core.Store with one script, one round trip: it returns
// the record if there is one, else sets the lock key with SET NX PX. Under
// core.Config.Quota a second script admits the new lock in its scope, or
// the lock is released and Acquire returns a *core.QuotaError.
// Like Complete, Release and Refresh, it runs its script again, up to 8
// runs, when it fails on a pooled connection that Redis had closed
// (docs/redis.md, "Failures").
func (s *Store) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	resp, lock, err := s.Keys(key)
	if err != nil {
		return nil, "", err
	}
	token := newToken()
	scope, q, quota := core.QuotaFromContext(ctx)
	if quota {
		token += tokenScope + scope
	}
	cmd, runs := s.run(ctx, acquireScript, []string{resp, lock}, token, millis(lockTTL))
	res, err := cmd.Result()
	if err != nil {
		return nil, "", storeError("acquire", runs, err)
	}
	switch v := res.(type) {
	case string:
		return []byte(v), "", nil
	case int64:
		if v != 1 {
			return nil, "", core.ErrInFlight
		}
		if quota {
			if err := s.admit(ctx, lock, scope, token, q, lockTTL); err != nil {
				return nil, "", err
			}
		}
		return nil, token, nil
	}
	return nil, "", fmt.Errorf("%w to acquire: %T", ErrUnexpectedReply, res)
}

// Complete implements core.Store with one script, one round trip: if token
// still owns the lock, or if the key has neither a lock nor a record (the
// lock expired and nobody took the key), it stores record with its TTL and
// deletes the lock and the key's checkpoints.
func (s *Store) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	resp, lock, err := s.Keys(key)
	if err != nil {
		return err
	}
	cmd, runs := s.run(ctx, completeScript, []string{resp, lock, s.stepPrefix + key + "}"}, token, record, millis(ttl))
	err = fenced("complete", cmd, runs)
	if err == nil || errors.Is(err, core.ErrLockLost) {
		s.quotaLeave(ctx, token)
	}
	return err
}

// Release implements core.Store with one script, one round trip: if token
// still owns the lock, it deletes the lock.
func (s *Store) Release(ctx context.Context, key, token string) error {
	_, lock, err := s.Keys(key)
	if err != nil {
		return err
	}
	cmd, runs := s.run(ctx, releaseScript, []string{lock}, token)
	err = fenced("release", cmd, runs)
	if n, nerr := cmd.Int64(); nerr == nil && n == 2 {
		// No lock at all: it expired, or, if the script ran more than
		// once, an earlier run whose reply was lost deleted it.
		err = core.ErrLockLost
		if runs > 1 {
			err = nil
		}
	}
	if err == nil || errors.Is(err, core.ErrLockLost) {
		s.quotaLeave(ctx, token)
	}
	return err
}

// Refresh implements core.Store with one script, one round trip: if token
// still owns the lock, it sets the lock's TTL to lockTTL.
func (s *Store) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	_, lock, err := s.Keys(key)
	if err != nil {
		return err
	}
	cmd, runs := s.run(ctx, refreshScript, []string{lock}, token, millis(lockTTL))
	err = fenced("refresh", cmd, runs)
	if err == nil {
		s.quotaRefresh(ctx, token, lockTTL)
	}
	return err
}

// SaveStep implements core.Checkpointer with one script, one round trip:
// if token owns the lock, it sets step in the hash "<prefix>-steps:{id}",
// in the lock's slot, whose TTL it extends to ttl.
func (s *Store) SaveStep(ctx context.Context, key, token, step string, result []byte, ttl time.Duration) error {
	_, lock, err := s.Keys(key)
	if err != nil {
		return err
	}
	cmd, runs := s.run(ctx, saveStepScript, []string{lock, s.stepPrefix + key + "}"}, token, step, result, millis(ttl))
	return fenced("save step", cmd, runs)
}

// LoadSteps implements core.Checkpointer with one script, one round trip.
func (s *Store) LoadSteps(ctx context.Context, key string) (map[string][]byte, error) {
	if _, _, err := s.Keys(key); err != nil {
		return nil, err
	}
	cmd, runs := s.run(ctx, loadStepsScript, []string{s.stepPrefix + key + "}"})
	res, err := cmd.Slice()
	if err != nil {
		return nil, storeError("load steps", runs, err)
	}
	steps := make(map[string][]byte, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		step, ok1 := res[i].(string)
		result, ok2 := res[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w to load steps: %T", ErrUnexpectedReply, res[i+1])
		}
		steps[step] = []byte(result)
	}
	return steps, nil
}

// maxDeadConnRuns bounds the runs of a script that keep meeting pooled
// connections the server had closed: each run spends go-redis's attempts
// (max_retries+1, 4 by default) on as many of them, so 8 runs get past 28
// dead ones.
const maxDeadConnRuns = 8

// run runs script, and runs it again while it fails on a connection that
// the server had closed and the pool held idle connections, which may be
// dead too, when that run began; up to maxDeadConnRuns runs in all. It
// returns the last run's reply and the number of runs. Why, and why
// running a script again is safe: docs/redis.md, "Failures".
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, int) {
	cmd := s.execSettled(ctx, script, keys, args...)
	runs, pooled := 1, true // a first failure gets one more run, whatever the pool holds
	for runs < maxDeadConnRuns && pooled && closedByServer(cmd.Err()) && ctx.Err() == nil {
		pooled = s.idleConns()
		cmd = s.execSettled(ctx, script, keys, args...)
		runs++
	}
	return cmd, runs
}

// Waits for a Cluster slot being migrated: the first wait, the longest, and
// the longest in all when ctx has no deadline.
const (
	tryAgainFirst = 10 * time.Millisecond
	tryAgainMax   = 100 * time.Millisecond
	tryAgainFor   = 5 * time.Second
)

// execSettled runs script, and again while Redis answers TRYAGAIN (or
// MOVED, ASK: below), backing off from tryAgainFirst to tryAgainMax, until
// ctx ends (at most tryAgainFor). A Cluster answers TRYAGAIN to a script of several keys in
// a slot being migrated, unless the node asked holds every key: for
// acquire.lua never (a key has a record or a lock, not both), so every
// request of the slot fails until the slot has moved, and fail-open would
// run its handler unprotected, a replay's too. go-redis tries again only
// up to MaxRedirects, a few milliseconds, and not in a pipeline (a batch);
// it may also run out of redirects as the slot moves and return MOVED or
// ASK. Redis answers all three before it runs the script, so running it
// again is safe.
func (s *Store) execSettled(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var giveUp time.Time
	for wait := tryAgainFirst; ; wait = min(2*wait, tryAgainMax) {
		cmd := s.exec(ctx, script, keys, args...)
		if !slotMoving(cmd.Err()) {
			return cmd
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(tryAgainFor)
		}
		if time.Now().Add(wait).After(giveUp) {
			return cmd
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return cmd
		case <-t.C:
		}
	}
}

// slotMoving reports whether err is a Cluster's answer about a slot being
// migrated, given before the script ran.
func slotMoving(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// exec runs script once: through the batcher of the Redis node that holds
// keys, or alone.
func (s *Store) exec(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if b := s.batcher(ctx, keys[0]); b != nil {
		return b.run(ctx, script, keys, args...)
	}
	return script.Run(ctx, s.client, keys, args...)
}

// batcher returns the batcher of the Redis node that holds key, or nil if
// the Store does not batch. A cluster has one per master, so that a slow
// node holds up only the requests whose keys it holds; the batch is still
// sent through the cluster client, which follows MOVED and ASK replies.
func (s *Store) batcher(ctx context.Context, key string) *batcher {
	if s.cluster == nil {
		return s.batch
	}
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil // the script, run alone, fails or finds its node itself
	}
	addr := node.Options().Addr
	if b, ok := s.nodes.Load(addr); ok {
		return b.(*batcher)
	}
	// An address that leaves the cluster keeps its idle batcher: a few
	// hundred bytes each over the life of the Store.
	b, _ := s.nodes.LoadOrStore(addr, newBatcher(s.cluster, node))
	return b.(*batcher)
}

// idleConns reports whether the client's pools (the one of pipelines too,
// if it has one) hold idle connections (a client without pool statistics
// is taken to). Only asked after a failure: PoolStats allocates.
func (s *Store) idleConns() bool {
	c, ok := s.client.(interface{ PoolStats() *redis.PoolStats })
	if !ok {
		return true
	}
	st := c.PoolStats()
	return st.IdleConns > 0 || st.PipelineStats != nil && st.PipelineStats.IdleConns > 0
}

// closedByServer reports an error of an established connection that the
// other end had closed or reset, or that TCP keepalive gave up on: dead
// before the command was sent, or dying with it. A failed dial is not one.
func closedByServer(err error) bool {
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT)
}

// RunID returns the run_id of the Redis server that holds key's lock
// (INFO server) and its replication ID (INFO replication's master_replid),
// space-separated, in one script: it changes when that server restarts,
// another takes its place (a failover), or it is promoted after it took
// another's data as its replica (REPLICAOF, then REPLICAOF NO ONE), which
// is when the records it holds may be older than those written to it (a
// snapshot, an append-only file a second behind, a replica that lagged).
// It also changes when a replica attaches to a master that had none (or
// none for repl-backlog-ttl), a new replication history. core's tiered
// store keeps it in the marker that tells it whether the fast tier may
// hold a key alone (docs/design.md, "Tiered store"). A server whose INFO
// lacks either (a Redis-compatible one) is an error.
func (s *Store) RunID(ctx context.Context, key string) (string, error) {
	_, lock, err := s.Keys(key)
	if err != nil {
		return "", err
	}
	cmd, runs := s.run(ctx, runIDScript, []string{lock})
	id, err := cmd.Text()
	if err != nil {
		return "", storeError("run id", runs, err)
	}
	return id, nil
}

// storeError wraps a Redis error of op, saying how many runs it took.
func storeError(op string, runs int, err error) error {
	if runs > 1 {
		return fmt.Errorf("redislock: %s: %w (%d runs)", op, err, runs)
	}
	return fmt.Errorf("redislock: %s: %w", op, err)
}

// fenced reads the reply of a script that checks the owner token first:
// 1 is done, 0 is core.ErrLockLost.
func fenced(op string, cmd *redis.Cmd, runs int) error {
	n, err := cmd.Int64()
	switch {
	case err != nil:
		return storeError(op, runs, err)
	case n == 0:
		return core.ErrLockLost
	case n == 1:
		return nil
	}
	return fmt.Errorf("%w to %s: %d", ErrUnexpectedReply, op, n)
}

// millis converts d to whole milliseconds for PX and PEXPIRE, rounding up
// (Redis refuses a TTL of zero) without overflowing near math.MaxInt64.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return max(ms, 1)
}

// tokenPrefix makes tokens unique across processes: 16 random bytes drawn
// once; tokenSeq makes them unique within the process.
var (
	tokenPrefix = func() string {
		var b [16]byte
		rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
		return base64.RawURLEncoding.EncodeToString(b[:]) + "."
	}()
	tokenSeq atomic.Uint64
)

// newToken returns a fresh owner token: the random per-process prefix, the
// time in milliseconds (the lock's LockedAt, tokenTime) and a counter.
// Unique, not unguessable: fencing needs no more (docs/redis.md).
func newToken() string {
	var buf [64]byte
	b := append(buf[:0], tokenPrefix...)
	b = strconv.AppendInt(b, time.Now().UnixMilli(), 36)
	b = append(b, '.')
	b = strconv.AppendUint(b, tokenSeq.Add(1), 36)
	return string(b)
}

// tokenTime returns the time a token of newToken was made, or zero for a
// token of another form (an older release's, or not this store's).
func tokenTime(token string) time.Time {
	_, rest, _ := strings.Cut(token, ".")
	ms, _, ok := strings.Cut(rest, ".")
	n, err := strconv.ParseInt(ms, 36, 64)
	if !ok || err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// defaultDialTimeout is go-redis's default Options.DialTimeout.
const defaultDialTimeout = 5 * time.Second

// NewClient returns a Redis client for redisURL, so that every program
// configures Redis with one REDIS_URL. The scheme picks the client:
//
//	redis://[user:password@]host:port[/db][?option=value…]    one node (redis.NewClient)
//	rediss://…                                                  the same over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N&…]         one node over a Unix socket
//	redis+cluster://[user:password@]host:port[?addr=host2:port2&addr=…]  Redis Cluster (redis.NewClusterClient)
//	rediss+cluster://…                                          the same over TLS
//	redis+sentinel://[user:password@]host:port[/db]?master_name=name[&addr=host2:port2…]
//	                                                            Sentinel (redis.NewFailoverClient; the
//	                                                            addresses are the sentinels')
//	rediss+sentinel://…                                         the same over TLS
//
// The options are go-redis's (redis.ParseURL, redis.ParseClusterURL,
// redis.ParseFailoverURL): dial_timeout, read_timeout, pool_size,
// protocol and so on. The client connects lazily: NewClient does no I/O.
// Close the client when done.
//
// Three defaults differ from go-redis's (docs/redis.md, "URLs", says why):
// ContextTimeoutEnabled is set (unless a sentinel URL sets
// context_timeout_enabled); a refused dial is tried again every 10 ms until
// the command's deadline or dial_timeout, whichever comes first, go-redis's
// own dial retries off (dialer_retries=1
// unless the URL sets it); and a sentinel URL without dial_timeout gives
// the master's connections go-redis's default of 5 s too. Give your own
// commands a deadline: against a Redis that is down, one without waits
// dial_timeout (5 s) per attempt, max_retries+1 attempts (the Store's have
// core.Config.StoreTimeout).
func NewClient(redisURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(redisURL, "://")
	if !ok {
		return nil, fmt.Errorf("%w: no scheme in the URL", ErrUnsupportedURL)
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" && !(base == "unix" && kind == "") {
		return nil, fmt.Errorf("%w %q", ErrUnsupportedURL, scheme)
	}
	switch kind {
	case "":
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			return nil, fmt.Errorf("redislock: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		setRedial(&opt.Dialer, &opt.DialerRetries, &opt.DialTimeout, opt.TLSConfig)
		return redis.NewClient(opt), nil
	case "cluster":
		opt, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redislock: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		setRedial(&opt.Dialer, &opt.DialerRetries, &opt.DialTimeout, opt.TLSConfig)
		return redis.NewClusterClient(opt), nil
	case "sentinel":
		opt, err := redis.ParseFailoverURL(base + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redislock: %w", err)
		}
		if opt.MasterName == "" {
			return nil, errors.New("redislock: a sentinel URL needs master_name")
		}
		if u, err := url.Parse(redisURL); err == nil && !u.Query().Has("context_timeout_enabled") {
			opt.ContextTimeoutEnabled = true
		}
		// setRedial also gives the master's connections a dial timeout.
		setRedial(&opt.Dialer, &opt.DialerRetries, &opt.DialTimeout, opt.TLSConfig)
		return redis.NewFailoverClient(opt), nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnsupportedURL, scheme)
}
