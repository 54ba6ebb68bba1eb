package idemprom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/idemprom"
)

// TestStoreConformance runs the store suite over an instrumented
// MemoryStore: the wrapper changes nothing a store promises.
func TestStoreConformance(t *testing.T) {
	m, _ := idemprom.New(nil, nil)
	idemtest.TestStore(t, func(*testing.T) core.Store { return m.InstrumentStore(core.NewMemoryStore(0)) }, idemtest.FakeTime())
}

// TestAdminConformance runs the admin suite over an instrumented
// MemoryStore, whose core.Admin the wrapper passes through.
func TestAdminConformance(t *testing.T) {
	m, _ := idemprom.New(nil, nil)
	idemtest.TestAdmin(t, func(*testing.T) core.Store { return m.InstrumentStore(core.NewMemoryStore(0)) }, idemtest.FakeTime())
}

type (
	waiterOnly struct{ scriptedStore }
	adminOnly  struct{ scriptedStore }
)

func (waiterOnly) Wait(context.Context, string) error { return nil }

func (adminOnly) Inspect(context.Context, string) (core.KeyState, error) {
	return core.KeyState{}, core.ErrNotFound
}
func (adminOnly) Purge(context.Context, string) error  { return nil }
func (adminOnly) Unlock(context.Context, string) error { return nil }
func (adminOnly) InFlight(context.Context, int) ([]core.KeyState, error) {
	return nil, nil
}

// TestStoreInterfaces: the wrapper is a core.Waiter and a core.Admin
// exactly when the store is.
func TestStoreInterfaces(t *testing.T) {
	t.Parallel()
	m, _ := idemprom.New(nil, nil)
	for _, tt := range []struct {
		s             core.Store
		waiter, admin bool
	}{
		{&scriptedStore{}, false, false},
		{&waiterOnly{}, true, false},
		{&adminOnly{}, false, true},
		{core.NewMemoryStore(0), true, true},
	} {
		s := m.InstrumentStore(tt.s)
		_, waiter := s.(core.Waiter)
		_, admin := s.(core.Admin)
		if waiter != tt.waiter || admin != tt.admin {
			t.Errorf("InstrumentStore(%T): Waiter %v, Admin %v; want %v, %v", tt.s, waiter, admin, tt.waiter, tt.admin)
		}
	}
}

// TestHTTPConformance runs the HTTP suite on instrumented stores, then
// checks that every lock taken was counted out again.
func TestHTTPConformance(t *testing.T) {
	m, _ := idemprom.New(nil, nil)
	t.Run("suite", func(t *testing.T) {
		idemtest.TestHTTP(t, serveMux, func(*testing.T) core.Store { return m.InstrumentStore(core.NewMemoryStore(0)) })
	})
	if got := testutil.ToFloat64(metric(t, m, "idempotency_inflight_requests")); got != 0 {
		t.Errorf("idempotency_inflight_requests = %v after the suite, want 0", got)
	}
}

func serveMux(t *testing.T, eng *core.Engine, app http.Handler) string {
	mux := http.NewServeMux()
	mux.Handle("/orders", eng.Middleware(app))
	mux.Handle("/orders/{id}", eng.Middleware(app))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idemtest.OuterHeader, r.Header.Get(idemtest.OuterHeader))
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		mux.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// scriptedStore answers each call with the error set for its operation;
// Acquire hands out a new token when it returns none.
type scriptedStore struct {
	errs   map[string]error
	tokens int
}

func (s *scriptedStore) Acquire(context.Context, string, time.Duration) ([]byte, string, error) {
	if err := s.errs["acquire"]; err != nil {
		return nil, "", err
	}
	s.tokens++
	return nil, fmt.Sprint(s.tokens), nil
}
func (s *scriptedStore) Complete(context.Context, string, string, []byte, time.Duration) error {
	return s.errs["complete"]
}
func (s *scriptedStore) Release(context.Context, string, string) error { return s.errs["release"] }
func (s *scriptedStore) Refresh(context.Context, string, string, time.Duration) error {
	return s.errs["refresh"]
}

// TestStoreWrapper checks the in-flight gauge and the error counts call by
// call: a lock counts from the Acquire that took it to its Complete or
// Release, whatever they return, once; a key in flight, a lost lock and a
// key over the quota are no store errors.
func TestStoreWrapper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name     string
		errs     map[string]error
		calls    func(s core.Store)
		inflight float64
		errors   map[string]float64
	}{
		{"complete", nil, func(s core.Store) {
			_, tok, _ := s.Acquire(ctx, "k", time.Minute)
			s.Refresh(ctx, "k", tok, time.Minute)
			s.Complete(ctx, "k", tok, nil, time.Minute)
		}, 0, nil},
		{"release", nil, func(s core.Store) {
			_, tok, _ := s.Acquire(ctx, "k", time.Minute)
			s.Release(ctx, "k", tok)
		}, 0, nil},
		{"held", nil, func(s core.Store) {
			s.Acquire(ctx, "a", time.Minute)
			s.Acquire(ctx, "b", time.Minute)
			_, tok, _ := s.Acquire(ctx, "c", time.Minute)
			s.Release(ctx, "c", tok)
		}, 2, nil},
		{"ended twice", nil, func(s core.Store) {
			_, tok, _ := s.Acquire(ctx, "k", time.Minute)
			s.Complete(ctx, "k", tok, nil, time.Minute)
			s.Release(ctx, "k", tok)
			s.Complete(ctx, "k", tok, nil, time.Minute)
		}, 0, nil},
		{"unknown token", nil, func(s core.Store) {
			s.Acquire(ctx, "k", time.Minute)
			s.Release(ctx, "k", "not-ours")
			s.Complete(ctx, "other", "1", nil, time.Minute)
		}, 1, nil},
		{"in flight", map[string]error{"acquire": fmt.Errorf("redis: %w", core.ErrInFlight)}, func(s core.Store) {
			s.Acquire(ctx, "k", time.Minute)
		}, 0, nil},
		{"quota", map[string]error{"acquire": &core.QuotaError{RetryAfter: time.Second}}, func(s core.Store) {
			s.Acquire(ctx, "k", time.Minute) // a 429: the store works
		}, 0, nil},
		{"lock lost", map[string]error{"complete": core.ErrLockLost, "refresh": core.ErrLockLost}, func(s core.Store) {
			_, tok, _ := s.Acquire(ctx, "k", time.Minute)
			s.Refresh(ctx, "k", tok, time.Minute)
			s.Complete(ctx, "k", tok, nil, time.Minute)
		}, 0, nil},
		{"failures", map[string]error{"complete": errDown, "refresh": errDown}, func(s core.Store) {
			_, tok, _ := s.Acquire(ctx, "k", time.Minute)
			s.Refresh(ctx, "k", tok, time.Minute)
			s.Refresh(ctx, "k", tok, time.Minute)
			s.Complete(ctx, "k", tok, nil, time.Minute) // the Engine leaves the lock to expire
		}, 0, map[string]float64{"complete": 1, "refresh": 2}},
		{"acquire fails", map[string]error{"acquire": errDown, "release": errDown}, func(s core.Store) {
			s.Acquire(ctx, "k", time.Minute)
			s.Release(ctx, "k", "1")
		}, 0, map[string]float64{"acquire": 1, "release": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := idemprom.New(nil, nil)
			s := m.InstrumentStore(&scriptedStore{errs: tt.errs})
			if _, ok := s.(core.Waiter); ok {
				t.Error("the wrapper of a store without Wait is a core.Waiter")
			}
			tt.calls(s)
			if got := testutil.ToFloat64(metric(t, m, "idempotency_inflight_requests")); got != tt.inflight {
				t.Errorf("idempotency_inflight_requests = %v, want %v", got, tt.inflight)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(m)
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() != "idempotency_store_errors_total" {
					continue
				}
				for _, mm := range mf.GetMetric() {
					op := mm.GetLabel()[0].GetValue()
					if got := mm.GetCounter().GetValue(); got != tt.errors[op] {
						t.Errorf("idempotency_store_errors_total{operation=%q} = %v, want %v", op, got, tt.errors[op])
					}
				}
			}
		})
	}
}

// TestStoreWrapperConcurrent takes and ends locks from many goroutines at
// once: the gauge ends at the number still held.
func TestStoreWrapperConcurrent(t *testing.T) {
	t.Parallel()
	m, _ := idemprom.New(nil, nil)
	s := m.InstrumentStore(core.NewMemoryStore(0))
	ctx := context.Background()
	done := make(chan struct{})
	const n = 100
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			key := idemtest.Key(t)
			_, tok, err := s.Acquire(ctx, key, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			switch i % 3 {
			case 0:
				s.Complete(ctx, key, tok, []byte("r"), time.Minute)
			case 1:
				s.Release(ctx, key, tok)
			}
		}()
	}
	for range n {
		<-done
	}
	if got, want := testutil.ToFloat64(metric(t, m, "idempotency_inflight_requests")), float64(n/3); got != want {
		t.Errorf("idempotency_inflight_requests = %v, want %v (the locks neither completed nor released)", got, want)
	}
}
