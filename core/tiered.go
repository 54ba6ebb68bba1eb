package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Tiered is a Store of two tiers: a fast one (Redis) in front of a durable
// one (PostgreSQL). Every lock is taken in the durable tier, so a handler
// runs once whichever tier answers; every record is stored there first.
// The fast tier serves replays in one round trip and holds off duplicates;
// when it fails, calls go to the durable tier alone (OutcomeFallback), and
// when it lost its data, records come back from the durable tier and are
// written to it again.
//
// Costs: a replay is one fast round trip (two, and one durable, the first
// time after the fast tier lost the record); a first request two fast and
// two durable round trips; a key in flight one of each (the durable tier
// may hold its record, behind a fast lock taken late). With the durable tier down, locks and records
// live in the fast tier alone: protected, not durable (OutcomeFallback).
// The reasons are in docs/design.md ("Tiered store").
type Tiered struct {
	fast, durable Store
	brk           *breaker // of the fast tier

	mu         sync.Mutex
	observe    func(Event)  // the Engine's; nil until an Engine takes the store
	invalidate func(string) // the Engine's replay cache's; nil without one
}

// NewTiered returns the tiered store of fast in front of durable.
//
// A call to the fast tier gets half the time left to the call (half of
// DefaultStoreTimeout without a deadline), so that the durable tier has the
// other half when it stalls; after DefaultBreakerFailures failures in a row
// the fast tier is left out for DefaultBreakerCooldown, then probed again.
func NewTiered(fast, durable Store) *Tiered {
	return &Tiered{fast: fast, durable: durable,
		brk: &breaker{failures: DefaultBreakerFailures, cooldown: DefaultBreakerCooldown,
			probeFor: DefaultBreakerCooldown + DefaultStoreTimeout, now: time.Now, changed: func(BreakerState) {}}}
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
func (t *Tiered) fastCall(ctx context.Context, op func(context.Context) error) error {
	budget := DefaultStoreTimeout / 2
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
		return ErrCircuitOpen
	}
	fctx, cancel := context.WithTimeout(ctx, budget)
	err := op(fctx)
	cancel()
	t.brk.done(err)
	return err
}

// SetObserver implements Notifier.
func (t *Tiered) SetObserver(observe func(Event)) {
	t.mu.Lock()
	t.observe = observe
	t.mu.Unlock()
}

// SetInvalidate implements Invalidator: purges announced by either tier
// reach the Engine's replay cache, and so do this store's own purges.
func (t *Tiered) SetInvalidate(invalidate func(key string)) {
	t.mu.Lock()
	t.invalidate = invalidate
	t.mu.Unlock()
	for _, s := range []Store{t.fast, t.durable} {
		if i, ok := s.(Invalidator); ok {
			i.SetInvalidate(invalidate)
		}
	}
}

// fallback reports that tier failed for op and the other answered.
func (t *Tiered) fallback(ctx context.Context, tier, op string, err error) {
	t.mu.Lock()
	observe := t.observe
	t.mu.Unlock()
	if observe != nil {
		observe(Event{Context: ctx, Outcome: OutcomeFallback, Method: op, Err: fmt.Errorf("idem: %s tier: %w", tier, err)})
	}
}

// tieredToken joins the tiers' tokens; either may be empty (a tier down).
func tieredToken(fast, durable string) string { return fast + "|" + durable }

func splitTieredToken(token string) (fast, durable string) {
	fast, durable, _ = strings.Cut(token, "|")
	return fast, durable
}

// Acquire implements Store.
func (t *Tiered) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	var rec []byte
	var ft string
	err := t.fastCall(ctx, func(ctx context.Context) (err error) {
		rec, ft, err = t.fast.Acquire(ctx, key, lockTTL)
		return err
	})
	switch {
	case err == nil && ft == "":
		return rec, "", nil // a replay
	case errors.Is(err, ErrInFlight):
		// The fast tier's lock may be one writing a lost record back, or
		// one a stalled Redis took late: the durable tier may hold the
		// record, which is then the answer (a read; it takes no lock).
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
	rec, dt, err := t.durable.Acquire(ctx, key, lockTTL)
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
	case errors.Is(err, ErrInFlight):
		// Held in the durable tier only: taken while the fast one was down.
		t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Release(ctx, key, ft) }) //nolint:errcheck
		return nil, "", err
	}
	t.fallback(ctx, "durable", "acquire", err)
	return nil, tieredToken(ft, ""), nil
}

// Complete implements Store: the durable tier first, whose answer counts,
// then the fast one.
func (t *Tiered) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	ft, dt := splitTieredToken(token)
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
		return derr
	}
	ferr := t.fastCall(ctx, func(ctx context.Context) error { return t.fast.Complete(ctx, key, ft, record, ttl) })
	switch {
	case dt == "" || derr != nil && ferr == nil:
		if derr != nil {
			t.fallback(ctx, "durable", "complete", derr)
		}
		return ferr // the fast tier alone holds the record
	case ferr != nil:
		t.fallback(ctx, "fast", "complete", ferr)
	}
	return derr
}

// Release implements Store.
func (t *Tiered) Release(ctx context.Context, key, token string) error {
	return t.both(ctx, token, "release", func(ctx context.Context, s Store, tok string) error { return s.Release(ctx, key, tok) })
}

// Refresh implements Store.
func (t *Tiered) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	return t.both(ctx, token, "refresh", func(ctx context.Context, s Store, tok string) error {
		return s.Refresh(ctx, key, tok, lockTTL)
	})
}

// both runs op on each tier that holds a part of token, the durable one
// first, whose answer counts when it holds one.
func (t *Tiered) both(ctx context.Context, token, name string, op func(context.Context, Store, string) error) error {
	ft, dt := splitTieredToken(token)
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
func (t *Tiered) Inspect(ctx context.Context, key string) (KeyState, error) {
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
// record goes, and the fast tier's copy, if it still has one when it comes
// back, replays until it expires.
func (t *Tiered) Purge(ctx context.Context, key string) error {
	d, f, err := t.admins()
	if err != nil {
		return err
	}
	purged := false // the fast tier's copy
	for range 3 {
		_, ft, err := t.fast.Acquire(ctx, key, minInitialLease)
		switch {
		case errors.Is(err, ErrInFlight):
			return err
		case err != nil:
			return d.Purge(ctx, key)
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
			invalidate := t.invalidate
			t.mu.Unlock()
			if invalidate != nil {
				invalidate(key) // this process's copy; the fast tier told the others if it had one
			}
		}
		return err
	}
	return ErrInFlight
}

// Unlock implements Admin: the lock goes from both tiers.
func (t *Tiered) Unlock(ctx context.Context, key string) error {
	return t.adminBoth(func(a Admin) error { return a.Unlock(ctx, key) })
}

// InFlight implements Admin: the locks of both tiers, each key once.
func (t *Tiered) InFlight(ctx context.Context, limit int) ([]KeyState, error) {
	d, f, err := t.admins()
	if err != nil {
		return nil, err
	}
	out, err := d.InFlight(ctx, limit)
	if err != nil {
		return nil, err
	}
	fast, err := f.InFlight(ctx, limit)
	if err != nil {
		return nil, err
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

func (t *Tiered) admins() (durable, fast Admin, err error) {
	d, ok1 := t.durable.(Admin)
	f, ok2 := t.fast.(Admin)
	if !ok1 || !ok2 {
		return nil, nil, errNoAdmin
	}
	return d, f, nil
}

// adminBoth runs op on both tiers, durable first: ErrNotFound only if both
// say so, ErrInFlight if either does.
func (t *Tiered) adminBoth(op func(Admin) error) error {
	d, f, err := t.admins()
	if err != nil {
		return err
	}
	derr := op(d)
	if errors.Is(derr, ErrInFlight) || derr != nil && !errors.Is(derr, ErrNotFound) {
		return derr
	}
	ferr := op(f)
	if errors.Is(ferr, ErrNotFound) && derr == nil {
		return nil
	}
	return ferr
}
