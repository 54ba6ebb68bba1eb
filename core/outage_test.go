package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
)

// stalledStore never answers Acquire: it waits for the context, as a
// client waits on a stalled Redis, and records the deadline it was given.
type stalledStore struct {
	core.Store
	calls    atomic.Int32
	deadline atomic.Int64 // of the last call, in ns from its start
}

func (s *stalledStore) Acquire(ctx context.Context, _ string, lockTTL time.Duration) ([]byte, string, error) {
	s.calls.Add(1)
	if d, ok := ctx.Deadline(); ok {
		s.deadline.Store(int64(time.Until(d)))
	}
	<-ctx.Done()
	return nil, "", ctx.Err()
}

func TestStalledStoreBoundedThenBreakerOpens(t *testing.T) {
	synctest.Test(t, testStalledStoreBoundedThenBreakerOpens)
}

func testStalledStoreBoundedThenBreakerOpens(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		var ev events
		store := &stalledStore{Store: core.NewMemoryStore(0)}
		eng, err := core.New(core.Config{Store: store, StoreTimeout: 20 * time.Millisecond, BreakerFailures: 3,
			BreakerCooldown: time.Hour, FailClosed: failClosed, Observer: ev.observe})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
		for i := range 10 {
			w := post(t, h, "stalled", "{}")
			want := http.StatusCreated
			if failClosed {
				want = http.StatusServiceUnavailable
			}
			if w.Code != want {
				t.Fatalf("failClosed=%v request %d: status %d, want %d", failClosed, i, w.Code, want)
			}
		}
		if d := time.Duration(store.deadline.Load()); d != 20*time.Millisecond {
			t.Fatalf("store call's deadline %v from its start, want StoreTimeout (20ms)", d)
		}
		// Three calls waited out the timeout; then the breaker kept the
		// other seven from calling the store at all.
		if n := store.calls.Load(); n != 3 {
			t.Fatalf("store called %d times, want 3 before the breaker opened", n)
		}
		if ev.count(core.OutcomeBreaker) != 1 || ev.count(core.OutcomeStoreError) != 10 {
			t.Fatalf("events %v: want 10 store errors and the breaker opening once", ev.all)
		}
		for _, e := range ev.all {
			if e.Outcome == core.OutcomeBreaker && e.Breaker != "open" {
				t.Fatalf("breaker event %v, want open", e.Breaker)
			}
		}
		if failClosed && runs.Load() != 0 || !failClosed && runs.Load() != 10 {
			t.Fatalf("failClosed=%v: handler ran %d times", failClosed, runs.Load())
		}
	}
}

// A new lock is taken for a short initial lease, not LockTTL: one that a
// stalled store takes after the request gave up refuses retries briefly.
func TestInitialLease(t *testing.T) {
	for _, tt := range []struct {
		lockTTL, storeTimeout, want time.Duration
	}{
		{5 * time.Minute, 0, 10 * time.Second},
		{5 * time.Minute, 5 * time.Second, 15 * time.Second},
		{2 * time.Second, 0, 2 * time.Second},
	} {
		store := &leaseStore{}
		eng, _ := core.New(core.Config{Store: store, LockTTL: tt.lockTTL, StoreTimeout: tt.storeTimeout, BreakerFailures: -1})
		eng.Acquire(&core.Call{Key: "k"}) //nolint:errcheck // the store fails it
		if got := store.lockTTL; got != tt.want {
			t.Errorf("LockTTL %v, StoreTimeout %v: initial lease %v, want %v", tt.lockTTL, tt.storeTimeout, got, tt.want)
		}
	}
}

// leaseStore fails every Acquire at once, noting the lock TTL it was asked for.
type leaseStore struct {
	core.Store
	lockTTL time.Duration
}

func (s *leaseStore) Acquire(_ context.Context, _ string, lockTTL time.Duration) ([]byte, string, error) {
	s.lockTTL = lockTTL
	return nil, "", errDown
}

// Without an Observer, store trouble is logged through slog.Default.
func TestStoreErrorsLoggedWithoutObserver(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() { slog.SetDefault(old) })
	eng, _ := core.New(core.Config{Store: failingStore{}, BreakerFailures: 2, BreakerCooldown: time.Hour})
	for range 5 {
		eng.Acquire(&core.Call{Key: "logged-key-123"}) //nolint:errcheck
	}
	out := buf.String()
	if n := bytes.Count(buf.Bytes(), []byte("outcome=store_error")); n != 2 {
		t.Fatalf("%d store errors logged, want the 2 before the breaker opened (the rest say circuit open):\n%s", n, out)
	}
	if !bytes.Contains(buf.Bytes(), []byte("breaker=open")) || bytes.Contains(buf.Bytes(), []byte("logged-key-123")) {
		t.Fatalf("log lacks the breaker's opening, or shows the key unmasked:\n%s", out)
	}
}

// failFirstRefresh fails its first Refresh with a passing error.
type failFirstRefresh struct {
	*core.MemoryStore
	failed atomic.Bool
}

func (s *failFirstRefresh) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if !s.failed.Swap(true) {
		return errDown
	}
	return s.MemoryStore.Refresh(ctx, key, token, ttl)
}

// A failed first refresh is tried again before the initial lease ends, not
// a third of LockTTL later: the lock is kept, and a duplicate gets 409.
func TestFailedFirstRefreshRetriedWithinInitialLease(t *testing.T) {
	synctest.Test(t, testFailedFirstRefreshRetriedWithinInitialLease)
}

func testFailedFirstRefreshRetriedWithinInitialLease(t *testing.T) {
	store := &failFirstRefresh{MemoryStore: core.NewMemoryStore(0)}
	eng, err := core.New(core.Config{Store: store, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	core.SetInitialLease(eng, 150*time.Millisecond)
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil {
		t.Fatal(err)
	}
	defer l.Release(0, nil)
	// The lock would have expired at 150 ms without a second refresh.
	advance(400 * time.Millisecond)
	if !store.failed.Load() {
		t.Fatal("no refresh ran")
	}
	if _, _, err := eng.Acquire(&core.Call{Key: "k"}); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("duplicate after the initial lease: %v, want ErrInFlight (the lock was lost)", err)
	}
}

// countingFailedRefresh fails every Refresh, counting them.
type countingFailedRefresh struct {
	*core.MemoryStore
	calls atomic.Int32
}

func (s *countingFailedRefresh) Refresh(context.Context, string, string, time.Duration) error {
	s.calls.Add(1)
	return errDown
}

// Failed refreshes are retried sooner as the lock's end nears, but not in
// a burst: over a 150 ms initial lease, at 50, 100, 125, 137.5 and 147.5 ms.
func TestFailedRefreshesNotRetriedInABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countingFailedRefresh{MemoryStore: core.NewMemoryStore(0)}
		eng, err := core.New(core.Config{Store: store, LockTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		core.SetInitialLease(eng, 150*time.Millisecond)
		l, _, err := eng.Acquire(&core.Call{Key: "k"})
		if err != nil || l == nil {
			t.Fatal(err)
		}
		defer l.Release(0, nil)
		advance(150 * time.Millisecond)
		if n := store.calls.Load(); n != 5 {
			t.Fatalf("%d refreshes over the initial lease, want 5", n)
		}
	})
}

// busyStore answers ErrStoreBusy until free is set, then acts as its Store.
type busyStore struct {
	core.Store
	free atomic.Bool
}

func (s *busyStore) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	if !s.free.Load() {
		return nil, "", fmt.Errorf("every connection holds a key: %w", core.ErrStoreBusy)
	}
	return s.Store.Acquire(ctx, key, lockTTL)
}

// A busy store is no failure: in both failure modes the request is refused
// with 503 and Retry-After, never run unprotected (a duplicate of a running
// request would run again), and the breaker stays closed, so the next
// request once the store has room is protected.
func TestBusyStoreRefused(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		var ev events
		store := &busyStore{Store: core.NewMemoryStore(0)}
		eng, err := core.New(core.Config{Store: store, BreakerFailures: 2, BreakerCooldown: time.Hour, FailClosed: failClosed, Observer: ev.observe})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
		for i := range 5 {
			w := post(t, h, "busy", "{}")
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "store-unavailable") {
				t.Fatalf("failClosed=%v request %d: %d %v %s, want 503 store-unavailable with Retry-After", failClosed, i, w.Code, w.Header(), w.Body)
			}
		}
		store.free.Store(true)
		if w := post(t, h, "busy", "{}"); w.Code != http.StatusCreated {
			t.Fatalf("failClosed=%v: with room, %d", failClosed, w.Code)
		}
		if w := post(t, h, "busy", "{}"); w.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("failClosed=%v: the retry was no replay (%d): the first ran unprotected", failClosed, w.Code)
		}
		if runs.Load() != 1 || ev.count(core.OutcomeBreaker) != 0 || ev.count(core.OutcomeStoreError) != 5 {
			t.Fatalf("failClosed=%v: %d runs, events %v; want 1 run, 5 store errors, no breaker", failClosed, runs.Load(), ev.all)
		}
	}
}

// downAcquire fails Acquire while down is set.
type downAcquire struct {
	*core.MemoryStore
	down atomic.Bool
}

func (s *downAcquire) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	if s.down.Load() {
		return nil, "", errors.New("dial tcp: connection refused")
	}
	return s.MemoryStore.Acquire(ctx, key, ttl)
}

// An Observer that panics on the breaker's closing, which the probe's
// Acquire causes after it took the key's lock, leaves no lock behind: the
// panic goes on, and a retry runs (the lock was held by nobody for the
// initial lease's 10 s).
func TestObserverPanicOnBreakerChangeReleasesLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &downAcquire{MemoryStore: core.NewMemoryStore(0)}
		e, err := core.New(core.Config{Store: s, BreakerFailures: 1, Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeBreaker && ev.Breaker == "closed" {
				panic("observer bug")
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		s.down.Store(true)
		e.Once(ctx, "s", "other", func(context.Context) error { return nil }) //nolint:errcheck // opens the breaker
		s.down.Store(false)
		advance(time.Second) // the cooldown is over: the next call probes
		panicked := func() (p any) {
			defer func() { p = recover() }()
			e.Once(ctx, "s", "k", func(context.Context) error { t.Error("ran during the panic"); return nil }) //nolint:errcheck
			return nil
		}()
		if panicked == nil {
			t.Fatal("the Observer's panic did not go on")
		}
		ran := 0
		if _, err := e.Once(ctx, "s", "k", func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
			t.Fatalf("retry after the Observer's panic: %v, ran %d; want a run (the probe's lock released)", err, ran)
		}
	})
}
