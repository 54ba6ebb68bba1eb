package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tiered is the Store of NewTiered. A call to the fast tier gets half the
// time left to the call (half of defaultStoreTimeout without a deadline),
// so that the durable tier has the other half when it stalls; after
// defaultBreakerFailures failures in a row the fast tier is left out for
// defaultBreakerCooldown, then probed again.
type tiered struct {
	fast, durable Store
	brk           *breaker // of the fast tier

	mu         sync.Mutex
	observe    func(Event)    // the Engine's; nil until an Engine takes the store
	invalidate []func(string) // the Engines' replay caches'; none without one

	// The locks of leases whose tokens no longer say them (Refresh).
	heldMu sync.Mutex
	held   map[partsKey]heldParts

	txSeq atomic.Uint64 // makes tieredTxn tokens unique

	// The marker (kept): when it was last read; the records that reached
	// the durable tier and not the fast one (misses), and how many of them
	// a drop of the marker covers (dropped): a miss is known while they
	// differ (missed).
	keptRead atomic.Int64 // unix nanoseconds; 0: never
	misses   atomic.Uint64
	dropped  atomic.Uint64
}

// NewTiered returns the Store of fast (Redis) in front of durable
// (PostgreSQL). Every lock is taken in the durable tier, so a handler runs
// once whichever tier answers, and every record is stored there first; the
// fast tier serves replays in one round trip and holds off duplicates.
// When the fast tier fails, calls go to the durable tier alone
// (OutcomeFallback); when it lost its data, records are written back to it.
// When the durable tier fails to take a key, the fast tier's lock alone
// holds it, and the record is written to the durable tier too if it
// answers by the time the work completes; under Config.FailClosed, only if
// a marker the store keeps in the fast tier says that it has held every
// record for at least the call's record TTL (else the call is refused), so
// that a fast tier that lost its data does not run completed keys again
// (the fast tier must be an Admin, to drop the marker, and should name its
// server as redislock's Store does: see docs/design.md, "Tiered store").
// The store implements Admin, Checkpointer and Invalidator, and
// TxStore if durable does (pgstore.NewTx): the durable tier's transaction
// then holds the key and commits the record, and the fast tier serves
// replays and gets the record after the commit. The fast tier has a
// circuit breaker of its own, with Config's default bounds. New refuses a
// nil tier. See docs/design.md, "Tiered store".
func NewTiered(fast, durable Store) Store {
	t := &tiered{fast: fast, durable: durable, held: make(map[partsKey]heldParts),
		brk: &breaker{failures: defaultBreakerFailures, cooldown: defaultBreakerCooldown,
			probeFor: defaultBreakerCooldown + defaultStoreTimeout, now: time.Now, changed: func(breakerState) {}}}
	if tx, ok := durable.(TxStore); ok {
		return &tieredTx{tiered: t, tx: tx}
	}
	return t
}

// valid is New's check of the tiers.
func (t *tiered) valid() error {
	if t.fast == nil || t.durable == nil {
		return errors.New("idem: NewTiered: a tier is nil")
	}
	return nil
}

// minFastBudget is the least time a call to the fast tier is given.
const minFastBudget = 5 * time.Millisecond

// durableCtx bounds a call to the durable tier made before one to the fast
// tier (fast is that call's token) to half the time left, so that a
// stalled durable tier leaves the fast one its share.
func durableCtx(ctx context.Context, fast string) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok || fast == "" {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
}

// fastCall runs op on the fast tier within half the time left, through its
// breaker.
func (t *tiered) fastCall(ctx context.Context, op func(context.Context) error) error {
	budget := defaultStoreTimeout / 2
	if d, ok := ctx.Deadline(); ok {
		budget = time.Until(d) / 2
	}
	if budget < minFastBudget {
		// No time left: a failure now would say nothing of the fast tier,
		// and must not open its breaker (duplicates would then skip its
		// locks).
		return context.DeadlineExceeded
	}
	if !t.brk.allow() {
		return errCircuitOpen
	}
	fctx, cancel := context.WithTimeout(ctx, budget)
	err := op(fctx)
	cancel()
	t.brk.done(err) // its changes go unreported: the fast tier's errors say them
	return err
}

// EnforcesQuota reports whether both tiers enforce Config.Quota: each
// counts the keys it locks, the fast one first, so that either alone keeps
// the bound while the other is down.
func (t *tiered) EnforcesQuota() bool { return enforcesQuota(t.fast) && enforcesQuota(t.durable) }

// SetObserver implements notifier.
func (t *tiered) SetObserver(observe func(Event)) {
	t.mu.Lock()
	t.observe = observe
	t.mu.Unlock()
}

// SetInvalidate implements Invalidator: purges announced by either tier
// reach the Engine's replay cache, and so do this store's own purges.
func (t *tiered) SetInvalidate(invalidate func(key string)) {
	t.mu.Lock()
	t.invalidate = append(t.invalidate, invalidate)
	t.mu.Unlock()
	for _, s := range []Store{t.fast, t.durable} {
		// Through a wrapper too, such as a metrics InstrumentStore of a tier.
		if i, ok := find[Invalidator](s); ok {
			i.SetInvalidate(invalidate)
		}
	}
}

// fallback reports that tier failed for op and the other answered.
func (t *tiered) fallback(ctx context.Context, tier, op string, err error) {
	t.mu.Lock()
	observe := t.observe
	t.mu.Unlock()
	if observe == nil {
		return
	}
	ev := Event{Context: ctx, Outcome: OutcomeFallback, Method: op, Err: fmt.Errorf("idem: %s tier: %w", tier, err)}
	if l := callLease(ctx); l != nil {
		ev.Key, ev.Scope, ev.Route, ev.Transport = l.ev.Key, l.ev.Scope, l.ev.Route, l.ev.Transport
	}
	observe(ev)
}

// The marker is a record the tiered store keeps in the fast tier under
// keptKey (no key of the Engine's: those are hex), whose CompletedAt says
// since when the fast tier has held every record stored through the
// tiered store. A fast tier that loses its data (a restart without
// persistence, FLUSHALL, a failover to an empty replica) loses the marker
// too, and one that names its server (runIDer) and comes back as another
// one (a restart, a failover) has another's; the next read writes a new
// one. A record that reached the durable tier and not the fast one (the
// fast tier down or failing when it was stored) makes the process drop
// the marker at the fast tier's next answer (missed, tend). While the
// marker is younger than a call's record TTL, or a miss is known and the
// marker not yet dropped, the fast tier's "free" may be a completed key
// whose record it lost, and a call under FailClosed does not fall back to
// the fast tier alone (standIn).
const (
	keptKey   = "idem-tiered-kept"
	keptTTL   = 10 * 365 * 24 * time.Hour
	keptEvery = time.Minute // how often a process reads the marker at least
)

// runIDer is a fast tier that names the server that holds a key, a name
// that changes when the server restarts or another takes its place
// (redislock's Store.RunID): the marker keeps it, so that a fast tier back
// from a restart or a failover with older data (a snapshot, an append-only
// file a second behind, a replica that lagged) counts as one that lost its
// data.
type runIDer interface {
	RunID(ctx context.Context, key string) (string, error)
}

// kept returns how long the fast tier has held every record stored through
// the tiered store: the age of the marker, 0 if it wrote the marker now.
// A marker of another server (runIDer), or corrupt, is dropped and
// written anew.
func (t *tiered) kept(ctx context.Context) (time.Duration, error) {
	ctx = context.WithValue(ctx, quotaKey{}, nil) // the marker is no key of a scope
	var (
		rec   []byte
		token string
		run   string
	)
	acquire := func() error {
		return t.fastCall(ctx, func(ctx context.Context) (err error) {
			rec, token, err = t.fast.Acquire(ctx, keptKey, fastLease)
			return err
		})
	}
	err := acquire()
	if r, ok := find[runIDer](t.fast); ok && err == nil {
		// Read after the marker: a restart between the two reads is seen.
		err = t.fastCall(ctx, func(ctx context.Context) (err error) {
			run, err = r.RunID(ctx, keptKey)
			return err
		})
		if err != nil && token != "" {
			// The lock taken to write the marker goes: left to expire, it
			// would tell the next reads that another process is writing
			// the marker (ErrInFlight), hiding this error behind a marker
			// 0s old.
			t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, keptKey, token) }) //nolint:errcheck // it expires
		}
	}
	if err == nil && token == "" {
		if r, derr := DecodeRecord(rec); derr == nil && r.Key == run {
			t.keptRead.Store(time.Now().UnixNano())
			return time.Since(r.CompletedAt), nil
		}
		// Another server's, or corrupt: written anew.
		if derr := t.dropKept(ctx); derr != nil {
			return 0, derr
		}
		err = acquire()
	}
	switch {
	case errors.Is(err, ErrInFlight):
		return 0, errKeptWriting
	case err != nil:
		return 0, err
	case token == "":
		return 0, nil // another process wrote it since
	}
	t.keptRead.Store(time.Now().UnixNano())
	now := time.Now()
	r := Record{Key: run, RequestedAt: now, CompletedAt: now, ExpiresAt: now.Add(keptTTL)}
	return 0, t.fastCall(ctx, func(ctx context.Context) error {
		return t.fast.Complete(ctx, keptKey, token, r.appendBinary(nil), keptTTL)
	})
}

// errKeptWriting is kept's error while another process writes the marker:
// it is as young as can be.
var errKeptWriting = errors.New("another process is writing it")

// dropKept deletes the marker; one already gone (the fast tier lost its
// data since) is as good as one dropped.
func (t *tiered) dropKept(ctx context.Context) error {
	a, ok := find[Admin](t.fast)
	if !ok {
		return errors.New("idem: the fast tier cannot drop the tiered store's marker: it is no Admin")
	}
	err := t.fastCall(ctx, func(ctx context.Context) error { return a.Purge(ctx, keptKey) })
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// tend keeps the marker, after a call to the fast tier answered (an
// acquire, a completion): it drops it if a record missed the fast tier,
// and reads it (writing it if it is missing) at least every keptEvery, one
// call of the process at a time, so that a marker lost with the fast
// tier's data is written again soon after.
func (t *tiered) tend(ctx context.Context) {
	if seen := t.misses.Load(); seen != t.dropped.Load() {
		// A miss stays known until a drop issued after it is done, so
		// that standIn refuses meanwhile; a drop counts only the misses
		// seen before it was issued (another call's miss while it is on
		// its way is not covered: the marker it drops may be older than
		// one written since). A marker being written (ErrInFlight) may be
		// dated before the miss: dropped at a later call.
		if err := t.dropKept(ctx); err != nil {
			return
		}
		for {
			d := t.dropped.Load()
			if d >= seen || t.dropped.CompareAndSwap(d, seen) {
				break
			}
		}
		t.kept(ctx) //nolint:errcheck // read again within keptEvery
		return
	}
	last := t.keptRead.Load()
	if now := time.Now().UnixNano(); time.Duration(now-last) >= keptEvery && t.keptRead.CompareAndSwap(last, now) {
		t.kept(ctx) //nolint:errcheck // read again within keptEvery
	}
}

// miss counts a record that reached the durable tier and not the fast one.
func (t *tiered) miss() { t.misses.Add(1) }

// missed reports whether a record missed the fast tier and no drop of the
// marker issued since is done.
func (t *tiered) missed() bool { return t.misses.Load() != t.dropped.Load() }

// answered reports whether err, of a call to the fast tier, is its answer
// (nil, a lock, a quota) rather than a failure to reach it.
func answered(err error) bool {
	return err == nil || errors.Is(err, ErrInFlight) || errors.Is(err, ErrQuotaExceeded)
}

// standIn reports whether the fast tier's lock alone may hold the key of
// the call of ctx, the durable tier having failed: always without FailClosed
// (the alternative is to run unprotected) or outside a call; under
// FailClosed, if the fast tier has held every record for at least the
// call's record TTL, so that its "free" is not a completed key whose
// record it lost. Otherwise the error to return: err, and why.
func (t *tiered) standIn(ctx context.Context, err error) error {
	l := callLease(ctx)
	if l == nil || !l.e.cfg.FailClosed {
		return nil
	}
	if t.missed() {
		return fmt.Errorf("%w; the fast tier cannot hold the key alone: a record missed it, and its marker is not dropped yet", err)
	}
	kept, kerr := t.kept(ctx)
	switch {
	case kerr != nil:
		return fmt.Errorf("%w; the fast tier cannot hold the key alone: its marker: %v", err, kerr)
	case kept < l.ttl:
		return fmt.Errorf("%w; the fast tier cannot hold the key alone: it has held every record for %v, less than the records' TTL",
			err, kept.Round(time.Second))
	}
	return nil
}

// tieredToken joins the tiers' tokens; either may be empty (a tier down).
func tieredToken(fast, durable string) string { return fast + "|" + durable }

func splitTieredToken(token string) (fast, durable string) {
	fast, durable, _ = strings.Cut(token, "|")
	return fast, durable
}

// Acquire implements Store.
func (t *tiered) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	var rec []byte
	var ft string
	err := t.fastCall(ctx, func(ctx context.Context) (err error) {
		rec, ft, err = t.fast.Acquire(ctx, key, lockTTL)
		return err
	})
	if answered(err) {
		t.tend(ctx)
	}
	switch {
	case err == nil && ft == "":
		return rec, "", nil // a replay
	case errors.Is(err, ErrInFlight), errors.Is(err, ErrQuotaExceeded):
		// The fast tier's lock may be one writing a lost record back, or
		// one a stalled Redis took late, and a quota refusal may be of a
		// key whose record the fast tier lost: the durable tier may hold
		// the record, which is then the answer (a read; it takes no lock).
		if d, ok := t.durable.(Admin); ok {
			if st, derr := d.Inspect(ctx, key); derr == nil && st.Record != nil {
				return st.Record, "", nil
			}
		}
		return nil, "", err
	case err != nil:
		rec, dt, derr := t.durable.Acquire(ctx, key, lockTTL)
		if derr != nil {
			return nil, "", derr
		}
		t.fallback(ctx, "fast", "acquire", err)
		if dt == "" {
			return rec, "", nil
		}
		return nil, tieredToken("", dt), nil
	}
	// Half the time left: a durable tier that stalls leaves the fast one
	// the time to read the marker (standIn) or release its lock.
	dctx, cancel := durableCtx(ctx, ft)
	rec, dt, err := t.durable.Acquire(dctx, key, lockTTL)
	cancel()
	switch {
	case err == nil && dt == "":
		// The fast tier lost the record: write it back, with what is left
		// of its TTL.
		if r, derr := DecodeRecord(rec); derr == nil && time.Until(r.ExpiresAt) > 0 {
			t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Complete(ctx, key, ft, rec, time.Until(r.ExpiresAt)) }) //nolint:errcheck // a cache fill
		} else {
			t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, key, ft) }) //nolint:errcheck
		}
		return rec, "", nil
	case err == nil:
		return nil, tieredToken(ft, dt), nil
	case errors.Is(err, ErrInFlight), errors.Is(err, ErrQuotaExceeded):
		// Held in the durable tier only: taken while the fast one was down;
		// or over the quota as the durable tier counts it.
		t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, key, ft) }) //nolint:errcheck
		return nil, "", err
	}
	if serr := t.standIn(ctx, err); serr != nil {
		t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, key, ft) }) //nolint:errcheck
		return nil, "", serr
	}
	t.fallback(ctx, "durable", "acquire", err)
	return nil, tieredToken(ft, ""), nil
}

// renew implements renewer. A fallback lock (the fast tier's alone, taken
// while the durable tier was down) is extended by fastLease at a time: a
// crash holds the key no longer. A lock one of whose parts is missing (the
// fast tier's, down when the key was taken; a part found lost) or failed
// to refresh is refreshed every few seconds, so that the part is back soon
// after its tier answers again (Refresh).
func (t *tiered) renew(key, token string) (ttl, every time.Duration) {
	ft, dt, doubt := t.parts(key, token)
	oft, odt := splitTieredToken(token)
	if odt == "" {
		ttl = fastLease
	}
	if ft == "" || dt == "" || doubt || oft == "" {
		every = fastLease / 3
	}
	return ttl, every
}

var _ renewer = (*tiered)(nil)

// partsKey is the key of tiered.held: a lease's store key and token.
type partsKey struct{ key, token string }

// heldParts is what a lease's locks are when its token no longer says them
// (tiered.held): a part taken since (the durable tier's lock of a fallback
// lock; the fast tier's of a key the durable tier alone held), or found
// lost ("", until taken again); or a part in doubt (its tier failed to
// refresh it).
type heldParts struct {
	ft, dt string
	doubt  bool
	until  time.Time // when the parts expire unless refreshed: a lease that ends with neither Complete nor Release leaves its entry until then
}

// parts returns the locks that the lease of token holds now.
func (t *tiered) parts(key, token string) (ft, dt string, doubt bool) {
	t.heldMu.Lock()
	p, ok := t.held[partsKey{key, token}]
	t.heldMu.Unlock()
	if ok {
		return p.ft, p.dt, p.doubt
	}
	ft, dt = splitTieredToken(token)
	return ft, dt, false
}

// setParts records the locks that the lease of token holds now, or
// forgets them if its token says them or none is held.
func (t *tiered) setParts(key, token string, p heldParts) {
	t.heldMu.Lock()
	defer t.heldMu.Unlock()
	if p.ft == "" && p.dt == "" || tieredToken(p.ft, p.dt) == token && !p.doubt {
		delete(t.held, partsKey{key, token})
		return
	}
	if len(t.held) >= heldSweep {
		now := time.Now()
		for k, q := range t.held {
			if now.After(q.until) {
				delete(t.held, k) // a lease that ended with neither Complete nor Release
			}
		}
	}
	t.held[partsKey{key, token}] = p
}

// heldSweep is how many leases' parts setParts keeps before it looks for
// expired ones.
const heldSweep = 64

// endParts is parts for a lease that ends: it forgets them, and returns
// them as a token. A lease that ends with neither Complete nor Release (a
// record that could not be stored, its lock left to expire) leaves them
// until they expire (setParts).
func (t *tiered) endParts(key, token string) string {
	t.heldMu.Lock()
	defer t.heldMu.Unlock()
	if p, ok := t.held[partsKey{key, token}]; ok {
		delete(t.held, partsKey{key, token})
		return tieredToken(p.ft, p.dt)
	}
	return token
}

// heldByTx starts the durable part of a tieredTxn's token: the durable
// tier's transaction holds the key, and Refresh extends the fast tier's
// lock alone. A counter follows, so that a token without a fast lock is
// still one lease's. No store's token holds a NUL byte.
const heldByTx = "\x00tx"

// inTx reports whether dt, the durable part of a token, is a transaction.
func inTx(dt string) bool { return strings.HasPrefix(dt, heldByTx) }

// Complete implements Store: the durable tier first, whose answer counts,
// then the fast one.
func (t *tiered) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	ft, dt := splitTieredToken(t.endParts(key, token))
	var derr error
	if dt != "" {
		dctx, cancel := durableCtx(ctx, ft)
		derr = t.durable.Complete(dctx, key, dt, record, ttl)
		cancel()
		if errors.Is(derr, ErrLockLost) {
			if ft != "" {
				t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, key, ft) }) //nolint:errcheck
			}
			return derr
		}
	}
	if ft == "" {
		if derr == nil {
			t.miss()
		}
		return derr
	}
	ferr := t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Complete(ctx, key, ft, record, ttl) })
	if ferr == nil {
		t.tend(ctx)
	}
	switch {
	case dt == "" && !errors.Is(ferr, ErrLockLost):
		// The fast tier alone held the key: the durable tier gets the
		// record too if it answers now, and is the one that holds it if
		// the fast tier failed to (a duplicate meeting the fast tier's
		// lock reads it there).
		if kerr := t.keepDurable(ctx, key, record, ttl); kerr != nil {
			t.fallback(ctx, "durable", "complete", kerr)
			return ferr
		}
		if ferr != nil {
			t.miss()
			t.fallback(ctx, "fast", "complete", ferr)
		}
		return nil
	case dt == "" || derr != nil && ferr == nil:
		if derr != nil {
			t.fallback(ctx, "durable", "complete", derr)
		}
		return ferr // the fast tier alone holds the record
	case ferr != nil:
		if derr == nil {
			t.miss()
		}
		t.fallback(ctx, "fast", "complete", ferr)
	}
	return derr
}

// keepDurable stores the record of a key that the fast tier alone held
// (the durable tier was down, or slower than its share of the time, when
// the key was taken) in the durable tier, within what is left of ctx's
// time. It takes the durable tier's lock of the key first, outside any
// quota (the key was admitted when it was taken). It returns nil if the
// durable tier now holds the record, errDurableRecord if it held one
// already, and ErrInFlight if another call holds its lock there (a call
// that ran the key while the fast tier was down, or this call's own lock,
// taken by a durable call whose answer was lost).
func (t *tiered) keepDurable(ctx context.Context, key string, record []byte, ttl time.Duration) error {
	ctx = context.WithValue(ctx, quotaKey{}, nil)
	_, dt, err := t.durable.Acquire(ctx, key, fastLease)
	switch {
	case err != nil:
		return err
	case dt == "":
		return errDurableRecord
	}
	if err = t.durable.Complete(ctx, key, dt, record, ttl); err != nil {
		// Its own time: ctx's may be what the Complete ran out of.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultStoreTimeout)
		t.durable.Release(rctx, key, dt) //nolint:errcheck // it expires
		cancel()
	}
	return err
}

// errDurableRecord is keepDurable's error for a key of which the durable
// tier holds a record already: another call ran the key there, the fast
// tier being out of its reach.
var errDurableRecord = errors.New("idem: the durable tier holds another record of the key")

// Release implements Store.
func (t *tiered) Release(ctx context.Context, key, token string) error {
	return t.both(ctx, t.endParts(key, token), "release", func(ctx context.Context, s Store, tok string) error { return s.Release(ctx, key, tok) })
}

// Refresh implements Store: each part of the lease's locks is refreshed;
// a part found lost, or missing, is taken again if its tier answers, as
// long as the other part holds the key or may (its tier failed). The lock
// is lost only when no part holds the key. The Engine never runs a refresh
// and the lease's Complete or Release at once.
func (t *tiered) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	ft, dt, _ := t.parts(key, token)
	fastTTL := lockTTL
	if oft, _ := splitTieredToken(token); oft == "" {
		// Taken since the key was (renew: refreshed every few seconds): a
		// crash, or a release that fails, holds the key no longer.
		fastTTL = min(lockTTL, fastLease)
	}
	derr, ferr := ErrLockLost, ErrLockLost // a part missing counts as lost
	switch {
	case inTx(dt):
		derr = nil // the transaction holds the key
	case dt != "":
		dctx, cancel := durableCtx(ctx, ft)
		derr = t.durable.Refresh(dctx, key, dt, lockTTL)
		cancel()
	}
	if ft != "" {
		ferr = t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Refresh(ctx, key, ft, fastTTL) })
	}
	dlost, flost := errors.Is(derr, ErrLockLost), errors.Is(ferr, ErrLockLost)
	if dlost && flost {
		t.setParts(key, token, heldParts{})
		return ErrLockLost
	}
	ctx = context.WithValue(ctx, quotaKey{}, nil) // admitted when taken
	took := false                                 // a part taken back
	if flost {
		// The fast tier lost its data, the lock expired while it was out
		// of reach, or it was down when the key was taken: a duplicate
		// must meet this lock there if the durable tier stalls.
		// Taken for fastLease, as a new lock is, so that one whose answer
		// is lost holds the key no longer; the next refresh, soon
		// (doubt), extends it.
		ft = ""
		t.fastCall(ctx, func(ctx context.Context) (err error) { //nolint:errcheck // down still, or held by a duplicate that meets the durable lock
			_, ft, err = t.fast.Acquire(ctx, key, min(fastTTL, fastLease))
			return err
		})
		if ft != "" {
			ferr, took = nil, true
		}
	}
	if dlost {
		// Taken while the durable tier was down, or expired there while
		// it was out of reach: a duplicate must meet it if the fast tier
		// loses its data.
		dctx, cancel := durableCtx(ctx, ft)
		if _, dt, _ = t.durable.Acquire(dctx, key, min(lockTTL, fastLease)); dt != "" {
			derr, took = nil, true
		}
		cancel()
	}
	doubt := took || ft != "" && ferr != nil || dt != "" && derr != nil
	t.setParts(key, token, heldParts{ft: ft, dt: dt, doubt: doubt, until: time.Now().Add(lockTTL)})
	switch {
	case ferr != nil && derr != nil:
		if dt != "" {
			return derr
		}
		return ferr
	case ferr != nil && ft != "":
		t.fallback(ctx, "fast", "refresh", ferr)
	case derr != nil && dt != "":
		t.fallback(ctx, "durable", "refresh", derr)
	}
	return nil
}

// both runs op on each tier that holds a part of token, the durable one
// first, whose answer counts when it holds one.
func (t *tiered) both(ctx context.Context, token, name string, op func(context.Context, Store, string) error) error {
	ft, dt := splitTieredToken(token)
	if inTx(dt) {
		dt = ""
	}
	var derr error
	if dt != "" {
		dctx, cancel := durableCtx(ctx, ft)
		derr = op(dctx, t.durable, dt)
		cancel()
	}
	if ft == "" {
		return derr
	}
	ferr := t.fastCall(ctx, func(ctx context.Context) error { return op(ctx, t.fast, ft) })
	if dt == "" {
		return ferr
	}
	if ferr != nil && derr == nil && !errors.Is(ferr, ErrLockLost) {
		t.fallback(ctx, "fast", name, ferr)
	}
	return derr
}

// Inspect implements Admin: the durable tier's state, or the fast one's.
func (t *tiered) Inspect(ctx context.Context, key string) (KeyState, error) {
	d, f, err := t.admins()
	if err != nil {
		return KeyState{}, err
	}
	st, err := d.Inspect(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return f.Inspect(ctx, key)
	}
	return st, err
}

// Purge implements Admin: the record goes from both tiers, under the fast
// tier's lock of the key, so that no request writes the record back to
// the fast tier meanwhile. With the fast tier down, the durable tier's
// record goes and Purge returns an error wrapping the fast tier's: its
// copy, if it still has one when it comes back, replays until it expires.
func (t *tiered) Purge(ctx context.Context, key string) error {
	d, f, err := t.admins()
	if err != nil {
		return err
	}
	purged := false // the fast tier's copy
	for range 3 {
		var ft string
		err := t.fastCall(ctx, func(ctx context.Context) (err error) {
			_, ft, err = t.fast.Acquire(ctx, key, minInitialLease)
			return err
		})
		switch {
		case errors.Is(err, ErrInFlight):
			return err
		case err != nil:
			done := "purged from the durable tier only"
			if derr := d.Purge(ctx, key); errors.Is(derr, ErrNotFound) {
				done = "not in the durable tier"
			} else if derr != nil {
				return derr
			}
			return fmt.Errorf("idem: %s: the fast tier failed (%w): a copy it keeps replays until it expires; purge again once it answers", done, err)
		case ft == "": // the fast tier's copy of the record
			if err := f.Purge(ctx, key); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			purged = true
			continue
		}
		err = d.Purge(ctx, key)
		t.fast.Release(ctx, key, ft) //nolint:errcheck // it expires
		if errors.Is(err, ErrNotFound) && purged {
			err = nil
		}
		if err == nil {
			t.mu.Lock()
			invalidate := t.invalidate // appended to, never changed
			t.mu.Unlock()
			for _, f := range invalidate {
				f(key) // this process's copies; the fast tier told the others if it had one
			}
		}
		return err
	}
	return ErrInFlight
}

// Unlock implements Admin: the lock goes from both tiers, durable first.
// ErrNotFound only if neither holds one, ErrInFlight if either refuses. If
// the fast tier fails after the durable one's lock went, the error says so.
func (t *tiered) Unlock(ctx context.Context, key string) error {
	d, f, err := t.admins()
	if err != nil {
		return err
	}
	derr := d.Unlock(ctx, key)
	if derr != nil && !errors.Is(derr, ErrNotFound) {
		return derr
	}
	ferr := f.Unlock(ctx, key)
	switch {
	case ferr == nil, errors.Is(ferr, ErrNotFound) && derr == nil:
		return nil
	case derr == nil && !errors.Is(ferr, ErrInFlight):
		return fmt.Errorf("idem: unlocked in the durable tier only: the fast tier failed (%w): unlock again once it answers", ferr)
	}
	return ferr
}

// InFlight implements Admin: the locks of both tiers, each key once. When
// one tier fails, the other's locks: the durable tier holds every lock
// taken while it answers, the fast tier every lock taken while it answers
// (those taken while the durable one was down among them), so that a
// tier's outage, when the locks matter most, leaves neither the list nor
// idemprom's stuck-keys gauge empty. An error only if both fail. The tiers
// are asked at once, so that one that stalls until ctx's deadline does not
// leave the other no time.
func (t *tiered) InFlight(ctx context.Context, limit int) ([]KeyState, error) {
	d, f, err := t.admins()
	if err != nil {
		return nil, err
	}
	var (
		fast []KeyState
		ferr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		fast, ferr = f.InFlight(ctx, limit)
	}()
	out, derr := d.InFlight(ctx, limit)
	<-done
	switch {
	case derr != nil && ferr != nil:
		return nil, errors.Join(derr, ferr)
	case derr != nil:
		out = nil
	case ferr != nil:
		fast = nil
	}
	for _, st := range fast {
		if !slices.ContainsFunc(out, func(o KeyState) bool { return o.Key == st.Key }) {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b KeyState) int { return a.LockedAt.Compare(b.LockedAt) })
	return out[:min(limit, len(out))], nil
}

// errNoAdmin reports a tier that does not implement Admin.
var errNoAdmin = errors.New("idem: a tier of the store does not implement core.Admin")

func (t *tiered) admins() (durable, fast Admin, err error) {
	d, ok1 := find[Admin](t.durable) // through a wrapper too, as New's
	f, ok2 := find[Admin](t.fast)
	if !ok1 || !ok2 {
		return nil, nil, errNoAdmin
	}
	return d, f, nil
}

// checkpointers returns the tiers as Checkpointers.
func (t *tiered) checkpointers() (durable, fast Checkpointer, err error) {
	d, ok1 := find[Checkpointer](t.durable) // through a wrapper too, as New's
	f, ok2 := find[Checkpointer](t.fast)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%w: a tier is not one", errNoCheckpoints)
	}
	return d, f, nil
}

// SaveStep implements Checkpointer: in the durable tier if it holds the
// lock, else (taken while it was down) in the fast one.
func (t *tiered) SaveStep(ctx context.Context, key, token, step string, result []byte, ttl time.Duration) error {
	d, f, err := t.checkpointers()
	if err != nil {
		return err
	}
	ft, dt, _ := t.parts(key, token)
	switch {
	case dt != "":
		return d.SaveStep(ctx, key, dt, step, result, ttl)
	case ft == "":
		return ErrLockLost
	}
	return t.fastCall(ctx, func(ctx context.Context) error { return f.SaveStep(ctx, key, ft, step, result, ttl) })
}

// LoadSteps implements Checkpointer: the checkpoints of both tiers, the
// durable one's first; an error only if the durable tier fails and the
// fast one too.
func (t *tiered) LoadSteps(ctx context.Context, key string) (map[string][]byte, error) {
	d, f, err := t.checkpointers()
	if err != nil {
		return nil, err
	}
	dctx, cancel := durableCtx(ctx, "fast")
	steps, derr := d.LoadSteps(dctx, key)
	cancel()
	var fast map[string][]byte
	ferr := t.fastCall(ctx, func(ctx context.Context) (err error) {
		fast, err = f.LoadSteps(ctx, key)
		return err
	})
	switch {
	case derr != nil && ferr != nil:
		return nil, derr
	case derr != nil:
		t.fallback(ctx, "durable", "load steps", derr)
	}
	if steps == nil {
		steps = make(map[string][]byte, len(fast))
	}
	for step, result := range fast {
		if _, ok := steps[step]; !ok {
			steps[step] = result
		}
	}
	return steps, nil
}

// tieredTx is the tiered store over a durable TxStore.
type tieredTx struct {
	*tiered
	tx TxStore
}

// Begin implements TxStore: a record in the fast tier is a replay, and a
// fast lock a conflict (or the durable tier's record, as in Acquire);
// else the durable tier's transaction holds the key, and the fast tier's
// lock, taken and refreshed for the initial lease at a time (a crashed
// process's lock holds off retries that long: tieredTxn), is completed
// with the record after the commit.
// With the durable tier down, the fast tier's lock alone holds the key, as
// in Acquire (under FailClosed, if the marker says it may): the work runs
// protected, without a transaction (fastTxn). A busy durable tier
// (ErrStoreBusy) is treated the same way: the fast lock holds the key;
// with the fast tier down too, the call is refused.
func (t *tieredTx) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, Tx, error) {
	var (
		rec []byte
		ft  string
	)
	err := t.fastCall(ctx, func(ctx context.Context) (err error) {
		rec, ft, err = t.fast.Acquire(ctx, key, min(idle, fastLease))
		return err
	})
	if answered(err) {
		t.tend(ctx)
	}
	switch {
	case err == nil && ft == "":
		return rec, nil, nil
	case errors.Is(err, ErrInFlight), errors.Is(err, ErrQuotaExceeded):
		if d, ok := t.durable.(Admin); ok {
			if st, derr := d.Inspect(ctx, key); derr == nil && st.Record != nil {
				return st.Record, nil, nil
			}
		}
		return nil, nil, err
	case err != nil:
		t.fallback(ctx, "fast", "begin", err)
	}
	dctx, cancel := durableCtx(ctx, ft)
	rec, tx, err := t.tx.Begin(dctx, key, idle)
	cancel()
	if err != nil && ft != "" && !errors.Is(err, ErrInFlight) && !errors.Is(err, ErrQuotaExceeded) {
		// The fast lock alone holds the key, if it still does and may: a
		// lease, which the Engine refreshes (fastTxn.lease).
		if serr := t.standIn(ctx, err); serr != nil {
			err = serr
		} else if ferr := t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Refresh(ctx, key, ft, fastLease) }); ferr == nil {
			t.fallback(ctx, "durable", "begin", err)
			return nil, &fastTxn{t: t, key: key, ft: ft}, nil
		}
	}
	if err != nil || tx == nil {
		if ft != "" {
			t.endFast(ctx, key, ft, rec) //nolint:errcheck // a cache fill
		}
		return rec, nil, err
	}
	held := heldByTx + strconv.FormatUint(t.txSeq.Add(1), 36)
	return rec, &tieredTxn{Tx: tx, t: t, key: key, ft: ft, held: held, taken: min(idle, fastLease)}, nil
}

// fastLease is how long tieredTx.Begin takes the fast tier's lock for: a
// crashed process's lock holds off retries that long.
const fastLease = minInitialLease

// endFast completes the fast tier's lock ft with rec, the record of the
// key, or releases it if there is none. It returns the fast tier's error
// of the record.
func (t *tieredTx) endFast(ctx context.Context, key, ft string, rec []byte) error {
	if r, err := DecodeRecord(rec); rec != nil && err == nil && time.Until(r.ExpiresAt) > 0 {
		return t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Complete(ctx, key, ft, rec, time.Until(r.ExpiresAt)) })
	}
	t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, key, ft) }) //nolint:errcheck // it expires
	return nil
}

// tieredTxn is the durable tier's transaction and the fast tier's lock,
// which the Engine refreshes (leasedTx) while the work runs, each time for
// what it was taken for (fastLease, or the Engine's initial lease if
// shorter): a crashed process's lock holds off retries that long, and a
// duplicate meets the lock while the durable tier stalls (its Begin timing
// out would otherwise fall back to a fast lock of its own and run).
// Without a fast lock (the fast tier was down), Refresh takes one once
// the fast tier answers.
type tieredTxn struct {
	Tx
	t     *tieredTx
	key   string
	ft    string        // the fast tier's lock when the transaction began; "" for none
	held  string        // the token's durable part (heldByTx)
	taken time.Duration // what the fast tier's lock is taken for
	ended bool          // the fast tier's lock was ended
}

func (x *tieredTxn) lease() (string, time.Duration, time.Duration) {
	return tieredToken(x.ft, x.held), x.taken, x.taken
}

// Unwrap returns the durable tier's transaction (Step finds a StepTx
// behind it).
func (x *tieredTxn) Unwrap() Tx { return x.Tx }

// Commit commits the durable tier's transaction, then completes the fast
// tier's lock. A durable ErrLockLost is returned as a plain error: the
// lease's token is the fast lock's, and the Engine takes ErrLockLost from
// a leasedTx for its loss, whose work stands (leasedTx).
func (x *tieredTxn) Commit(ctx context.Context, record []byte, ttl time.Duration, failed bool) error {
	err := x.Tx.Commit(ctx, record, ttl, failed)
	if err != nil {
		record = nil
	}
	x.endFast(ctx, record)
	if errors.Is(err, ErrLockLost) {
		return fmt.Errorf("idem: the durable tier's commit: %v", err)
	}
	return err
}

func (x *tieredTxn) Rollback(ctx context.Context) error {
	err := x.Tx.Rollback(ctx)
	x.endFast(ctx, nil)
	return err
}

// endFast ends the fast tier's lock, once: the one the lease holds now
// (Refresh may have taken it again, or since). A committed record the fast
// tier did not take is one it misses (tiered.missed).
func (x *tieredTxn) endFast(ctx context.Context, record []byte) {
	if x.ended {
		return
	}
	x.ended = true
	ft, _ := splitTieredToken(x.t.endParts(x.key, tieredToken(x.ft, x.held)))
	if (ft == "" || x.t.endFast(ctx, x.key, ft, record) != nil) && record != nil {
		x.t.miss()
	}
}

// fastTxn is a key held by the fast tier's lock alone, the durable tier
// being down or slow: no transaction, a lock that the Engine refreshes
// (leasedTx). Commit stores the record as the lease mode does (Complete:
// the fast tier, then the durable one if it answers by then). The work's
// effects happened whatever the store does, so a store that fails is a
// fallback event, not a failed commit (which would answer 503 and release
// the lock for a retry to run the work again): the lock is left to expire.
// Steps checkpoint in the fast tier (RunStep).
type fastTxn struct {
	t   *tieredTx
	key string
	ft  string
}

// lease: taken and refreshed for fastLease, so that the refresh that takes
// the durable tier's lock too (Refresh) comes every few seconds until
// it does, and a crash holds the key no longer.
func (x *fastTxn) lease() (string, time.Duration, time.Duration) {
	return x.token(), fastLease, fastLease
}

func (x *fastTxn) token() string { return tieredToken(x.ft, "") }

func (x *fastTxn) Context(ctx context.Context) context.Context { return ctx }

func (x *fastTxn) Commit(ctx context.Context, record []byte, ttl time.Duration, _ bool) error {
	err := x.t.Complete(ctx, x.key, x.token(), record, ttl)
	switch {
	case errors.Is(err, ErrLockLost):
		return err
	case err != nil:
		x.t.fallback(ctx, "fast", "complete", err)
	}
	return nil
}

func (x *fastTxn) Rollback(ctx context.Context) error { return x.t.Release(ctx, x.key, x.token()) }

// RunStep implements StepTx: fn, then its checkpoint in the fast tier.
func (x *fastTxn) RunStep(ctx context.Context, step string, ttl time.Duration, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	result, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	return result, x.t.SaveStep(ctx, x.key, x.token(), step, result, ttl)
}
