package core

import (
	"context"
	"sync"
	"time"
)

// StoreOp is a store operation, as InstrumentStore reports it.
type StoreOp int

// Store operations; NumStoreOps counts them, for arrays indexed by them.
const (
	OpAcquire StoreOp = iota
	OpComplete
	OpRelease
	OpRefresh
	NumStoreOps
)

// String returns "acquire", "complete", "release" or "refresh".
func (o StoreOp) String() string {
	if o < 0 || o >= NumStoreOps {
		return "unknown"
	}
	return [...]string{"acquire", "complete", "release", "refresh"}[o]
}

// A StoreObserver receives each call of a store wrapped by InstrumentStore:
// its operation, duration and error, and held, the change it made to the
// locks this process holds: +1 for an Acquire that took one, -1 for the
// Complete or Release that ended it, else 0.
type StoreObserver func(ctx context.Context, op StoreOp, d time.Duration, err error, held int)

// InstrumentStore returns s reporting each call to observe, for metrics
// (idemprom, idemotel). The result implements Waiter and Admin if s does,
// passed through and not reported, and unwraps to s (Unwrap), so that New
// finds a Notifier or Invalidator behind it.
func InstrumentStore(s Store, observe StoreObserver) Store {
	is := &instrumented{Store: s, observe: observe, held: make(map[heldLock]struct{})}
	w, waits := s.(Waiter)
	a, admin := s.(Admin)
	switch {
	case waits && admin:
		return &struct {
			*instrumented
			Waiter
			Admin
		}{is, w, a}
	case waits:
		return &struct {
			*instrumented
			Waiter
		}{is, w}
	case admin:
		return &struct {
			*instrumented
			Admin
		}{is, a}
	}
	return is
}

type heldLock struct{ key, token string }

type instrumented struct {
	Store
	observe StoreObserver

	mu   sync.Mutex
	held map[heldLock]struct{} // so that a lock counts once, whatever is called twice
}

// Unwrap returns the instrumented store.
func (s *instrumented) Unwrap() Store { return s.Store }

func (s *instrumented) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	start := time.Now()
	rec, token, err := s.Store.Acquire(ctx, key, lockTTL)
	held := 0
	if err == nil && token != "" {
		s.mu.Lock()
		if _, ok := s.held[heldLock{key, token}]; !ok {
			s.held[heldLock{key, token}] = struct{}{}
			held = 1
		}
		s.mu.Unlock()
	}
	s.observe(ctx, OpAcquire, time.Since(start), err, held)
	return rec, token, err
}

// Complete and Release end the lock whatever they return: the Engine calls
// neither again for that token.
func (s *instrumented) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	start := time.Now()
	err := s.Store.Complete(ctx, key, token, record, ttl)
	s.observe(ctx, OpComplete, time.Since(start), err, s.drop(key, token))
	return err
}

func (s *instrumented) Release(ctx context.Context, key, token string) error {
	start := time.Now()
	err := s.Store.Release(ctx, key, token)
	s.observe(ctx, OpRelease, time.Since(start), err, s.drop(key, token))
	return err
}

func (s *instrumented) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	start := time.Now()
	err := s.Store.Refresh(ctx, key, token, lockTTL)
	s.observe(ctx, OpRefresh, time.Since(start), err, 0)
	return err
}

// drop forgets a held lock: -1 if it was held, else 0.
func (s *instrumented) drop(key, token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.held[heldLock{key, token}]; ok {
		delete(s.held, heldLock{key, token})
		return -1
	}
	return 0
}
