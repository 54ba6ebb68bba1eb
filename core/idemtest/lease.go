package idemtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// TestLease runs the conformance suite of the transport-neutral layer
// (Engine.Acquire, Lease, Engine.Once, Do) on the stores newStore returns: what
// a transport other than HTTP relies on. opts as for TestStore.
func TestLease(t *testing.T, newStore func(t *testing.T) core.Store, opts ...Option) {
	t.Helper()
	o := newOptions(opts)
	tests := []struct {
		name string
		fn   func(t *testing.T, s core.Store)
	}{
		{"ConcurrentCallsRunOnce", testLeaseRunsOnce},
		{"ConcurrentCallsWait", testLeaseWait},
		{"Replay", testLeaseReplay},
		{"ReleaseLetsRetry", testLeaseRelease},
		{"OnceAppliesOnce", testOnce},
		{"DoReplaysTypedResult", testDoReplay},
		{"DoConcurrentCalls", testDoConcurrent},
		{"DoTransientAndPermanentErrors", testDoErrors},
		{"StepsConcurrentRetries", testStepsConcurrentRetries},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o.run(t, func(t *testing.T) { tt.fn(t, newStore(t)) })
		})
	}
}

// slowStoreTimeout is the suites' Config.StoreTimeout: on a loaded machine
// a store call may take longer than the default second, and a timed-out
// call would run the work unprotected (fail-open), which is not what the
// suites test.
const slowStoreTimeout = 30 * time.Second

func newEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = slowStoreTimeout
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func call(key string) *core.Call {
	return &core.Call{Context: context.Background(), Key: key, Scope: "conformance", Method: "Test", Route: "/test",
		Fingerprint: sha256.Sum256([]byte("request"))}
}

// together runs fn(i) for i in [0, n) in n goroutines released at once,
// and returns when all have returned.
func together(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// runCalls makes n concurrent calls of one key, each of whose work counts
// its run, tells started (if not nil), waits for hold and completes with
// body; answered, if not nil, is called as each call without a lease
// returns. It returns the runs and the results.
func runCalls(t *testing.T, e *core.Engine, key string, n int, started chan<- struct{}, hold <-chan struct{}, answered func(),
) (runs int64, results []*core.Record, errs []error) {
	t.Helper()
	results, errs = make([]*core.Record, n), make([]error, n)
	together(n, func(i int) {
		l, rec, err := e.Acquire(call(key))
		results[i], errs[i] = rec, err
		if l == nil {
			if answered != nil {
				answered()
			}
			return
		}
		if !l.Protected() {
			errs[i] = errors.New("lease not protected")
		}
		atomic.AddInt64(&runs, 1)
		if started != nil {
			started <- struct{}{}
		}
		<-hold
		l.Complete(&core.Record{Code: 7, Header: map[string][]string{"m": {"v"}}, Body: []byte("result")})
		results[i] = &core.Record{Code: 7, Body: []byte("result")}
	})
	return runs, results, errs
}

// Of 100 concurrent calls of one key, one runs, held until the 99 others
// have their answer: none of them runs alongside it. A second run, which
// would wait for the others too, releases the hold and fails the count.
func testLeaseRunsOnce(t *testing.T, s core.Store) {
	const n = 100
	e := newEngine(t, core.Config{Store: s})
	hold, started := make(chan struct{}), make(chan struct{}, n)
	var (
		answered atomic.Int64
		once     sync.Once
	)
	release := func() { once.Do(func() { close(hold) }) }
	go func() {
		<-started
		<-started // a second run, or runCalls's end
		release()
	}()
	runs, results, errs := runCalls(t, e, Key(t), n, started, hold, func() {
		if answered.Add(1) == n-1 {
			release()
		}
	})
	close(started)
	if runs != 1 {
		t.Fatalf("work ran %d times, want 1", runs)
	}
	for i, err := range errs {
		switch {
		case err == nil && results[i] != nil && results[i].Code == 7 && string(results[i].Body) == "result":
		case errors.Is(err, core.ErrInFlight):
		default:
			t.Fatalf("call %d: record %+v, err %v", i, results[i], err)
		}
	}
}

func testLeaseWait(t *testing.T, s core.Store) {
	e := newEngine(t, core.Config{Store: s, Wait: time.Minute})
	started, hold := make(chan struct{}, 1), make(chan struct{})
	done := make(chan struct{})
	var runs int64
	var results []*core.Record
	var errs []error
	go func() {
		defer close(done)
		runs, results, errs = runCalls(t, e, Key(t), 50, started, hold, nil)
	}()
	<-started
	close(hold)
	<-done
	if runs != 1 {
		t.Fatalf("work ran %d times, want 1", runs)
	}
	for i, err := range errs {
		if err != nil || results[i] == nil || string(results[i].Body) != "result" {
			t.Fatalf("call %d: record %+v, err %v; every waiting call gets the result", i, results[i], err)
		}
	}
}

func testLeaseReplay(t *testing.T, s core.Store) {
	var events []core.Outcome
	var mu sync.Mutex
	e := newEngine(t, core.Config{Store: s, Observer: func(ev core.Event) {
		mu.Lock()
		events = append(events, ev.Outcome)
		mu.Unlock()
	}})
	key := Key(t)
	l, _, err := e.Acquire(call(key))
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v", err)
	}
	l.Complete(&core.Record{Code: 3, Header: map[string][]string{"grpc-status-details": {"x"}}, Body: []byte{0, 1, 2}})
	l.Release(0, nil) // after Complete: does nothing
	l2, rec, err := e.Acquire(call(key))
	if err != nil || l2 != nil || rec == nil {
		t.Fatalf("second Acquire: lease %v, record %v, err %v", l2, rec, err)
	}
	if rec.Code != 3 || string(rec.Body) != "\x00\x01\x02" || rec.Header["grpc-status-details"][0] != "x" || rec.Key != key {
		t.Fatalf("replayed record %+v", rec)
	}
	other := call(key)
	other.Fingerprint[0] ^= 1
	if _, _, err := e.Acquire(other); !errors.Is(err, core.ErrKeyReused) {
		t.Fatalf("other fingerprint: err %v, want ErrKeyReused", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []core.Outcome{core.OutcomeStored, core.OutcomeReplay, core.OutcomeMismatch}
	if len(events) != len(want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("events %v, want %v", events, want)
		}
	}
}

func testLeaseRelease(t *testing.T, s core.Store) {
	e := newEngine(t, core.Config{Store: s})
	key := Key(t)
	l, _, err := e.Acquire(call(key))
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, _, err := e.Acquire(call(key)); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("duplicate in flight: err %v, want ErrInFlight", err)
	}
	l.Release(13, errors.New("internal"))
	l.Complete(&core.Record{Code: 0}) // after Release: does nothing
	l2, rec, err := e.Acquire(call(key))
	if err != nil || l2 == nil || rec != nil {
		t.Fatalf("retry after Release: lease %v, record %v, err %v; want a lease", l2, rec, err)
	}
	l2.Release(0, nil)
}

func testOnce(t *testing.T, s core.Store) {
	e := newEngine(t, core.Config{Store: s, Wait: time.Minute})
	key := Key(t)
	var applied int64
	fail := true
	var wg sync.WaitGroup
	// The first delivery fails: the event is applied by a redelivery, once.
	if ran, err := e.Once(context.Background(), "consumer", key, func(context.Context) error {
		if fail {
			return errors.New("broker down")
		}
		return nil
	}); !ran || err == nil {
		t.Fatalf("failing delivery: ran %v, err %v", ran, err)
	}
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Once(context.Background(), "consumer", key, func(context.Context) error {
				atomic.AddInt64(&applied, 1)
				return nil
			}); err != nil {
				t.Errorf("Once: %v", err)
			}
		}()
	}
	wg.Wait()
	if applied != 1 {
		t.Fatalf("event applied %d times, want 1", applied)
	}
	if ran, err := e.Once(context.Background(), "consumer", key, func(context.Context) error {
		t.Error("a completed event ran again")
		return nil
	}); ran || err != nil {
		t.Fatalf("redelivery of a completed event: ran %v, err %v", ran, err)
	}
}
