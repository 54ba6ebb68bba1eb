// Package instrument wraps a core.Store so that each of its calls is
// reported, for metrics: idemprom and idemotel build on it.
//
//	store = instrument.Store(store, func(ctx context.Context, op instrument.Op, d time.Duration, err error, held int) { ... })
package instrument

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idem-go/idem/core"
)

// Op is a store operation, as Store reports it.
type Op int

// Store operations; NumOps counts them, for arrays indexed by them.
const (
	Acquire Op = iota
	Complete
	Release
	Refresh
	NumOps
)

// String returns "acquire", "complete", "release" or "refresh".
func (o Op) String() string {
	if o < 0 || o >= NumOps {
		return "unknown"
	}
	return [...]string{"acquire", "complete", "release", "refresh"}[o]
}

// An Observer receives each call of a store wrapped by Store:
// its operation, duration and error, and held, the change it made to the
// locks this process holds: +1 for an Acquire that took one, -1 for the
// Complete or Release that ended it, else 0; less the locks that the
// Engine left to expire (a record it could not store) and whose last TTL
// has passed, which a call after that reports (the wrapper looks at most
// once a second). Failed says whether
// err is a failure of the store.
type Observer func(ctx context.Context, op Op, d time.Duration, err error, held int)

// Failed reports whether err, the error of a store call, is a failure of
// the store. A key in flight (core.ErrInFlight), a lost lock
// (core.ErrLockLost) and a key refused under Config.Quota
// (core.ErrQuotaExceeded) are answers of a store that works.
func Failed(err error) bool {
	return err != nil && !errors.Is(err, core.ErrInFlight) && !errors.Is(err, core.ErrLockLost) &&
		!errors.Is(err, core.ErrQuotaExceeded)
}

// Store returns s reporting each call to observe. The result implements
// core.Waiter and core.Admin if s does, passed through and not reported,
// and core.TxStore, reported (Begin as Acquire, Commit as Complete,
// Rollback as Release); it unwraps to s (Unwrap() core.Store), so that
// core.New finds its other capabilities behind it. It panics if s or
// observe is nil.
func Store(s core.Store, observe Observer) core.Store {
	if s == nil || observe == nil {
		panic("instrument: Store with a nil store or Observer")
	}
	is := &instrumented{Store: s, observe: observe, held: make(map[heldLock]time.Time)}
	w, waits := s.(core.Waiter)
	a, admin := s.(core.Admin)
	if ts, ok := s.(core.TxStore); ok {
		it := &instrumentedTx{instrumented: is, tx: ts}
		switch {
		case waits && admin:
			return &struct {
				*instrumentedTx
				core.Waiter
				core.Admin
			}{it, w, a}
		case waits:
			return &struct {
				*instrumentedTx
				core.Waiter
			}{it, w}
		case admin:
			return &struct {
				*instrumentedTx
				core.Admin
			}{it, a}
		}
		return it
	}
	switch {
	case waits && admin:
		return &struct {
			*instrumented
			core.Waiter
			core.Admin
		}{is, w, a}
	case waits:
		return &struct {
			*instrumented
			core.Waiter
		}{is, w}
	case admin:
		return &struct {
			*instrumented
			core.Admin
		}{is, a}
	}
	return is
}

type heldLock struct{ key, token string }

type instrumented struct {
	core.Store
	observe Observer

	mu    sync.Mutex
	held  map[heldLock]time.Time // when each expires; a lock counts once, whatever is called twice
	swept time.Time              // when held was last searched for expired locks
}

// sweepEvery is how often held is searched for locks left to expire.
const sweepEvery = time.Second

// Unwrap returns the instrumented store.
func (s *instrumented) Unwrap() core.Store { return s.Store }

func (s *instrumented) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	start := time.Now()
	rec, token, err := s.Store.Acquire(ctx, key, lockTTL)
	now := time.Now()
	s.mu.Lock()
	held := s.sweep(now)
	if err == nil && token != "" {
		if _, ok := s.held[heldLock{key, token}]; !ok {
			held++
		}
		s.held[heldLock{key, token}] = now.Add(lockTTL)
	}
	s.mu.Unlock()
	s.observe(ctx, Acquire, now.Sub(start), err, held)
	return rec, token, err
}

// sweep forgets the held locks whose TTL has passed: the Engine left them
// to expire, neither completed nor released. It returns minus their count,
// and searches at most every sweepEvery. s.mu is held.
func (s *instrumented) sweep(now time.Time) int {
	if now.Sub(s.swept) < sweepEvery {
		return 0
	}
	s.swept = now
	n := 0
	for l, expires := range s.held {
		if !now.Before(expires) {
			delete(s.held, l)
			n--
		}
	}
	return n
}

// Complete and Release end the lock whatever they return: the Engine calls
// neither again for that token.
func (s *instrumented) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	start := time.Now()
	err := s.Store.Complete(ctx, key, token, record, ttl)
	s.observe(ctx, Complete, time.Since(start), err, s.drop(key, token))
	return err
}

func (s *instrumented) Release(ctx context.Context, key, token string) error {
	start := time.Now()
	err := s.Store.Release(ctx, key, token)
	s.observe(ctx, Release, time.Since(start), err, s.drop(key, token))
	return err
}

func (s *instrumented) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	start := time.Now()
	err := s.Store.Refresh(ctx, key, token, lockTTL)
	now := time.Now()
	s.mu.Lock()
	held := s.sweep(now)
	if _, ok := s.held[heldLock{key, token}]; ok && err == nil {
		s.held[heldLock{key, token}] = now.Add(lockTTL)
	}
	s.mu.Unlock()
	s.observe(ctx, Refresh, now.Sub(start), err, held)
	return err
}

// drop forgets a held lock: -1 if it was held, else 0, less the locks
// sweep forgets.
func (s *instrumented) drop(key, token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.sweep(time.Now())
	if _, ok := s.held[heldLock{key, token}]; ok {
		delete(s.held, heldLock{key, token})
		held--
	}
	return held
}

// instrumentedTx is an instrumented TxStore.
type instrumentedTx struct {
	*instrumented
	tx core.TxStore
}

func (s *instrumentedTx) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	start := time.Now()
	rec, tx, err := s.tx.Begin(ctx, key, idle)
	held := 0
	if tx != nil {
		held, tx = 1, &observedTx{Tx: tx, observe: s.observe}
	}
	s.observe(ctx, Acquire, time.Since(start), err, held)
	return rec, tx, err
}

// Unwrap returns the transaction observed, for Step to find a StepTx.
func (t *observedTx) Unwrap() core.Tx { return t.Tx }

// observedTx reports the end of a transaction, once.
type observedTx struct {
	core.Tx
	observe Observer
	once    sync.Once
}

func (t *observedTx) Commit(ctx context.Context, record []byte, ttl time.Duration, failed bool) error {
	start := time.Now()
	err := t.Tx.Commit(ctx, record, ttl, failed)
	t.done(ctx, Complete, start, err)
	return err
}

func (t *observedTx) Rollback(ctx context.Context) error {
	start := time.Now()
	err := t.Tx.Rollback(ctx)
	t.done(ctx, Release, start, err)
	return err
}

func (t *observedTx) done(ctx context.Context, op Op, start time.Time, err error) {
	held := 0
	t.once.Do(func() { held = -1 })
	t.observe(ctx, op, time.Since(start), err, held)
}
