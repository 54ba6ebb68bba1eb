package idemprom

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idem-go/idem/core"
)

type op int

const (
	opAcquire op = iota
	opComplete
	opRelease
	opRefresh
	numOps
)

func (o op) String() string {
	return [...]string{"acquire", "complete", "release", "refresh"}[o]
}

// InstrumentStore returns s measured by c: the duration and the failures of
// each call, and idempotency_inflight_requests, the locks that s handed to
// this process and that were not completed or released yet. The result
// implements core.Waiter and core.Admin if s does, passed through and not
// measured; it implements no other interface of s.
func (c *Collector) InstrumentStore(s core.Store) core.Store {
	is := &store{Store: s, c: c, held: make(map[lock]struct{})}
	w, waits := s.(core.Waiter)
	a, admin := s.(core.Admin)
	switch {
	case waits && admin:
		return &waitingAdminStore{is, w, a}
	case waits:
		return &waitingStore{is, w}
	case admin:
		return &adminStore{is, a}
	}
	return is
}

// Unwrap returns the measured store, so that core.New finds a
// core.Notifier behind it.
func (s *store) Unwrap() core.Store { return s.Store }

type lock struct{ key, token string }

type store struct {
	core.Store
	c *Collector

	mu   sync.Mutex
	held map[lock]struct{}
}

func (s *store) done(o op, start time.Time, err error) {
	m := s.c.ops[o]
	m.duration.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, core.ErrInFlight) && !errors.Is(err, core.ErrLockLost) {
		m.errors.Inc()
	}
}

func (s *store) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	start := time.Now()
	rec, token, err := s.Store.Acquire(ctx, key, lockTTL)
	s.done(opAcquire, start, err)
	if err == nil && token != "" {
		s.mu.Lock()
		if _, ok := s.held[lock{key, token}]; !ok {
			s.held[lock{key, token}] = struct{}{}
			s.c.inflight.Inc()
		}
		s.mu.Unlock()
	}
	return rec, token, err
}

// Complete and Release end the flight whatever they return: the Engine
// calls neither again for that token.
func (s *store) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	start := time.Now()
	err := s.Store.Complete(ctx, key, token, record, ttl)
	s.done(opComplete, start, err)
	s.drop(key, token)
	return err
}

func (s *store) Release(ctx context.Context, key, token string) error {
	start := time.Now()
	err := s.Store.Release(ctx, key, token)
	s.done(opRelease, start, err)
	s.drop(key, token)
	return err
}

func (s *store) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	start := time.Now()
	err := s.Store.Refresh(ctx, key, token, lockTTL)
	s.done(opRefresh, start, err)
	return err
}

func (s *store) drop(key, token string) {
	s.mu.Lock()
	if _, ok := s.held[lock{key, token}]; ok {
		delete(s.held, lock{key, token})
		s.c.inflight.Dec()
	}
	s.mu.Unlock()
}

// The optional interfaces of the wrapped store, passed through.
type (
	waitingStore struct {
		*store
		core.Waiter
	}
	adminStore struct {
		*store
		core.Admin
	}
	waitingAdminStore struct {
		*store
		core.Waiter
		core.Admin
	}
)
