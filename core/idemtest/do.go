package idemtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// charge is a typed result for the Do cases: a struct, a slice and a map
// survive the round trip through the store.
type charge struct {
	ID     string            `json:"id"`
	Amount int64             `json:"amount"`
	Tags   []string          `json:"tags"`
	Meta   map[string]string `json:"meta"`
}

func testDoReplay(t *testing.T, s core.Store) {
	e := newEngine(t, core.Config{Store: s})
	ctx := context.Background()
	key := Key(t)
	want := charge{ID: "ch_1", Amount: 1250, Tags: []string{"a", "b"}, Meta: map[string]string{"k": "v"}}
	runs := 0
	fn := func(context.Context) (charge, error) {
		runs++
		return want, nil
	}
	for i, wantReplayed := range []bool{false, true, true} {
		got, replayed, err := core.Do(ctx, e, "do", key, fn, core.DoOptions{Args: map[string]int{"amount": 1250}})
		if err != nil || replayed != wantReplayed || got.ID != want.ID || got.Amount != want.Amount ||
			len(got.Tags) != 2 || got.Meta["k"] != "v" {
			t.Fatalf("call %d: %+v, replayed %v, err %v; want %+v, replayed %v", i, got, replayed, err, want, wantReplayed)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	if _, _, err := core.Do(ctx, e, "do", key, fn, core.DoOptions{Args: map[string]int{"amount": 99}}); !errors.Is(err, core.ErrKeyReused) {
		t.Fatalf("same key, other Args: err %v, want ErrKeyReused", err)
	}
	// Another scope is another record.
	if _, replayed, err := core.Do(ctx, e, "other", key, fn, core.DoOptions{Args: map[string]int{"amount": 1250}}); err != nil || replayed || runs != 2 {
		t.Fatalf("other scope: replayed %v, err %v, runs %d; want a run", replayed, err, runs)
	}
}

func testDoConcurrent(t *testing.T, s core.Store) {
	e := newEngine(t, core.Config{Store: s, Wait: time.Minute})
	key := Key(t)
	var runs atomic.Int64
	started, hold := make(chan struct{}), make(chan struct{})
	fn := func(context.Context) (int, error) {
		runs.Add(1)
		close(started)
		<-hold
		return 42, nil
	}
	const n = 20
	var wg sync.WaitGroup
	results, replays, errs := make([]int, n), make([]bool, n), make([]error, n)
	do := func(i int) {
		defer wg.Done()
		results[i], replays[i], errs[i] = core.Do(context.Background(), e, "do", key, fn)
	}
	wg.Add(1)
	go do(0)
	<-started // the first call holds the key; the others wait for its result
	for i := 1; i < n; i++ {
		wg.Add(1)
		go do(i)
	}
	close(hold)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
	for i := range n {
		if errs[i] != nil || results[i] != 42 || replays[i] != (i != 0) {
			t.Fatalf("call %d: %d, replayed %v, err %v", i, results[i], replays[i], errs[i])
		}
	}
	// Without Config.Wait, a call while fn runs gets ErrInFlight.
	e = newEngine(t, core.Config{Store: s})
	key = Key(t)
	started, hold = make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := core.Do(context.Background(), e, "do", key, fn)
		done <- err
	}()
	<-started
	if _, _, err := core.Do(context.Background(), e, "do", key, fn); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("call in flight: err %v, want ErrInFlight", err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func testDoErrors(t *testing.T, s core.Store) {
	e := newEngine(t, core.Config{Store: s})
	ctx := context.Background()
	key := Key(t)
	runs := 0
	errDown := errors.New("provider down")
	transient := func(context.Context) (string, error) { runs++; return "", errDown }
	if _, replayed, err := core.Do(ctx, e, "do", key, transient); !errors.Is(err, errDown) || replayed {
		t.Fatalf("transient error: replayed %v, err %v", replayed, err)
	}
	// Not stored: the next call runs fn again, and its result is stored.
	ok := func(context.Context) (string, error) { runs++; return "done", nil }
	if got, replayed, err := core.Do(ctx, e, "do", key, ok); err != nil || replayed || got != "done" || runs != 2 {
		t.Fatalf("after a transient error: %q, replayed %v, err %v, runs %d", got, replayed, err, runs)
	}

	key = Key(t)
	errDeclined := errors.New("card declined")
	permanent := func(context.Context) (string, error) { runs++; return "", core.Permanent(errDeclined) }
	if _, replayed, err := core.Do(ctx, e, "do", key, permanent); !errors.Is(err, errDeclined) || replayed {
		t.Fatalf("permanent error: replayed %v, err %v; want errDeclined", replayed, err)
	}
	// Stored: later calls get its message back without running fn.
	_, replayed, err := core.Do(ctx, e, "do", key, ok)
	if err == nil || err.Error() != "card declined" || !replayed || runs != 3 {
		t.Fatalf("after a permanent error: replayed %v, err %v, runs %d; want the stored error", replayed, err, runs)
	}
}

// A run whose step charged, then failed, is retried by 50 concurrent calls
// of its key: the work runs once more, held until the 49 others are
// answered in flight, and its step returns the checkpoint of the first
// run's charge rather than charge again; 50 calls after it get its result.
func testStepsConcurrentRetries(t *testing.T, s core.Store) {
	if _, ok := s.(core.TxStore); !ok {
		checkpointer(t, s) // skips a store that keeps no checkpoints
	}
	e := newEngine(t, core.Config{Store: s})
	key := Key(t)
	const n = 50
	var (
		charges, runs, inFlight, answered atomic.Int64
		once                              sync.Once
	)
	hold := make(chan struct{})
	release := func() { once.Do(func() { close(hold) }) }
	errAgain := errors.New("failed after the charge")
	work := func(fail bool) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			if runs.Add(1) > 2 { // a duplicate ran alongside: let both end, the count fails
				release()
			}
			ch, err := core.Step(ctx, "charge", func(context.Context) (string, error) {
				return "ch_" + strconv.FormatInt(charges.Add(1), 10), nil
			})
			if err == nil && fail {
				return "", errAgain
			}
			<-hold
			return ch, err
		}
	}
	if _, _, err := core.Do(context.Background(), e, "steps", key, work(true)); !errors.Is(err, errAgain) {
		t.Fatalf("first run: err %v, want its own", err)
	}
	burst := func() (results []string, replays []bool, errs []error) {
		results, replays, errs = make([]string, n), make([]bool, n), make([]error, n)
		together(n, func(i int) {
			results[i], replays[i], errs[i] = core.Do(context.Background(), e, "steps", key, work(false))
			if errors.Is(errs[i], core.ErrInFlight) {
				inFlight.Add(1)
			}
			if answered.Add(1) == n-1 { // whatever the answers: a wrong one fails the counts below, never hangs
				release()
			}
		})
		return results, replays, errs
	}
	results, _, errs := burst()
	if charges.Load() != 1 || runs.Load() != 2 {
		t.Fatalf("%d charges in %d runs of the work, want 1 charge in 2 runs", charges.Load(), runs.Load())
	}
	for i := range n {
		if !errors.Is(errs[i], core.ErrInFlight) && (errs[i] != nil || results[i] != "ch_1") {
			t.Fatalf("retry %d: %q, err %v; want the first run's charge ch_1 or ErrInFlight", i, results[i], errs[i])
		}
	}
	if inFlight.Load() != n-1 {
		t.Fatalf("%d of %d concurrent retries answered in flight, want %d", inFlight.Load(), n, n-1)
	}
	results, replays, errs := burst()
	for i := range n {
		if errs[i] != nil || results[i] != "ch_1" || !replays[i] {
			t.Fatalf("call %d after the retry: %q, replayed %v, err %v; want the replay of ch_1", i, results[i], replays[i], errs[i])
		}
	}
	if charges.Load() != 1 || runs.Load() != 2 {
		t.Fatalf("%d charges in %d runs of the work after the replays, want 1 in 2", charges.Load(), runs.Load())
	}
}
