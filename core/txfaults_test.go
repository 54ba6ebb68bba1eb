package core_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/instrument"
	"github.com/idem-go/idem/seal"
)

func mustSealer(t *testing.T, primary string, keys map[string][]byte) core.Sealer {
	t.Helper()
	kp, err := seal.NewStaticKeys(primary, keys)
	if err != nil {
		t.Fatal(err)
	}
	return seal.New(kp)
}

// an instance that cannot open a sealed record (rolling key rotation,
// rolling enablement of sealing) runs the work again under the default
// fail-open policy.
func TestUnopenableRecordAcrossInstances(t *testing.T) {
	store := core.NewMemoryStore(0)
	k1 := make([]byte, 32)
	k2 := make([]byte, 32)
	k2[0] = 1
	a, _ := core.New(core.Config{Store: store, Sealer: mustSealer(t, "k2", map[string][]byte{"k1": k1, "k2": k2})})
	b, _ := core.New(core.Config{Store: store, Sealer: mustSealer(t, "k1", map[string][]byte{"k1": k1})})
	var runs atomic.Int32
	fn := func(context.Context) (string, error) { runs.Add(1); return "charged", nil }
	if _, _, err := core.Do(context.Background(), a, "u1", "pay-1", fn); err != nil {
		t.Fatal(err)
	}
	_, replayed, err := core.Do(context.Background(), b, "u1", "pay-1", fn)
	t.Logf("instance B: replayed=%v err=%v runs=%d", replayed, err, runs.Load())
	if runs.Load() != 1 {
		t.Fatalf("the charge ran %d times for one key", runs.Load())
	}
}

// Once then Do on the same scope and key: Do's answers call the
// record corrupt and fail open.
func TestDoAfterOnceNotRunAgain(t *testing.T) {
	store := core.NewMemoryStore(0)
	e, _ := core.New(core.Config{Store: store})
	var runs atomic.Int32
	if _, err := e.Once(context.Background(), "u1", "k-1", func(context.Context) error { runs.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	_, replayed, err := core.Do(context.Background(), e, "u1", "k-1", func(context.Context) (int, error) { runs.Add(1); return 1, nil })
	t.Logf("Do after Once: replayed=%v err=%v runs=%d", replayed, err, runs.Load())
	if runs.Load() != 1 {
		t.Fatalf("work ran %d times for one key (unprotected)", runs.Load())
	}
}

// in the transactional mode, a response with too many headers is not
// stored: the transaction is rolled back, yet the handler's response is
// sent as if its effect had been committed.
func TestTxTooManyHeadersNotAnswered(t *testing.T) {
	store := idemtest.NewTxStore(t)
	e, _ := core.New(core.Config{Store: store})
	var runs atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for i := range 20000 {
			w.Header().Add("X-H"+strconv.Itoa(i), "v")
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":1}`))
	}
	serve := func() int {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.Header.Set("Idempotency-Key", "abcdef-123")
		rec := httptest.NewRecorder()
		f, resp := e.Begin(&core.Request{Context: req.Context(), Method: "POST", Path: "/orders", Header: req.Header, ContentLength: -1})
		if resp != nil {
			resp.Write(rec)
			return rec.Code
		}
		if !f.Buffered() {
			t.Fatal("not buffered")
		}
		defer f.Abort()
		h(f.ResponseWriter(rec), f.Request(req))
		f.Finish(nil)
		return rec.Code
	}
	first := serve()
	second := serve()
	t.Logf("first %d, retry %d, handler runs %d", first, second, runs.Load())
	if first != http.StatusServiceUnavailable {
		t.Fatalf("first answer %d for an effect that was rolled back, want 503", first)
	}
}

// memoryStore is the memory store as these tests use it.
type memoryStore interface {
	core.Store
	core.Checkpointer
}

// failingTx is a TxStore whose Begin always fails (PostgreSQL down).
type failingTx struct{ memoryStore }

func (failingTx) Begin(context.Context, string, time.Duration) ([]byte, core.Tx, error) {
	return nil, nil, errors.New("postgres down")
}

// tiered over a TxStore with the durable tier down: the fast lock alone
// holds the key, a lease the Engine refreshes while the work runs, so that
// no duplicate runs it meanwhile; until the first refresh, the lock lives
// 10 s, which is how long a crash in the first seconds holds the key
// (not LockTTL).
func TestTieredTxFallbackLockHeld(t *testing.T) {
	bareAndInstrumented(t, func(t *testing.T, wrapped bool) {
		synctest.Test(t, func(t *testing.T) { testTieredTxFallbackLockHeld(t, wrapped) })
	})
}

// testTieredTxFallbackLockHeld runs TestTieredTxFallbackLockHeld on the
// store as it is, or behind instrument.Store (as idemprom's and idemotel's
// InstrumentStore put it), which wraps each transaction: the locks it
// counts as held must come back to none.
func testTieredTxFallbackLockHeld(t *testing.T, wrapped bool) {
	fast := core.NewMemoryStore(0)
	e, held := tieredTxEngine(t, fast, failingTx{core.NewMemoryStore(0)}, wrapped)
	l1, _, err := e.Acquire(&core.Call{Key: "k", Scope: "s"})
	if err != nil || l1 == nil || !l1.Protected() {
		t.Fatalf("first: %v %v", l1, err)
	}
	lock, err := fast.Inspect(context.Background(), core.ID("s", "k", ""))
	if err != nil || lock.Record != nil {
		t.Fatalf("the fast tier's lock: %+v, %v", lock, err)
	}
	if left := time.Until(lock.Expires); left > 10*time.Second || left < 9*time.Second {
		t.Fatalf("the fast tier's lock expires in %v, want 10 s (a crash holds the key that long)", left)
	}
	advance(15 * time.Second) // the first request's work is still running
	if l2, _, err := e.Acquire(&core.Call{Key: "k", Scope: "s"}); l2 != nil || !errors.Is(err, core.ErrInFlight) {
		t.Errorf("duplicate after 15 s: %v, %v; want ErrInFlight (the first still runs)", l2, err)
		if l2 != nil {
			l2.Release(0, nil)
		}
	}
	completeAndReplay(t, e, l1, held)
}

// tiered over a TxStore in the transactional mode: the fast tier's lock
// in front of the running transaction is refreshed while the work runs,
// each time for 10 s (a crash holds the key no longer), so that a
// duplicate coming after the first 10 s while the durable tier stalls
// (its Begin fails) meets it and gets ErrInFlight, where it used to take a
// fast lock of its own, fall back to it, and run.
func TestTieredTxLockHeldWhileDurableStalls(t *testing.T) {
	bareAndInstrumented(t, func(t *testing.T, wrapped bool) {
		synctest.Test(t, func(t *testing.T) { testTieredTxLockHeldWhileDurableStalls(t, wrapped) })
	})
}

func testTieredTxLockHeldWhileDurableStalls(t *testing.T, wrapped bool) {
	fast := core.NewMemoryStore(0)
	durable := &downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}
	e, held := tieredTxEngine(t, fast, durable, wrapped)
	l1, _, err := e.Acquire(&core.Call{Key: "k", Scope: "s"})
	if err != nil || l1 == nil || !l1.Buffered() {
		t.Fatalf("first: %v %v; want a lease in a transaction", l1, err)
	}
	advance(15 * time.Second) // the first request's work is still running
	lock, err := fast.Inspect(context.Background(), core.ID("s", "k", ""))
	if err != nil || lock.Record != nil || time.Until(lock.Expires) <= 0 || time.Until(lock.Expires) > 10*time.Second {
		t.Fatalf("the fast tier's lock at +15 s: %+v, %v; want it refreshed, expiring within 10 s", lock, err)
	}
	durable.down.Store(true)
	if l2, _, err := e.Acquire(&core.Call{Key: "k", Scope: "s"}); l2 != nil || !errors.Is(err, core.ErrInFlight) {
		t.Errorf("duplicate at +15 s, the durable tier stalled: a lease %v, %v; want ErrInFlight (the first still runs)", l2 != nil, err)
		if l2 != nil {
			l2.Release(0, nil)
		}
	}
	durable.down.Store(false)
	completeAndReplay(t, e, l1, held)
}

// completeAndReplay completes l, the lease of key "k" in scope "s", and
// checks that the key replays and that instrument counts no lock held.
func completeAndReplay(t *testing.T, e *core.Engine, l *core.Lease, held *atomic.Int32) {
	t.Helper()
	if err := l.Complete(&core.Record{Code: 201}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, rec, err := e.Acquire(&core.Call{Key: "k", Scope: "s"}); rec == nil || err != nil {
		t.Fatalf("after Complete: %v, %v; want the record", rec, err)
	}
	if n := held.Load(); n != 0 {
		t.Errorf("instrument counts %d locks held after Complete, want 0", n)
	}
}

// bareAndInstrumented runs test on the store as it is and behind
// instrument.Store (wrapped).
func bareAndInstrumented(t *testing.T, test func(t *testing.T, wrapped bool)) {
	for _, wrapped := range []bool{false, true} {
		t.Run(map[bool]string{false: "bare", true: "instrumented"}[wrapped], func(t *testing.T) { test(t, wrapped) })
	}
}

// tieredTxEngine is an Engine on the tiered store of fast over durable,
// behind instrument.Store if wrapped (as idemprom's and idemotel's
// InstrumentStore put it), with the count of locks instrument sees held.
func tieredTxEngine(t *testing.T, fast, durable core.Store, wrapped bool) (*core.Engine, *atomic.Int32) {
	t.Helper()
	st := core.NewTiered(fast, durable)
	held := new(atomic.Int32)
	if wrapped {
		st = instrument.Store(st, func(_ context.Context, _ instrument.Op, _ time.Duration, _ error, h int) { held.Add(int32(h)) })
	}
	e, err := core.New(core.Config{Store: st, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return e, held
}

type stepTxStore struct{ memoryStore }

func (s stepTxStore) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, token, err := s.Acquire(ctx, key, idle)
	if err != nil || token == "" {
		return rec, nil, err
	}
	return nil, &stepTx{s: s.memoryStore, key: key, token: token}, nil
}

type stepTx struct {
	s          memoryStore
	key, token string
}

func (t *stepTx) Context(ctx context.Context) context.Context { return ctx }
func (t *stepTx) Commit(ctx context.Context, r []byte, ttl time.Duration, _ bool) error {
	return t.s.Complete(ctx, t.key, t.token, r, ttl)
}
func (t *stepTx) Rollback(ctx context.Context) error { return t.s.Release(ctx, t.key, t.token) }
func (t *stepTx) RunStep(ctx context.Context, step string, ttl time.Duration, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	b, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	return b, t.s.SaveStep(ctx, t.key, t.token, step, b, ttl)
}

// Step under the tiered store over a TxStore, and alone: a step's
// checkpoint spares the step on the retry of a call that failed after it;
// with the durable tier down, the checkpoint is in the fast tier.
func TestTieredTxSteps(t *testing.T) {
	for name, s := range map[string]core.Store{
		"durable alone":        stepTxStore{core.NewMemoryStore(0)},
		"tiered":               core.NewTiered(core.NewMemoryStore(0), stepTxStore{core.NewMemoryStore(0)}),
		"tiered, durable down": core.NewTiered(core.NewMemoryStore(0), failingTx{core.NewMemoryStore(0)}),
		"instrumented tiered, durable down": instrument.Store(core.NewTiered(core.NewMemoryStore(0), failingTx{core.NewMemoryStore(0)}),
			nopObserve),
	} {
		e, err := core.New(core.Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		charges := 0
		errLater := errors.New("a later step failed")
		for attempt := range 2 {
			_, _, err := core.Do(context.Background(), e, "u", "k", func(ctx context.Context) (int, error) {
				v, err := core.Step(ctx, "charge", func(context.Context) (int, error) { charges++; return 7, nil })
				if err == nil && attempt == 0 {
					err = errLater
				}
				return v, err
			})
			if want := []error{errLater, nil}[attempt]; !errors.Is(err, want) && err != want {
				t.Errorf("%s, attempt %d: %v, want %v", name, attempt, err, want)
			}
		}
		if charges != 1 {
			t.Errorf("%s: the step ran %d times, want once (its checkpoint spares it on the retry)", name, charges)
		}
	}
}

// A Buffered flight's response goes out once, whatever an adapter calls
// after the flight has ended.
func TestFlightEndsOnce(t *testing.T) {
	e, _ := core.New(core.Config{Store: idemtest.NewTxStore(t)})
	for _, end := range []string{"Finish", "Abandon"} {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.Header.Set("Idempotency-Key", "ends-once-"+end)
		rec := httptest.NewRecorder()
		f, resp := e.Begin(&core.Request{Context: req.Context(), Method: "POST", Path: "/orders", Header: req.Header, ContentLength: -1})
		if resp != nil || !f.Buffered() {
			t.Fatalf("%s: not a Buffered flight: %+v", end, resp)
		}
		w := f.ResponseWriter(rec)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "once")
		if end == "Finish" {
			f.Finish(nil)
		} else {
			f.Abandon()
		}
		f.Finish(nil)
		f.Abandon()
		f.Abort()
		if rec.Code != http.StatusCreated || rec.Body.String() != "once" {
			t.Fatalf("%s, then every other end: %d %q, want 201 \"once\"", end, rec.Code, rec.Body.String())
		}
	}
}

// failedTxStore is a TxStore whose transactions note the failed argument of
// their Commit.
type failedTxStore struct {
	*core.MemoryStore
	failed []bool
}

func (s *failedTxStore) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, token, err := s.Acquire(ctx, key, idle)
	if err != nil || token == "" {
		return rec, nil, err
	}
	return nil, &failedTx{s: s, key: key, token: token}, nil
}

type failedTx struct {
	s          *failedTxStore
	key, token string
}

func (t *failedTx) Context(ctx context.Context) context.Context { return ctx }
func (t *failedTx) Commit(ctx context.Context, r []byte, ttl time.Duration, failed bool) error {
	t.s.failed = append(t.s.failed, failed)
	return t.s.Complete(ctx, t.key, t.token, r, ttl)
}
func (t *failedTx) Rollback(ctx context.Context) error { return t.s.Release(ctx, t.key, t.token) }

// Commit is told whether the record answers with a failure, in each
// transport's own codes: a store whose work's transaction aborted keeps a
// failure's answer, and refuses a success's (pgstore.ErrWorkAborted).
func TestTxCommitFailed(t *testing.T) {
	s := &failedTxStore{MemoryStore: core.NewMemoryStore(0)}
	e, err := core.New(core.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []bool
	for i, status := range []int{http.StatusCreated, http.StatusFound, http.StatusConflict, http.StatusNotFound} {
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Idempotency-Key", "http-"+strconv.Itoa(i))
		h.ServeHTTP(httptest.NewRecorder(), r)
		want = append(want, status >= 400)
	}
	core.Do(ctx, e, "s", "do-ok", func(context.Context) (int, error) { return 1, nil })                               //nolint:errcheck
	core.Do(ctx, e, "s", "do-err", func(context.Context) (int, error) { return 0, core.Permanent(errors.New("no")) }) //nolint:errcheck
	e.Once(ctx, "s", "once", func(context.Context) error { return nil })                                              //nolint:errcheck
	want = append(want, false, true, false)
	for i, code := range []int{0, 6} { // gRPC's OK, AlreadyExists
		l, _, err := e.Acquire(&core.Call{Context: ctx, Key: "grpc-" + strconv.Itoa(i), Scope: "s", Transport: "grpc"})
		if err != nil {
			t.Fatal(err)
		}
		l.Complete(&core.Record{Code: code}) //nolint:errcheck
		want = append(want, code != 0)
	}
	if !slices.Equal(s.failed, want) {
		t.Fatalf("Commit's failed: %v, want %v", s.failed, want)
	}
}
