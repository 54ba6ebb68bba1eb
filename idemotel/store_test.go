package idemotel_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/idemotel"
)

// TestStoreConformance runs the store suite over an instrumented
// MemoryStore: the wrapper changes nothing a store promises.
func TestStoreConformance(t *testing.T) {
	tel, _ := newTelemetry(t)
	idemtest.TestStore(t, func(*testing.T) core.Store { return tel.InstrumentStore(core.NewMemoryStore(0)) }, idemtest.FakeTime())
}

// TestAdminConformance runs the admin suite over an instrumented
// MemoryStore, whose core.Admin the wrapper passes through.
func TestAdminConformance(t *testing.T) {
	m, _ := newTelemetry(t)
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
	m, _ := newTelemetry(t)
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
	tel, reader := newTelemetry(t)
	t.Run("suite", func(t *testing.T) {
		idemtest.TestHTTP(t, serveMux, func(*testing.T) core.Store { return tel.InstrumentStore(core.NewMemoryStore(0)) })
	})
	wantPoints(t, reader, "idempotency.inflight_requests", map[string]int64{"": 0})
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

// TestStoreWrapper checks the in-flight count and the error counts call by
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
		inflight int64
		errors   map[string]int64
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
		}, 0, map[string]int64{"complete": 1, "refresh": 2}},
		{"acquire fails", map[string]error{"acquire": errDown, "release": errDown}, func(s core.Store) {
			s.Acquire(ctx, "k", time.Minute)
			s.Release(ctx, "k", "1")
		}, 0, map[string]int64{"acquire": 1, "release": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tel, reader := newTelemetry(t)
			s := tel.InstrumentStore(&scriptedStore{errs: tt.errs})
			if _, ok := s.(core.Waiter); ok {
				t.Error("the wrapper of a store without Wait is a core.Waiter")
			}
			tt.calls(s)
			wantPoints(t, reader, "idempotency.inflight_requests", map[string]int64{"": tt.inflight})
			wantErrs := map[string]int64{}
			for _, op := range []string{"acquire", "complete", "refresh", "release"} {
				wantErrs["idempotency.store.operation="+op] = tt.errors[op]
			}
			wantPoints(t, reader, "idempotency.store.errors", wantErrs)
		})
	}
}

// TestStoreWrapperConcurrent takes and ends locks from many goroutines at
// once: the count ends at the number still held; the wrapper of a
// core.Waiter is one.
func TestStoreWrapperConcurrent(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	s := tel.InstrumentStore(core.NewMemoryStore(0))
	if _, ok := s.(core.Waiter); !ok {
		t.Fatal("the instrumented MemoryStore is no core.Waiter")
	}
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
	wantPoints(t, reader, "idempotency.inflight_requests", map[string]int64{"": n / 3})
}

// TestObserveStuckKeys: the gauge is the time the oldest lock in flight was
// taken, in Unix seconds, and absent when no key is in flight.
func TestObserveStuckKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := core.NewMemoryStore(0)
	if err := tel.ObserveStuckKeys(store, time.Nanosecond); err != nil { // read at each collection
		t.Fatal(err)
	}
	oldest := func() []float64 { t.Helper(); return stuckGauge(t, reader) }
	if v := oldest(); len(v) != 0 {
		t.Fatalf("no key in flight: gauge %v, want none", v)
	}
	for _, k := range []string{"a", "b"} {
		if _, _, err := store.Acquire(ctx, k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := store.InFlight(ctx, 1)
	if err != nil || len(keys) != 1 {
		t.Fatal(keys, err)
	}
	if v, want := oldest(), float64(keys[0].LockedAt.UnixNano())/1e9; len(v) != 1 || v[0] != want {
		t.Fatalf("keys in flight: gauge %v, want [%v], the oldest lock's time", v, want)
	}
}

// TestObserveStuckKeysStores: a Telemetry shared by the Engines of two
// stores, each given to ObserveStuckKeys, has one gauge, the oldest lock
// of either: the store whose lock is newer does not hide the other's.
func TestObserveStuckKeysStores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		reader := sdkmetric.NewManualReader()
		tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
		if err != nil {
			t.Fatal(err)
		}
		older, newer, idle := core.NewMemoryStore(0), core.NewMemoryStore(0), core.NewMemoryStore(0)
		for _, s := range []core.Store{older, newer} {
			if _, _, err := s.Acquire(ctx, "k", time.Minute); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // the bubble's clock: the second lock is the newer
		}
		for _, s := range []*core.MemoryStore{newer, older, idle} {
			if err := tel.ObserveStuckKeys(s, time.Nanosecond); err != nil {
				t.Fatal(err)
			}
		}
		keys, err := older.InFlight(ctx, 1)
		if err != nil || len(keys) != 1 {
			t.Fatal(keys, err)
		}
		if values, want := stuckGauge(t, reader), float64(keys[0].LockedAt.UnixNano())/1e9; len(values) != 1 || values[0] != want {
			t.Fatalf("gauge %v, want [%v]: the oldest lock of the stores", values, want)
		}
	})
}

// stuckGauge collects reader's values of the stuck-keys gauge.
func stuckGauge(t *testing.T, reader sdkmetric.Reader) []float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var values []float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "idempotency.oldest_inflight_start_timestamp" {
				for _, p := range m.Data.(metricdata.Gauge[float64]).DataPoints {
					values = append(values, p.Value)
				}
			}
		}
	}
	return values
}
