package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

type chargeResult struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// payments is a handler of two steps, charge and record; failRecord makes
// the record step fail while it is set.
type payments struct {
	mu         sync.Mutex
	charges    int
	records    int
	failRecord bool
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch, err := core.Step(r.Context(), "charge", func(context.Context) (chargeResult, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.charges++
		return chargeResult{ID: fmt.Sprintf("ch_%d", p.charges), Amount: 500}, nil
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	id, err := core.Step(r.Context(), "record", func(context.Context) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.failRecord {
			return 0, errors.New("database down")
		}
		p.records++
		return p.records, nil
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": id, "charge": ch}) //nolint:errcheck
}

// A handler whose second step fails answers 503, not stored; the retry
// skips the charge that finished and runs the record step; the stored
// response then replays, and the checkpoints are gone.
func TestStepsResumeAfterFailure(t *testing.T) {
	store := core.NewMemoryStore(0)
	eng := newDoEngine(t, core.Config{Store: store})
	p := &payments{failRecord: true}
	h := eng.Middleware(p)
	if w := post(t, h, "k1", "{}"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first run: %d %s", w.Code, w.Body)
	}
	p.failRecord = false
	w := post(t, h, "k1", "{}")
	if w.Code != http.StatusCreated || w.Body.String() != `{"charge":{"id":"ch_1","amount":500},"id":1}`+"\n" {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if w := post(t, h, "k1", "{}"); w.Header().Get(core.HeaderReplay) != "true" || w.Code != http.StatusCreated {
		t.Fatalf("third: %d, replay %q", w.Code, w.Header().Get(core.HeaderReplay))
	}
	if p.charges != 1 || p.records != 1 {
		t.Fatalf("charges %d, records %d; want 1 and 1", p.charges, p.records)
	}
	steps, err := store.LoadSteps(context.Background(), core.ID("", "k1", ""))
	if err != nil || len(steps) != 0 {
		t.Fatalf("checkpoints after the response was stored: %q, %v", steps, err)
	}
}

// A process that dies after its charge step leaves the lock to expire; the
// retry on another process resumes after the charge. The dead process,
// had it lived on, could not write a checkpoint any more.
func TestStepsResumeAfterLockExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := core.NewMemoryStore(0)
		// The dead process: none of its refreshes reaches the store.
		dead := newDoEngine(t, core.Config{Store: flakyRefresh{store}, LockTTL: time.Minute, Observer: (&events{}).observe})
		charged, crashed := make(chan struct{}), make(chan struct{})
		defer synctest.Wait()
		defer close(crashed)
		var stale error
		go core.Do(context.Background(), dead, "s", "k", func(ctx context.Context) (string, error) { //nolint:errcheck // the dead process
			core.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_1", nil }) //nolint:errcheck
			close(charged)
			<-crashed
			_, stale = core.Step(ctx, "late", func(context.Context) (int, error) { return 1, nil })
			return "", errors.New("crashed")
		})
		<-charged
		advance(time.Minute) // past the initial lease
		eng := newDoEngine(t, core.Config{Store: store})
		runs := map[string]int{}
		got, replayed, err := core.Do(context.Background(), eng, "s", "k", func(ctx context.Context) (string, error) {
			ch, err := core.Step(ctx, "charge", func(context.Context) (string, error) { runs["charge"]++; return "ch_2", nil })
			if err != nil {
				return "", err
			}
			n, err := core.Step(ctx, "record", func(context.Context) (int, error) { runs["record"]++; return 7, nil })
			return fmt.Sprint(ch, " ", n), err
		})
		if got != "ch_1 7" || replayed || err != nil || runs["charge"] != 0 || runs["record"] != 1 {
			t.Fatalf("retry: %q, %v, %v, runs %v; want the charge's checkpoint and a record run", got, replayed, err, runs)
		}
		crashed <- struct{}{} // the dead process wakes up
		synctest.Wait()
		if !errors.Is(stale, core.ErrLockLost) {
			t.Fatalf("a step of the call that lost its lock: %v, want ErrLockLost", stale)
		}
	})
}

func TestStepOutsideKey(t *testing.T) {
	v, err := core.Step(context.Background(), "a", func(context.Context) (int, error) { return 3, nil })
	if v != 3 || err != nil {
		t.Fatalf("Step without a key: %d, %v", v, err)
	}
	errFn := errors.New("fn")
	if _, err := core.Step(context.Background(), "a", func(context.Context) (int, error) { return 0, errFn }); err != errFn {
		t.Fatalf("Step without a key: err %v", err)
	}
}

// plainStore is a Store and nothing more.
type plainStore struct{ core.Store }

func TestStepNeedsCheckpointer(t *testing.T) {
	eng := newDoEngine(t, core.Config{Store: plainStore{core.NewMemoryStore(0)}})
	ran := false
	_, _, err := core.Do(context.Background(), eng, "s", "k", func(ctx context.Context) (int, error) {
		return core.Step(ctx, "a", func(context.Context) (int, error) { ran = true; return 1, nil })
	})
	if err == nil || ran {
		t.Fatalf("Step on a store without checkpoints: ran %v, err %v; want an error before fn runs", ran, err)
	}
	// Through a wrapper (metrics), the wrapped store's checkpoints serve.
	eng = newDoEngine(t, core.Config{Store: instrument.Store(core.NewMemoryStore(0), func(context.Context, instrument.Op, time.Duration, error, int) {})})
	v, _, err := core.Do(context.Background(), eng, "s", "k", func(ctx context.Context) (int, error) {
		return core.Step(ctx, "a", func(context.Context) (int, error) { return 1, nil })
	})
	if v != 1 || err != nil {
		t.Fatalf("Step through instrument.Store: %d, %v", v, err)
	}
}

// A step whose checkpoint does not decode into its type fails, and so does
// one whose checkpoint cannot be written.
func TestStepCheckpointErrors(t *testing.T) {
	store := core.NewMemoryStore(0)
	eng := newDoEngine(t, core.Config{Store: store})
	work := func(ctx context.Context) (int, error) {
		if _, err := core.Step(ctx, "a", func(context.Context) (string, error) { return "text", nil }); err != nil {
			return 0, err
		}
		return 0, errors.New("again")
	}
	core.Do(context.Background(), eng, "s", "k", work) //nolint:errcheck
	_, _, err := core.Do(context.Background(), eng, "s", "k", func(ctx context.Context) (int, error) {
		return core.Step(ctx, "a", func(context.Context) (int, error) { return 1, nil })
	})
	if !errors.Is(err, core.ErrCorruptRecord) {
		t.Fatalf("checkpoint of another type: %v, want ErrCorruptRecord", err)
	}

	full := core.NewMemoryStore(1) // room for the lock, none for checkpoints of another key
	eng = newDoEngine(t, core.Config{Store: full})
	_, _, err = core.Do(context.Background(), eng, "s", "k", func(ctx context.Context) (int, error) {
		if err := full.SaveStep(context.Background(), "other", "x", "a", nil, time.Minute); !errors.Is(err, core.ErrLockLost) {
			t.Errorf("SaveStep of a key not locked: %v", err)
		}
		return core.Step(ctx, "a", func(context.Context) (int, error) { return 1, nil })
	})
	if err != nil {
		t.Fatalf("one key's checkpoints in a store of one key: %v", err)
	}
}

// A step whose result JSON cannot encode ran, and cannot be checkpointed:
// its error is Permanent, so Do keeps it rather than run the effect again
// on every retry.
func TestStepResultNotEncodable(t *testing.T) {
	eng := newDoEngine(t, core.Config{})
	effects := 0
	work := func(ctx context.Context) (float64, error) {
		return core.Step(ctx, "charge", func(context.Context) (float64, error) {
			effects++
			return math.NaN(), nil
		})
	}
	for i := range 2 {
		if _, _, err := core.Do(context.Background(), eng, "s", "k", work); err == nil || !strings.Contains(err.Error(), "unsupported value: NaN") {
			t.Fatalf("call %d: %v, want the encoding's error", i, err)
		}
	}
	if effects != 1 {
		t.Fatalf("the step ran %d times, want 1", effects)
	}
}

// Steps of one run may run from several goroutines; each runs once.
func TestStepsConcurrent(t *testing.T) {
	eng := newDoEngine(t, core.Config{})
	var mu sync.Mutex
	runs := map[string]int{}
	work := func(ctx context.Context) (int, error) {
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprint("step", i)
				_, errs[i] = core.Step(ctx, name, func(context.Context) (int, error) {
					mu.Lock()
					runs[name]++
					mu.Unlock()
					return i, nil
				})
			}()
		}
		wg.Wait()
		return 0, errors.Join(append(errs, errors.New("run again"))...)
	}
	core.Do(context.Background(), eng, "s", "k", work) //nolint:errcheck
	core.Do(context.Background(), eng, "s", "k", work) //nolint:errcheck
	for i := range 10 {
		if n := runs[fmt.Sprint("step", i)]; n != 1 {
			t.Fatalf("step%d ran %d times, want 1", i, n)
		}
	}
}

// A checkpoint serves only the request that wrote it. A payment of 900
// charged, then failed (not stored); the same key sent with another body
// must not record its payment on the 900 charge, nor charge again; the
// first request's retry resumes after its charge. The same with Do's Args.
func TestStepCheckpointOfAnotherRequest(t *testing.T) {
	eng := newDoEngine(t, core.Config{})
	charges, failRecord := 0, true
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount int `json:"amount"`
		}
		json.NewDecoder(r.Body).Decode(&req) //nolint:errcheck
		ch, err := core.Step(r.Context(), "charge", func(context.Context) (chargeResult, error) {
			charges++
			return chargeResult{ID: fmt.Sprint("ch_", charges), Amount: req.Amount}, nil
		})
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
		case failRecord:
			http.Error(w, "database down", http.StatusServiceUnavailable)
		case ch.Amount != req.Amount:
			t.Errorf("a payment of %d recorded on the charge %s of %d", req.Amount, ch.ID, ch.Amount)
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	if w := post(t, h, "k1", `{"amount":900}`); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	failRecord = false
	if w := post(t, h, "k1", `{"amount":5}`); w.Code == http.StatusCreated {
		t.Fatalf("another body under the key: %d, the first request's charge taken for its own", w.Code)
	}
	if w := post(t, h, "k1", `{"amount":900}`); w.Code != http.StatusCreated || charges != 1 {
		t.Fatalf("the first request's retry: %d %s, %d charges; want 201 and 1", w.Code, w.Body, charges)
	}

	runs := 0
	work := func(fail bool) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			v, err := core.Step(ctx, "a", func(context.Context) (string, error) { runs++; return fmt.Sprint("a", runs), nil })
			if err == nil && fail {
				err = errors.New("run again")
			}
			return v, err
		}
	}
	core.Do(context.Background(), eng, "s", "k", work(true), core.DoOptions{Args: 1}) //nolint:errcheck
	if v, _, err := core.Do(context.Background(), eng, "s", "k", work(false), core.DoOptions{Args: 2}); !errors.Is(err, core.ErrKeyReused) || runs != 1 {
		t.Fatalf("Do with other Args: %q, %v, step ran %d times; want ErrKeyReused, 1", v, err, runs)
	}
	if v, _, err := core.Do(context.Background(), eng, "s", "k", work(false), core.DoOptions{Args: 1}); v != "a1" || err != nil || runs != 1 {
		t.Fatalf("Do with the same Args: %q, %v, step ran %d times; want a1, 1", v, err, runs)
	}
}

// A step whose result encodes but does not decode into its type (an
// interface, a MarshalJSON without its UnmarshalJSON) would fail every
// retry with ErrCorruptRecord, for the key's TTL: its first run fails with
// a Permanent error instead, as one that does not encode does.
func TestStepResultNotDecodable(t *testing.T) {
	eng := newDoEngine(t, core.Config{})
	effects := 0
	work := func(ctx context.Context) (int, error) {
		_, err := core.Step(ctx, "charge", func(context.Context) (labeled, error) {
			effects++
			return label("ch_1"), nil
		})
		return 0, err
	}
	for i := range 2 {
		_, replayed, err := core.Do(context.Background(), eng, "s", "k", work)
		if err == nil || !strings.Contains(err.Error(), "does not decode") || errors.Is(err, core.ErrCorruptRecord) || replayed != (i == 1) {
			t.Fatalf("call %d: %v, replayed %v; want the decoding's error, stored", i, err, replayed)
		}
	}
	if effects != 1 {
		t.Fatalf("the step ran %d times, want 1", effects)
	}
}

// A step called once the work under its key has ended (from a goroutine
// that outlives the handler) is refused before fn runs: its checkpoint
// could not be saved, and after a failed run the retry would run it again.
func TestStepAfterWorkEnded(t *testing.T) {
	eng := newDoEngine(t, core.Config{})
	for _, fail := range []bool{false, true} {
		var work context.Context
		key := fmt.Sprint("k-", fail)
		core.Do(context.Background(), eng, "s", key, func(ctx context.Context) (int, error) { //nolint:errcheck
			work = ctx
			if fail {
				return 0, errors.New("failed")
			}
			return 1, nil
		})
		ran := false
		_, err := core.Step(work, "late", func(context.Context) (int, error) { ran = true; return 1, nil })
		if ran || !errors.Is(err, core.ErrLockLost) || strings.Contains(err.Error(), "ran") {
			t.Fatalf("failed %v: a step after the work ended: ran %v, %v; want ErrLockLost before fn runs", fail, ran, err)
		}
	}
}

// A step name PostgreSQL cannot store (not UTF-8, or with a NUL byte) is
// refused on every store before fn runs: on PostgreSQL fn ran and its
// checkpoint failed, on every retry.
func TestStepNameNotStorable(t *testing.T) {
	eng := newDoEngine(t, core.Config{})
	for _, name := range []string{"charge \xff", "charge\x00"} {
		ran := false
		_, _, err := core.Do(context.Background(), eng, "s", "k", func(ctx context.Context) (int, error) {
			return core.Step(ctx, name, func(context.Context) (int, error) { ran = true; return 1, nil })
		})
		if ran || err == nil {
			t.Fatalf("step %q: ran %v, %v; want an error before fn runs", name, ran, err)
		}
	}
}
