package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/instrument"
)

// tier is a store that can be taken down, emptied (data lost) or stalled,
// and counts its calls.
type tier struct {
	mu    sync.Mutex
	s     *core.MemoryStore
	down  bool
	stall bool
	calls atomic.Int32
}

var errTierDown = errors.New("tier down")

func newTier() *tier { return &tier{s: core.NewMemoryStore(0)} }

func (t *tier) EnforcesQuota() bool { return true }

func (t *tier) get(ctx context.Context) (*core.MemoryStore, error) {
	t.calls.Add(1)
	if err := ctx.Err(); err != nil { // as a network client does
		return nil, err
	}
	t.mu.Lock()
	s, down, stall := t.s, t.down, t.stall
	t.mu.Unlock()
	if stall {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if down {
		return nil, errTierDown
	}
	return s, nil
}

func (t *tier) set(down, stall bool) {
	t.mu.Lock()
	t.down, t.stall = down, stall
	t.mu.Unlock()
}

func (t *tier) lose() {
	t.mu.Lock()
	t.s = core.NewMemoryStore(0)
	t.mu.Unlock()
}

func (t *tier) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	s, err := t.get(ctx)
	if err != nil {
		return nil, "", err
	}
	return s.Acquire(ctx, key, ttl)
}

func (t *tier) Complete(ctx context.Context, key, token string, rec []byte, ttl time.Duration) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.Complete(ctx, key, token, rec, ttl)
}

func (t *tier) Release(ctx context.Context, key, token string) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.Release(ctx, key, token)
}

func (t *tier) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.Refresh(ctx, key, token, ttl)
}

func (t *tier) Inspect(ctx context.Context, key string) (core.KeyState, error) {
	s, err := t.get(ctx)
	if err != nil {
		return core.KeyState{}, err
	}
	return s.Inspect(ctx, key)
}

func (t *tier) Purge(ctx context.Context, key string) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.Purge(ctx, key)
}

func (t *tier) Unlock(ctx context.Context, key string) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.Unlock(ctx, key)
}

func (t *tier) InFlight(ctx context.Context, limit int) ([]core.KeyState, error) {
	s, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.InFlight(ctx, limit)
}

func (t *tier) SaveStep(ctx context.Context, key, token, step string, result []byte, ttl time.Duration) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.SaveStep(ctx, key, token, step, result, ttl)
}

func (t *tier) LoadSteps(ctx context.Context, key string) (map[string][]byte, error) {
	s, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.LoadSteps(ctx, key)
}

func TestTieredConformance(t *testing.T) {
	newStore := func(*testing.T) core.Store { return core.NewTiered(newTier(), newTier()) }
	idemtest.TestStore(t, newStore, idemtest.FakeTime())
	idemtest.TestLease(t, newStore, idemtest.FakeTime())
	idemtest.TestAdmin(t, newStore, idemtest.FakeTime())
	idemtest.TestQuota(t, newStore, idemtest.FakeTime())
}

// tieredEngine returns an Engine on a tiered store and its tiers.
func tieredEngine(t *testing.T, ev *events) (*core.Engine, *tier, *tier) {
	t.Helper()
	fast, durable := newTier(), newTier()
	cfg := core.Config{Store: core.NewTiered(fast, durable), StoreTimeout: 100 * time.Millisecond, BreakerFailures: -1}
	if ev != nil {
		cfg.Observer = ev.observe
	}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng, fast, durable
}

// run makes one call of key whose work counts its runs and stores "done".
func run(t *testing.T, eng *core.Engine, key string, runs *atomic.Int32) (*core.Record, error) {
	t.Helper()
	l, rec, err := eng.Acquire(&core.Call{Key: key})
	if l == nil {
		return rec, err
	}
	if !l.Protected() {
		t.Errorf("key %s ran unprotected", key)
	}
	runs.Add(1)
	l.Complete(&core.Record{Code: 200, Body: []byte("done")})
	return &core.Record{Code: 200, Body: []byte("done")}, nil
}

func TestTieredRoundTrips(t *testing.T) { synctest.Test(t, testTieredRoundTrips) }

func testTieredRoundTrips(t *testing.T) {
	fast, durable := &runTier{tier: newTier()}, newTier()
	fast.id.Store("redis")
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), StoreTimeout: 100 * time.Millisecond, BreakerFailures: -1})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	// The process's first call reads the marker and its server's name
	// (RunID), and writes it: three more fast calls; then a read (two) a
	// minute.
	run(t, eng, "first", &runs) //nolint:errcheck
	if f, d := fast.calls.Load(), durable.calls.Load(); f != 5 || d != 2 {
		t.Fatalf("the process's first request: %d fast and %d durable calls, want 5 and 2", f, d)
	}
	fast.calls.Store(0)
	durable.calls.Store(0)
	run(t, eng, "k", &runs) //nolint:errcheck
	if f, d := fast.calls.Load(), durable.calls.Load(); f != 2 || d != 2 {
		t.Fatalf("first request: %d fast and %d durable calls, want 2 and 2", f, d)
	}
	advance(time.Minute)
	fast.calls.Store(0)
	durable.calls.Store(0)
	run(t, eng, "a minute later", &runs) //nolint:errcheck
	if f, d := fast.calls.Load(), durable.calls.Load(); f != 4 || d != 2 {
		t.Fatalf("a first request a minute later: %d fast and %d durable calls, want 4 (the marker's read) and 2", f, d)
	}
	fast.calls.Store(0)
	durable.calls.Store(0)
	if rec, err := run(t, eng, "k", &runs); err != nil || string(rec.Body) != "done" {
		t.Fatalf("replay: %v, %v", rec, err)
	}
	if f, d := fast.calls.Load(), durable.calls.Load(); f != 1 || d != 0 {
		t.Fatalf("replay: %d fast and %d durable calls, want 1 and 0", f, d)
	}
}

// The fast tier loses its data (FLUSHALL, a restart without persistence):
// every completed key still replays, and is written back to it.
func TestTieredFastTierDataLost(t *testing.T) {
	eng, fast, durable := tieredEngine(t, nil)
	var runs atomic.Int32
	for _, k := range []string{"a", "b", "c"} {
		run(t, eng, k, &runs) //nolint:errcheck
	}
	fast.lose()
	for _, k := range []string{"a", "b", "c"} {
		if rec, err := run(t, eng, k, &runs); err != nil || rec == nil || string(rec.Body) != "done" {
			t.Fatalf("%s after the fast tier lost its data: %v, %v", k, rec, err)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("handlers ran %d times, want 3", runs.Load())
	}
	durable.calls.Store(0)
	run(t, eng, "a", &runs) //nolint:errcheck
	if durable.calls.Load() != 0 {
		t.Fatal("the record was not written back to the fast tier")
	}
}

// The fast tier down, then stalled: calls go to the durable tier, still
// protected, each fallback reported; the fast tier back: no key runs twice.
func TestTieredFastTierDownAndBack(t *testing.T) { synctest.Test(t, testTieredFastTierDownAndBack) }

func testTieredFastTierDownAndBack(t *testing.T) {
	for _, stall := range []bool{false, true} {
		var ev events
		eng, fast, _ := tieredEngine(t, &ev)
		var runs atomic.Int32
		run(t, eng, "before", &runs) //nolint:errcheck
		// A key in flight when the fast tier goes.
		inflight, _, err := eng.Acquire(&core.Call{Key: "switch"})
		if err != nil || inflight == nil {
			t.Fatalf("acquire: %v", err)
		}
		fast.set(!stall, stall)
		if _, _, err := eng.Acquire(&core.Call{Key: "switch"}); !errors.Is(err, core.ErrInFlight) {
			t.Fatalf("stall=%v: a duplicate of a key in flight while the fast tier is down: %v, want ErrInFlight", stall, err)
		}
		if rec, err := run(t, eng, "before", &runs); err != nil || rec == nil {
			t.Fatalf("stall=%v: a key completed before the outage: %v, %v", stall, rec, err)
		}
		run(t, eng, "during", &runs) //nolint:errcheck
		if ev.count(core.OutcomeFallback) == 0 || ev.count(core.OutcomeStoreError) != 0 {
			t.Fatalf("stall=%v: events %v: want fallbacks and no store error", stall, ev.all)
		}
		fast.set(false, false)
		if _, _, err := eng.Acquire(&core.Call{Key: "switch"}); !errors.Is(err, core.ErrInFlight) {
			t.Fatalf("stall=%v: a duplicate once the fast tier is back: %v, want ErrInFlight", stall, err)
		}
		inflight.Complete(&core.Record{Code: 200, Body: []byte("done")})
		for _, k := range []string{"before", "during", "switch"} {
			if rec, err := run(t, eng, k, &runs); err != nil || rec == nil || string(rec.Body) != "done" {
				t.Fatalf("stall=%v: %s after the fast tier came back: %v, %v", stall, k, rec, err)
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("stall=%v: handlers ran %d times, want 2", stall, runs.Load())
		}
	}
}

// Under FailClosed, the durable tier down, the fast tier holds a key alone
// only if it has held every record for at least the records' TTL (its
// marker): a fast tier that lost its data, or missed a record while it was
// down, may answer "free" for a completed key, which would run again.
// Fail-open still falls back (the alternative is to run unprotected).
func TestTieredStandInAfterLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		miss func(fast *runTier, complete func()) // the fast tier misses the completed key's record
	}{
		{"fast tier lost its data", func(fast *runTier, complete func()) { complete(); fast.lose() }},
		{"fast tier down at the completion", func(fast *runTier, complete func()) {
			fast.set(true, false)
			complete()
			fast.set(false, false)
		}},
		// A snapshot (or a replica that lagged): the marker, not the record.
		{"fast tier back from a restart with older data", func(fast *runTier, complete func()) {
			complete()
			fast.id.Store("after the restart")
			if err := fast.s.Purge(context.Background(), core.ID("", "k", "")); err != nil {
				panic(err)
			}
		}},
	} {
		for _, mode := range []struct {
			tx, failClosed bool
		}{{false, true}, {true, true}, {false, false}, {true, false}} {
			failClosed := mode.failClosed
			t.Run(fmt.Sprintf("%s/tx=%v/failClosed=%v", tc.name, mode.tx, failClosed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					fast := &runTier{tier: newTier()}
					fast.id.Store("before")
					durable, store := switchableDurable(t, fast, mode.tx)
					eng, err := core.New(core.Config{Store: store, FailClosed: failClosed, Observer: func(core.Event) {}})
					if err != nil {
						t.Fatal(err)
					}
					var runs atomic.Int32
					marked(t, eng)
					tc.miss(fast, func() { run(t, eng, "k", &runs) }) //nolint:errcheck
					run(t, eng, "other", &runs)                       //nolint:errcheck // the fast tier answers: the marker is read, or dropped
					durable.set(true, false)
					l, rec, err := eng.Acquire(&core.Call{Key: "k"})
					switch {
					case failClosed && (l != nil || rec != nil || !errors.Is(err, core.ErrStoreUnavailable)):
						t.Fatalf("the completed key again, the durable tier down: lease %v, record %v, %v; want ErrStoreUnavailable", l != nil, rec, err)
					case failClosed && !strings.Contains(err.Error(), "cannot hold the key alone"):
						t.Fatalf("the refusal: %v; want it to say why", err)
					case !failClosed && (l == nil || !l.Protected()):
						t.Fatalf("fail-open: lease %v, %v; want the fast tier's lock, as before", l != nil, err)
					}
					if l != nil {
						l.Release(0, nil)
					}
					// The records' TTL passed: every record the fast tier missed
					// has expired, and it holds keys alone again.
					durable.set(false, false)
					advance(eng.Config().ResponseTTL)
					run(t, eng, "another", &runs) //nolint:errcheck
					durable.set(true, false)
					if _, err := run(t, eng, "new", &runs); err != nil {
						t.Fatalf("a new key a TTL later, the durable tier down: %v; want the fast tier's lock", err)
					}
				})
			})
		}
	}
}

// runTier is a tier that names its server (as redislock's RunID does).
type runTier struct {
	*tier
	id atomic.Value // string
}

func (t *runTier) RunID(ctx context.Context, _ string) (string, error) {
	if _, err := t.get(ctx); err != nil {
		return "", err
	}
	return t.id.Load().(string), nil
}

// switchableDurable returns a durable tier that a test takes down (set),
// a TxStore if tx, and the tiered store of fast in front of it.
func switchableDurable(t *testing.T, fast core.Store, tx bool) (interface{ set(down, stall bool) }, core.Store) {
	if tx {
		d := outTx{&downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}}
		return txDown{d}, core.NewTiered(fast, d)
	}
	d := newTier()
	return d, core.NewTiered(fast, d)
}

// txDown gives an outTx the set of a tier.
type txDown struct{ outTx }

func (d txDown) set(down, _ bool) { d.down.Store(down) }

// The durable tier down: the fast tier alone protects, and says so.
func TestTieredDurableTierDown(t *testing.T) {
	var ev events
	eng, _, durable := tieredEngine(t, &ev)
	durable.set(true, false)
	var runs atomic.Int32
	run(t, eng, "k", &runs) //nolint:errcheck
	if rec, err := run(t, eng, "k", &runs); err != nil || rec == nil || runs.Load() != 1 {
		t.Fatalf("replay with the durable tier down: %v, %v, %d runs", rec, err, runs.Load())
	}
	if ev.count(core.OutcomeFallback) == 0 {
		t.Fatalf("events %v: want a fallback", ev.all)
	}
}

// Many duplicates of many keys while the fast tier flaps: each key runs once.
func TestTieredConcurrentFlapping(t *testing.T) { synctest.Test(t, testTieredConcurrentFlapping) }

func testTieredConcurrentFlapping(t *testing.T) {
	eng, fast, _ := tieredEngine(t, nil)
	var runs [20]atomic.Int32
	var wg sync.WaitGroup
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				fast.set(i%2 == 1, false)
				if i%3 == 0 {
					fast.lose()
				}
				advance(time.Millisecond)
			}
		}
	}()
	for k := range runs {
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					rec, err := run(t, eng, string(rune('a'+k)), &runs[k])
					if err == nil && rec != nil {
						return
					}
					if !errors.Is(err, core.ErrInFlight) {
						t.Errorf("key %d: %v", k, err)
						return
					}
					advance(time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-stopped
	for k := range runs {
		if n := runs[k].Load(); n != 1 {
			t.Errorf("key %d ran %d times, want 1", k, n)
		}
	}
}

func (t *tier) Wait(ctx context.Context, key string) error {
	s, err := t.get(ctx)
	if err != nil {
		return err
	}
	return s.Wait(ctx, key)
}

// A fast-tier lock over a key the durable tier completed (taken late by a
// stalled Redis, or writing the record back) does not hide the record.
func TestTieredFastLockOverDurableRecord(t *testing.T) {
	eng, fast, _ := tieredEngine(t, nil)
	var runs atomic.Int32
	run(t, eng, "k", &runs) //nolint:errcheck
	fast.lose()
	if _, _, err := fast.Acquire(context.Background(), core.ID("", "k", ""), time.Minute); err != nil {
		t.Fatal(err) // the late lock
	}
	rec, err := run(t, eng, "k", &runs)
	if err != nil || rec == nil || string(rec.Body) != "done" || runs.Load() != 1 {
		t.Fatalf("behind a late fast lock: record %v, err %v, %d runs; want the durable record replayed", rec, err, runs.Load())
	}
}

// A purge through the tiered store drops this process's cached copy.
func TestTieredPurgeInvalidatesReplayCache(t *testing.T) {
	store := core.NewTiered(newTier(), newTier())
	eng, err := core.New(core.Config{Store: store, ReplayCache: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	run(t, eng, "k", &runs) //nolint:errcheck
	run(t, eng, "k", &runs) //nolint:errcheck // a replay, now cached
	if err := store.(core.Admin).Purge(context.Background(), core.ID("", "k", "")); err != nil {
		t.Fatal(err)
	}
	run(t, eng, "k", &runs) //nolint:errcheck
	if runs.Load() != 2 {
		t.Fatalf("after a purge the work ran %d times in all, want 2 (the cached copy replayed)", runs.Load())
	}
}

// A purge made by another process drops this process's cached copy also
// when the tiers are wrapped, as by a metrics InstrumentStore per tier.
func TestTieredWrappedTiersPurgeInvalidatesReplayCache(t *testing.T) {
	fast, durable := core.NewMemoryStore(0), core.NewMemoryStore(0)
	store := core.NewTiered(instrument.Store(fast, nopObserve), instrument.Store(durable, nopObserve))
	eng, err := core.New(core.Config{Store: store, ReplayCache: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	run(t, eng, "k", &runs)                //nolint:errcheck
	run(t, eng, "k", &runs)                //nolint:errcheck // a replay, now cached
	other := core.NewTiered(fast, durable) // another process's store on the same tiers
	if err := other.(core.Admin).Purge(context.Background(), core.ID("", "k", "")); err != nil {
		t.Fatal(err)
	}
	run(t, eng, "k", &runs) //nolint:errcheck
	if runs.Load() != 2 {
		t.Fatalf("after a purge the work ran %d times in all, want 2 (the cached copy replayed)", runs.Load())
	}
}

// A purge with the fast tier down, or stalled (a client that redials a
// Redis that is down until the deadline: it gets half the purge's time),
// drops the durable tier's record and says that the fast tier's copy was
// left: it replays once that tier is back, until it expires.
func TestTieredPurgeFastTierFails(t *testing.T) {
	for _, tc := range []struct {
		name        string
		down, stall bool
	}{{"down", true, false}, {"stalled", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast, durable := newTier(), newTier()
				store := core.NewTiered(fast, durable)
				eng, err := core.New(core.Config{Store: store})
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int32
				run(t, eng, "k", &runs) //nolint:errcheck
				id := core.ID("", "k", "")
				fast.set(tc.down, tc.stall)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err = store.(core.Admin).Purge(ctx, id)
				if err == nil || !strings.Contains(err.Error(), "durable tier only") || tc.down && !errors.Is(err, errTierDown) {
					t.Fatalf("purge: %v; want the durable tier's record purged, and an error wrapping the fast tier's", err)
				}
				if _, err := durable.s.Inspect(context.Background(), id); !errors.Is(err, core.ErrNotFound) {
					t.Fatalf("the durable tier's record after the purge: %v; want it gone", err)
				}
				if st, err := fast.s.Inspect(context.Background(), id); err != nil || st.Record == nil {
					t.Fatalf("the fast tier's copy: %+v, %v; want it left", st, err)
				}
			})
		})
	}
}

// A stalled durable tier does not open the fast tier's breaker by leaving
// its calls no time: a duplicate of a key whose lock only the fast tier
// holds still meets it, and does not run the work a second time.
func TestTieredStalledDurableLeavesFastItsShare(t *testing.T) {
	synctest.Test(t, testTieredStalledDurableLeavesFastItsShare)
}

func testTieredStalledDurableLeavesFastItsShare(t *testing.T) {
	fast, durable := newTier(), newTier()
	store := core.NewTiered(fast, durable)
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 100*time.Millisecond)
	}
	c, cancel := ctx()
	defer cancel()
	_, a, err := store.Acquire(c, "a", time.Minute) // both tiers lock it
	if err != nil || a == "" {
		t.Fatal(err)
	}
	durable.set(true, false) // down: r is locked in the fast tier only
	_, r, err := store.Acquire(c, "r", time.Minute)
	if err != nil || r == "" {
		t.Fatal(err)
	}
	durable.set(false, true) // stalled while a's lock is refreshed
	for range 8 {
		c, cancel := ctx()
		store.Refresh(c, "a", a, time.Minute) //nolint:errcheck
		cancel()
	}
	durable.set(false, false)
	c2, cancel2 := ctx()
	defer cancel2()
	if _, tok, err := store.Acquire(c2, "r", time.Minute); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("a duplicate of r after the stall: token %q, err %v; want ErrInFlight (the fast tier's breaker opened)", tok, err)
	}
}

// Checkpoints go to the durable tier; with it down, to the fast one; a
// retry reads both, and runs on while either answers.
func TestTieredSteps(t *testing.T) {
	var ev events
	eng, fast, durable := tieredEngine(t, &ev)
	runs := map[string]int{}
	work := func(fail bool) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			var out string
			for _, name := range []string{"a", "b"} {
				v, err := core.Step(ctx, name, func(context.Context) (string, error) { runs[name]++; return name + "1", nil })
				if err != nil {
					return "", err
				}
				out += v
				if fail {
					return "", errors.New("run again")
				}
			}
			return out, nil
		}
	}
	ctx := context.Background()
	core.Do(ctx, eng, "s", "k", work(true)) //nolint:errcheck // a saved in the durable tier
	id := core.ID("s", "k", "")
	if d, _ := durable.s.LoadSteps(ctx, id); string(d["a"]) != `"a1"` {
		t.Fatalf("durable tier's checkpoints: %q", d)
	}
	durable.set(true, false)
	core.Do(ctx, eng, "s", "k", work(false)) //nolint:errcheck // the durable tier fails the load: the fast tier alone
	if runs["a"] != 2 {
		t.Fatalf("step a ran %d times; without the durable tier's checkpoints it runs again", runs["a"])
	}
	// The durable tier failed the Acquire: the lock and b's checkpoint are
	// the fast tier's.
	durable.set(false, false)
	if f, _ := fast.s.LoadSteps(ctx, id); len(f) != 0 {
		t.Fatalf("fast tier's checkpoints after the completion: %q", f)
	}

	// Both tiers read: a checkpoint saved while the durable tier was down
	// serves a retry after it came back.
	runs = map[string]int{}
	durable.set(true, false)
	core.Do(ctx, eng, "s", "k2", work(true)) //nolint:errcheck
	durable.set(false, false)
	fast.set(true, false)
	// The fast tier is down now: the lock is the durable tier's, and its
	// checkpoints are all there is.
	got, _, err := core.Do(ctx, eng, "s", "k2", work(false))
	if err != nil || got != "a1b1" || runs["a"] != 2 {
		t.Fatalf("fast tier down: %q, %v, runs %v", got, err, runs)
	}
	fast.set(false, false)
	runs = map[string]int{}
	durable.set(true, false)
	core.Do(ctx, eng, "s", "k3", work(true)) //nolint:errcheck // a in the fast tier
	durable.set(false, false)
	got, _, err = core.Do(ctx, eng, "s", "k3", work(false))
	if err != nil || got != "a1b1" || runs["a"] != 1 || runs["b"] != 1 {
		t.Fatalf("both tiers up again: %q, %v, runs %v; want a's checkpoint from the fast tier", got, err, runs)
	}
}

// Steps keep their checkpoints also when the tiers are wrapped, as by a
// metrics InstrumentStore per tier.
func TestTieredWrappedTiersSteps(t *testing.T) {
	store := core.NewTiered(instrument.Store(core.NewMemoryStore(0), nopObserve), instrument.Store(core.NewMemoryStore(0), nopObserve))
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	work := func(fail bool) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			v, err := core.Step(ctx, "a", func(context.Context) (string, error) { runs++; return "a1", nil })
			if err != nil || fail {
				return "", errors.Join(err, errors.New("run again"))
			}
			return v, nil
		}
	}
	core.Do(context.Background(), eng, "s", "k", work(true)) //nolint:errcheck // a's checkpoint saved
	got, _, err := core.Do(context.Background(), eng, "s", "k", work(false))
	if err != nil || got != "a1" || runs != 1 {
		t.Fatalf("run again: %q, %v; step a ran %d times, want 1 (its checkpoint)", got, err, runs)
	}
}

// Over a durable TxStore the tiered store is one too: the durable tier's
// transaction holds the key, the fast tier gets the record after the
// commit and serves the replays, and a fast lock is a conflict.
func TestTieredTx(t *testing.T) {
	ctx := context.Background()
	fast := newTier()
	store := core.NewTiered(fast, idemtest.NewTxStore(t))
	if _, ok := store.(core.TxStore); !ok {
		t.Fatal("NewTiered over a TxStore is not a TxStore")
	}
	if _, ok := core.NewTiered(newTier(), newTier()).(core.TxStore); ok {
		t.Fatal("NewTiered over a plain store is a TxStore")
	}
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	if _, err := run(t, eng, "k", &runs); err != nil {
		t.Fatal(err)
	}
	st, err := fast.s.Inspect(ctx, core.ID("", "k", ""))
	if err != nil || st.Record == nil {
		t.Fatalf("the fast tier after the commit: %+v, %v; want the record", st, err)
	}
	if rec, err := run(t, eng, "k", &runs); err != nil || rec == nil || runs.Load() != 1 {
		t.Fatalf("replay: %v, %v, %d runs; want the record, 1 run", rec, err, runs.Load())
	}

	// A fast lock (a request running, or a crashed process's for its
	// initial lease) holds the key off.
	if _, _, err := fast.s.Acquire(ctx, core.ID("", "crashed", ""), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, eng, "crashed", &runs); !errors.Is(err, core.ErrInFlight) || runs.Load() != 1 {
		t.Fatalf("under a fast lock: %v, %d runs; want ErrInFlight", err, runs.Load())
	}

	// Concurrent duplicates: one run.
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(t, eng, "dup", &runs) //nolint:errcheck // ErrInFlight for most
		}()
	}
	wg.Wait()
	if runs.Load() != 2 {
		t.Fatalf("%d runs after 50 duplicates, want 2 in all", runs.Load())
	}
}

func TestTieredTxHTTPConformance(t *testing.T) {
	idemtest.TestHTTP(t, serveMux, func(t *testing.T) core.Store {
		return core.NewTiered(core.NewMemoryStore(0), idemtest.NewTxStore(t))
	})
}

// downTx is a TxStore whose Begin and Acquire fail while down, and whose
// Begin answers ErrStoreBusy while busy.
type downTx struct {
	core.TxStore
	down, busy atomic.Bool
}

func (d *downTx) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	if d.down.Load() {
		return nil, "", errors.New("durable tier down")
	}
	return d.TxStore.Acquire(ctx, key, ttl)
}

func (d *downTx) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	switch {
	case d.down.Load():
		return nil, nil, errors.New("durable tier down")
	case d.busy.Load():
		return nil, nil, core.ErrStoreBusy
	}
	return d.TxStore.Begin(ctx, key, idle)
}

// With the durable TxStore down, the fast tier's lock alone holds the key,
// as in the lease mode: concurrent duplicates run once, and the record
// replays from the fast tier.
func TestTieredTxDurableDown(t *testing.T) {
	durable := &downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}
	durable.down.Store(true)
	var ev events
	eng, err := core.New(core.Config{Store: core.NewTiered(newTier(), durable), Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(t, eng, "k", &runs) //nolint:errcheck // ErrInFlight for most
		}()
	}
	wg.Wait()
	if rec, err := run(t, eng, "k", &runs); err != nil || rec == nil || runs.Load() != 1 {
		t.Fatalf("replay with the durable tier down: %v, %v, %d runs; want the record, 1 run", rec, err, runs.Load())
	}
	if ev.count(core.OutcomeFallback) == 0 {
		t.Error("no fallback reported")
	}
}

// A durable tier that failed to take a key (down, or slower than its share
// of StoreTimeout) but answers by the time the work completes gets the
// record too: the record survives the fast tier losing its data, and the
// work does not run again. One that still fails then is a fallback event.
func TestTieredFallbackRecordReachesDurable(t *testing.T) {
	for _, mode := range []string{"lease", "transactional"} {
		t.Run(mode, func(t *testing.T) {
			fast := newTier()
			durable, down := durableOf(t, mode)
			var ev events
			eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: ev.observe})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			for i, key := range []string{"kept", "lost"} {
				down(true)
				l, _, err := eng.Acquire(&core.Call{Key: key})
				if err != nil || l == nil || !l.Protected() {
					t.Fatalf("%s: %v, %v; want a protected lease", key, l, err)
				}
				runs.Add(1)
				down(i == 1) // "kept": the durable tier is back when the work completes
				if err := l.Complete(&core.Record{Code: 201, Body: []byte(key)}); err != nil {
					t.Fatalf("%s: Complete: %v", key, err)
				}
			}
			fallbacks := ev.count(core.OutcomeFallback)
			if fallbacks != 3 {
				t.Errorf("%d fallback events, want 3: two when the keys were taken, one when %q was not kept", fallbacks, "lost")
			}
			down(false)
			fast.lose()
			if rec, err := run(t, eng, "kept", &runs); err != nil || rec == nil || runs.Load() != 2 {
				t.Fatalf("kept, after the fast tier lost its data: %v, %v, %d runs; want the replay, 2 runs", rec, err, runs.Load())
			}
			l, rec, err := eng.Acquire(&core.Call{Key: "lost"})
			if l == nil || rec != nil || err != nil {
				t.Fatalf("lost: %v, %v, %v; want a lease (the record is gone with the fast tier's data)", l, rec, err)
			}
			l.Release(0, nil)
		})
	}
}

// durableOf returns a durable tier for mode, "lease" (a plain store) or
// "transactional" (a TxStore), and the function that takes it down or
// back.
func durableOf(t *testing.T, mode string) (core.Store, func(down bool)) {
	if mode == "lease" {
		d := newTier()
		return d, func(down bool) { d.set(down, false) }
	}
	d := &downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}
	return d, d.down.Store
}

// A fallback lease whose lock was lost (unlocked, then taken by another
// call) is reported as lost when it completes, not as stored.
func TestTieredTxFallbackLockLost(t *testing.T) {
	bareAndInstrumented(t, testTieredTxFallbackLockLost)
}

func testTieredTxFallbackLockLost(t *testing.T, wrapped bool) {
	fast := newTier()
	st := core.NewTiered(fast, failingTx{core.NewMemoryStore(0)})
	if wrapped {
		st = instrument.Store(st, nopObserve)
	}
	var ev events
	eng, err := core.New(core.Config{Store: st, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil || !l.Protected() {
		t.Fatalf("first: %v, %v", l, err)
	}
	if err := fast.Unlock(context.Background(), core.ID("", "k", "")); err != nil {
		t.Fatal(err)
	}
	l2, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l2 == nil {
		t.Fatalf("second, after the unlock: %v, %v", l2, err)
	}
	l.Complete(&core.Record{Code: 201}) //nolint:errcheck // nil outside a transaction
	if ev.count(core.OutcomeLockLost) != 1 || ev.count(core.OutcomeStored) != 0 {
		t.Fatalf("events %v: want one lock lost, none stored", ev.all)
	}
	l2.Release(0, nil)
}

// lostReply is a tier whose Acquire takes the lock, then fails as if its
// answer had been lost on the way, while lost is set.
type lostReply struct {
	*tier
	lost atomic.Bool
}

func (d *lostReply) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	rec, token, err := d.tier.Acquire(ctx, key, ttl)
	if d.lost.Load() {
		return nil, "", context.DeadlineExceeded
	}
	return rec, token, err
}

// A durable tier that took the lock but whose answer was lost holds the
// key against the record's second chance: that is a fallback event too,
// the record left in the fast tier alone.
func TestTieredFallbackDurableLockOrphaned(t *testing.T) {
	fast, durable := newTier(), &lostReply{tier: newTier()}
	var ev events
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	durable.lost.Store(true)
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil || !l.Protected() {
		t.Fatalf("first: %v, %v", l, err)
	}
	durable.lost.Store(false)
	if err := l.Complete(&core.Record{Code: 201}); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for _, e := range ev.all {
		if e.Outcome == core.OutcomeFallback {
			errs = append(errs, e.Err)
		}
	}
	if len(errs) != 2 || !errors.Is(errs[0], context.DeadlineExceeded) || !errors.Is(errs[1], core.ErrInFlight) {
		t.Fatalf("fallback events with %v; want the acquire's lost answer, then the orphaned lock", errs)
	}
	if ev.count(core.OutcomeStored) != 1 {
		t.Fatalf("events %v: want the record stored (in the fast tier)", ev.all)
	}
}

// The fast tier alone held the key and fails to take the record, the
// durable tier answers: the record is there, and a duplicate meeting the
// fast tier's lock replays it instead of running the work again.
func TestTieredFallbackFastFailsAtCompletion(t *testing.T) {
	fast, durable := newTier(), newTier()
	var ev events
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	durable.set(true, false)
	var runs atomic.Int32
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil {
		t.Fatalf("first: %v, %v", l, err)
	}
	runs.Add(1)
	durable.set(false, false)
	fast.set(true, false)
	if err := l.Complete(&core.Record{Code: 200, Body: []byte("done")}); err != nil {
		t.Fatal(err)
	}
	if ev.count(core.OutcomeStored) != 1 {
		t.Fatalf("events %v: want the record stored (in the durable tier)", ev.all)
	}
	fast.set(false, false) // its lock of the key is still there
	if rec, err := run(t, eng, "k", &runs); err != nil || rec == nil || string(rec.Body) != "done" || runs.Load() != 1 {
		t.Fatalf("duplicate: %v, %v, %d runs; want the durable tier's record, 1 run", rec, err, runs.Load())
	}
}

// The record written to the durable tier after the fact does not count
// against the scope's quota there a second time: the key was admitted when
// it was taken.
func TestTieredFallbackRecordOutsideQuota(t *testing.T) {
	fast, durable := newTier(), newTier()
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Quota: core.Quota{PerWindow: 1}})
	if err != nil {
		t.Fatal(err)
	}
	durable.set(true, false)
	l, _, err := eng.Acquire(&core.Call{Key: "a", Scope: "u"})
	if err != nil || l == nil {
		t.Fatalf("a: %v, %v", l, err)
	}
	durable.set(false, false)
	if err := l.Complete(&core.Record{Code: 201}); err != nil {
		t.Fatal(err)
	}
	fast.lose() // and its count of u's keys
	l, _, err = eng.Acquire(&core.Call{Key: "b", Scope: "u"})
	if err != nil || l == nil {
		t.Fatalf("b, the first key the durable tier admits for u: %v, %v; want a lease", l, err)
	}
	l.Release(0, nil)
}

// A busy durable TxStore is treated as a failing one (a PostgreSQL restart
// looks busy to the requests queued for it): the fast tier's lock holds
// the key and the call runs once, without the transaction; with the fast
// tier down too, it is refused whatever FailClosed says.
func TestTieredTxDurableBusy(t *testing.T) {
	fast := newTier()
	durable := &downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}
	durable.busy.Store(true)
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	// The fast tier's lock holds the key: the call runs, protected, once.
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil || !l.Protected() {
		t.Fatalf("durable tier busy: %v, %v; want a lease held by the fast tier's lock", l != nil, err)
	}
	if _, err := run(t, eng, "k", &runs); !errors.Is(err, core.ErrInFlight) || runs.Load() != 0 {
		t.Fatalf("a duplicate meanwhile: %v, %d runs; want ErrInFlight", err, runs.Load())
	}
	if err := l.Complete(&core.Record{Code: 201}); err != nil {
		t.Fatal(err)
	}
	// With the fast tier down too, a busy durable tier refuses the call.
	fast.set(true, false)
	if _, err := run(t, eng, "other", &runs); !errors.Is(err, core.ErrStoreUnavailable) || !errors.Is(err, core.ErrStoreBusy) || runs.Load() != 0 {
		t.Fatalf("both tiers unavailable, the durable one busy: %v, %d runs; want ErrStoreUnavailable wrapping ErrStoreBusy, no run", err, runs.Load())
	}
	fast.set(false, false)
	durable.busy.Store(false)
	if _, err := run(t, eng, "other", &runs); err != nil || runs.Load() != 1 {
		t.Fatalf("with room again: %v, %d runs; want a first run", err, runs.Load())
	}
}

func TestNewRefusesNilTier(t *testing.T) {
	for _, s := range []core.Store{core.NewTiered(nil, core.NewMemoryStore(0)), core.NewTiered(core.NewMemoryStore(0), nil)} {
		if _, err := core.New(core.Config{Store: s}); err == nil || !strings.Contains(err.Error(), "nil") {
			t.Errorf("New = %v, want an error for the nil tier", err)
		}
	}
}

// A key taken while the durable tier was down (the fast tier's lock alone)
// takes the durable tier's lock at its first refresh once that tier
// answers again: the fast tier losing its data while the work still runs
// then lets no duplicate run, in both modes. The lock is refreshed every
// few seconds, so a durable tier down past the first refresh is caught up
// with at the next.
func TestTieredFallbackTakesDurableLock(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		downFor time.Duration // after the key is taken
		lossAt  time.Duration
	}{
		{"lease", 0, 5 * time.Second},
		{"lease", 5 * time.Second, 9 * time.Second},
		{"transactional", 0, 5 * time.Second},
		{"transactional", 5 * time.Second, 9 * time.Second},
	} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%s/down %v", mode, tc.downFor), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast := newTier()
				durable, down := durableOf(t, mode)
				eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: func(core.Event) {}})
				if err != nil {
					t.Fatal(err)
				}
				down(true)
				l, _, err := eng.Acquire(&core.Call{Key: "k"})
				if err != nil || l == nil || !l.Protected() {
					t.Fatalf("with the durable tier down: %v, %v; want a protected lease", l, err)
				}
				advance(tc.downFor)
				down(false)
				advance(tc.lossAt - tc.downFor) // past a refresh since; the work still runs
				fast.lose()
				if l2, _, err := eng.Acquire(&core.Call{Key: "k"}); l2 != nil || !errors.Is(err, core.ErrInFlight) {
					t.Errorf("duplicate after the fast tier lost its data: a lease %v, %v; want ErrInFlight", l2 != nil, err)
					if l2 != nil {
						l2.Release(0, nil)
					}
				}
				if err := l.Complete(&core.Record{Code: 201, Body: []byte("done")}); err != nil {
					t.Fatalf("Complete: %v", err)
				}
				fast.lose()
				if _, rec, err := eng.Acquire(&core.Call{Key: "k"}); err != nil || rec == nil || string(rec.Body) != "done" {
					t.Fatalf("after Complete, the fast tier's data lost: %v, %v; want the durable tier's record", rec, err)
				}
			})
		})
	}
}

// gateTier holds the answer of its first Acquire after arm (the lock
// taken) until release is closed.
type gateTier struct {
	*tier
	armed            atomic.Bool
	entered, release chan struct{}
}

func (g *gateTier) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	rec, tok, err := g.tier.Acquire(ctx, key, ttl)
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return rec, tok, err
}

// fallbackLease takes key "k" through a tiered Engine while durable is
// down (a fallback lock, on the fast tier alone), then brings durable back.
func fallbackLease(t *testing.T, fast core.Store, durable interface {
	core.Store
	set(down, stall bool)
}) (*core.Engine, *core.Lease) {
	t.Helper()
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	durable.set(true, false)
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil || !l.Protected() {
		t.Fatalf("with the durable tier down: %v, %v; want a protected lease", l != nil, err)
	}
	durable.set(false, false)
	return eng, l
}

// A refresh taking the durable tier's lock for a fallback lock while the
// lease completes: Complete waits for it and stores the record in both
// tiers, so that the fast tier losing its data then replays it (Complete
// used to meet that lock in keepDurable, leave the record in the fast tier
// alone, and the refresh released the durable lock).
func TestTieredFallbackDurableLockRacesComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := newTier()
		durable := &gateTier{tier: newTier(), entered: make(chan struct{}), release: make(chan struct{})}
		eng, l := fallbackLease(t, fast, durable)
		durable.armed.Store(true)
		<-durable.entered // the first refresh is taking the durable tier's lock
		done := make(chan error)
		go func() { done <- l.Complete(&core.Record{Code: 201, Body: []byte("charged")}) }()
		synctest.Wait()
		close(durable.release)
		if err := <-done; err != nil {
			t.Fatalf("Complete: %v", err)
		}
		st, err := durable.s.Inspect(context.Background(), core.ID("", "k", ""))
		if err != nil || st.Record == nil {
			t.Fatalf("the durable tier after Complete: %+v, %v; want the record", st, err)
		}
		fast.lose()
		if l2, rec, err := eng.Acquire(&core.Call{Key: "k"}); l2 != nil || rec == nil || string(rec.Body) != "charged" {
			t.Errorf("after the fast tier lost its data: a lease %v, %v, %v; want the replay", l2 != nil, rec, err)
		}
	})
}

// lostTx's Commit rolls back and answers ErrLockLost, as a TxStore whose
// key was lost may.
type lostTx struct{ core.Tx }

func (x lostTx) Commit(ctx context.Context, _ []byte, _ time.Duration, _ bool) error {
	x.Tx.Rollback(ctx) //nolint:errcheck // the test's answer is the point
	return fmt.Errorf("rolled back: %w", core.ErrLockLost)
}

type lostTxStore struct{ core.TxStore }

func (s lostTxStore) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, tx, err := s.TxStore.Begin(ctx, key, idle)
	if tx != nil {
		tx = lostTx{tx}
	}
	return rec, tx, err
}

// A durable transaction whose Commit fails with ErrLockLost committed
// nothing: Complete answers ErrStoreUnavailable (the result must not be
// delivered), behind the tiered store as alone (the fast lock's token
// made the Engine take it for that lock's loss, whose work stands).
func TestTieredTxCommitLockLost(t *testing.T) {
	for _, tiered := range []bool{false, true} {
		t.Run(fmt.Sprint("tiered=", tiered), func(t *testing.T) {
			var st core.Store = lostTxStore{idemtest.NewTxStore(t).(core.TxStore)}
			if tiered {
				st = core.NewTiered(core.NewMemoryStore(0), st)
			}
			eng, err := core.New(core.Config{Store: st, Observer: func(core.Event) {}})
			if err != nil {
				t.Fatal(err)
			}
			l, _, err := eng.Acquire(&core.Call{Key: "k"})
			if err != nil || !l.Buffered() {
				t.Fatalf("Acquire: %v, %v; want a lease in a transaction", l != nil, err)
			}
			if err := l.Complete(&core.Record{Code: 201}); !errors.Is(err, core.ErrStoreUnavailable) {
				t.Errorf("Complete = %v; want ErrStoreUnavailable (the commit did not happen)", err)
			}
		})
	}
}

// panicTier's Acquire panics once armed.
type panicTier struct {
	*tier
	armed, hit atomic.Bool
}

func (p *panicTier) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	if p.armed.Load() {
		p.hit.Store(true)
		panic("durable tier bug")
	}
	return p.tier.Acquire(ctx, key, ttl)
}

// A durable tier that panics while a refresh takes its lock for a
// fallback lock (the Engine recovers a panic of Store.Refresh) leaves the
// lease able to complete: Complete does not wait for that refresh for
// ever.
func TestTieredFallbackDurableLockPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		durable := &panicTier{tier: newTier()}
		_, l := fallbackLease(t, newTier(), durable)
		durable.armed.Store(true)
		advance(4 * time.Second) // the first refresh panics in the durable tier
		if !durable.hit.Load() {
			t.Fatal("no refresh reached the durable tier")
		}
		durable.armed.Store(false)
		done := make(chan error, 1)
		go func() { done <- l.Complete(&core.Record{Code: 201}) }()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
		default:
			t.Fatal("Complete blocked after a refresh panicked in the durable tier")
		}
	})
}

// A record that missed the fast tier while it was down, and the fast tier
// back without its data (a restart without persistence): the marker went
// with the data, so there is none to drop. The marker is written again at
// the next call, as after any loss, and the calls after it make no more
// round trips than before; a record TTL after the loss, the fast tier
// holds keys alone again under FailClosed.
func TestTieredMissedThenLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), FailClosed: true, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		marked(t, eng)
		fast.set(true, false)
		run(t, eng, "k", &runs) //nolint:errcheck // stored in the durable tier alone
		fast.lose()
		fast.set(false, false)
		run(t, eng, "after", &runs) //nolint:errcheck
		if _, err := fast.Inspect(context.Background(), "idem-tiered-kept"); err != nil {
			t.Fatalf("the marker after the fast tier came back: %v; want it written again", err)
		}
		fast.calls.Store(0)
		run(t, eng, "next", &runs) //nolint:errcheck
		if n := fast.calls.Load(); n != 2 {
			t.Errorf("a request after: %d fast calls, want 2", n)
		}
		advance(eng.Config().ResponseTTL)
		run(t, eng, "a TTL later", &runs) //nolint:errcheck
		durable.set(true, false)
		if _, err := run(t, eng, "new", &runs); err != nil {
			t.Fatalf("a new key a TTL after the loss, the durable tier down: %v; want the fast tier's lock", err)
		}
	})
}

// failingRunTier is a fast tier whose RunID fails (redislock's under an ACL
// without INFO, which is in @dangerous: NOPERM).
type failingRunTier struct{ *tier }

var errNoPerm = errors.New("NOPERM: INFO")

func (t *failingRunTier) RunID(context.Context, string) (string, error) { return "", errNoPerm }

// A fast tier that cannot name its server leaves no marker, and every
// refusal under FailClosed says why: the marker's lock taken to write it
// does not stay behind to make the next read take the marker for one
// another process is writing, 0s old.
func TestTieredRunIDFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := &failingRunTier{newTier()}, newTier()
		eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), FailClosed: true, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		run(t, eng, "first", &runs) //nolint:errcheck
		if st, err := fast.Inspect(context.Background(), "idem-tiered-kept"); err == nil {
			t.Fatalf("the marker after RunID failed: %+v; want neither record nor lock", st)
		}
		durable.set(true, false)
		for i := range 2 {
			_, err := run(t, eng, fmt.Sprint("new", i), &runs)
			if !errors.Is(err, core.ErrStoreUnavailable) || !strings.Contains(err.Error(), errNoPerm.Error()) {
				t.Fatalf("a new key #%d, the durable tier down: %v; want a refusal that says RunID's error", i, err)
			}
		}
	})
}

// After a record missed the fast tier, the process drops the marker at the
// fast tier's first answer, whichever it is: here a conflict, then a
// completion.
func TestTieredMissDroppedAtFirstAnswer(t *testing.T) {
	for _, answer := range []string{"conflict", "completion"} {
		t.Run(answer, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast, durable := newTier(), newTier()
				eng := failClosedTiered(t, fast, durable)
				marked(t, eng)
				held, _, err := eng.Acquire(&core.Call{Key: "held"})
				if held == nil {
					t.Fatal(err)
				}
				var runs atomic.Int32
				fast.set(true, false)
				run(t, eng, "k", &runs) //nolint:errcheck // in the durable tier alone
				fast.set(false, false)
				advance(time.Second)
				missedAt := time.Now()
				if answer == "conflict" {
					if _, _, err := eng.Acquire(&core.Call{Key: "held"}); !errors.Is(err, core.ErrInFlight) {
						t.Fatalf("a duplicate: %v, want ErrInFlight", err)
					}
				} else {
					held.Complete(&core.Record{Code: 200})
				}
				st, err := fast.s.Inspect(context.Background(), "idem-tiered-kept")
				if err != nil {
					t.Fatalf("the marker: %v", err)
				}
				r, err := core.DecodeRecord(st.Record)
				if err != nil {
					t.Fatalf("the marker: %v", err)
				}
				if r.CompletedAt.Before(missedAt) {
					t.Fatalf("the marker after the %s: written at %v, before the miss at %v; want it dropped and written anew", answer, r.CompletedAt, missedAt)
				}
				held.Release(0, nil)
			})
		})
	}
}

// Under FailClosed, the marker older than the TTL, a durable tier that
// stalls (rather than refuses) at an acquire leaves the fast tier the time
// to read the marker: its lock alone holds the key, as when the durable
// tier is down, and is not left behind by a refusal.
func TestTieredStandInDurableStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		eng := failClosedTiered(t, fast, durable)
		marked(t, eng)
		durable.set(false, true)
		l, _, err := eng.Acquire(&core.Call{Key: "new"})
		if l == nil || !l.Protected() {
			t.Fatalf("a new key, the durable tier stalled, the marker older than the TTL: %v; want the fast tier's lock", err)
		}
		l.Release(0, nil)
	})
}

// A record that misses the fast tier at its completion alone (the key
// locked in both tiers, or in the fast one alone, then one timeout of the
// fast tier at the completion) drops the marker at the fast tier's next
// answer: the durable tier down, the completed key is refused, not run
// again on the fast tier's lock.
func TestTieredMissAtCompletion(t *testing.T) {
	for _, mode := range []string{"both", "fast alone", "tx"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast := newTier()
				durable, store := switchableDurable(t, fast, mode == "tx")
				eng, err := core.New(core.Config{Store: store, FailClosed: true, Observer: func(core.Event) {}})
				if err != nil {
					t.Fatal(err)
				}
				marked(t, eng)
				durable.set(mode == "fast alone", false)
				l, _, err := eng.Acquire(&core.Call{Key: "k"})
				if l == nil || !l.Protected() {
					t.Fatalf("k: %v", err)
				}
				durable.set(false, false)
				fast.set(true, false)
				l.Complete(&core.Record{Code: 201})
				fast.set(false, false)
				var runs atomic.Int32
				run(t, eng, "other", &runs)   //nolint:errcheck // the fast tier answers: the marker is dropped
				advance(eng.Config().LockTTL) // k's fast lock, left by the failed completion, expires
				durable.set(true, false)
				l, _, err = eng.Acquire(&core.Call{Key: "k"})
				if l != nil || !errors.Is(err, core.ErrStoreUnavailable) {
					t.Fatalf("the completed key, its record missed by the fast tier, the durable tier down: lease %v, %v; want ErrStoreUnavailable", l != nil, err)
				}
			})
		})
	}
}

// A record missed the fast tier and the process could not drop the marker
// (here the fast tier is no Admin): under FailClosed the fast tier does not
// hold a key alone, however old the marker.
func TestTieredMissNotDroppedRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		eng := failClosedTiered(t, plainStore{fast}, durable)
		marked(t, eng)
		var runs atomic.Int32
		fast.set(true, false)
		run(t, eng, "k", &runs) //nolint:errcheck // in the durable tier alone
		fast.set(false, false)
		run(t, eng, "other", &runs) //nolint:errcheck // the fast tier answers; the marker cannot be dropped
		durable.set(true, false)
		l, _, err := eng.Acquire(&core.Call{Key: "k"})
		if l != nil || !errors.Is(err, core.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not dropped") {
			t.Fatalf("the completed key again, the durable tier down: lease %v, %v; want ErrStoreUnavailable, the marker not dropped", l != nil, err)
		}
	})
}

// slowPurge is a tier whose first Purge waits for release, and whose
// other Purges fail meanwhile.
type slowPurge struct {
	*tier
	purged  atomic.Bool
	waiting chan struct{} // closed when the first Purge waits
	release chan struct{}
}

func (t *slowPurge) Purge(ctx context.Context, key string) error {
	if !t.purged.Swap(true) {
		close(t.waiting)
		<-t.release
	} else {
		select {
		case <-t.release:
		default:
			return errTierDown
		}
	}
	return t.tier.Purge(ctx, key)
}

// While one call of the process drops the marker after a miss, another
// call does not take the old marker for good: the miss is known until the
// marker is gone (here the other call's own drop fails, so that standIn
// alone refuses).
func TestTieredMissKnownWhileDropping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := &slowPurge{tier: newTier(), waiting: make(chan struct{}), release: make(chan struct{})}
		durable := newTier()
		eng := failClosedTiered(t, fast, durable)
		marked(t, eng)
		var runs atomic.Int32
		fast.set(true, false)
		run(t, eng, "k", &runs) //nolint:errcheck // in the durable tier alone
		fast.set(false, false)
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(t, eng, "other", &runs) //nolint:errcheck // its drop of the marker waits
		}()
		<-fast.waiting
		durable.set(true, false)
		l, _, err := eng.Acquire(&core.Call{Key: "k"})
		if l != nil || !errors.Is(err, core.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not dropped") {
			t.Errorf("the completed key while another call drops the marker, the durable tier down: lease %v, %v; "+
				"want ErrStoreUnavailable, the marker not dropped", l != nil, err)
		}
		if l != nil {
			l.Release(0, nil)
		}
		close(fast.release)
		durable.set(false, false)
		<-done
	})
}

// latePurge is a tier whose first Purge is done, and its answer waits for
// release.
type latePurge struct {
	*tier
	purged  atomic.Bool
	waiting chan struct{}
	release chan struct{}
}

func (t *latePurge) Purge(ctx context.Context, key string) error {
	err := t.tier.Purge(ctx, key)
	if !t.purged.Swap(true) {
		close(t.waiting)
		<-t.release
	}
	return err
}

// A miss while another call's drop of the marker is on its way stays
// known: the drop, done before a marker written since, does not cover it.
func TestTieredMissDuringLateDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := &latePurge{tier: newTier(), waiting: make(chan struct{}), release: make(chan struct{})}
		durable := newTier()
		eng := failClosedTiered(t, fast, durable)
		marked(t, eng)
		ttl := eng.Config().ResponseTTL
		var runs atomic.Int32
		fast.set(true, false)
		run(t, eng, "k1", &runs) //nolint:errcheck // miss 1
		fast.set(false, false)
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(t, eng, "a", &runs) //nolint:errcheck // drops the marker; its answer is late
		}()
		<-fast.waiting
		run(t, eng, "b", &runs) //nolint:errcheck // drops (gone), clears missed, writes marker W
		advance(ttl / 2)
		fast.set(true, false)
		run(t, eng, "k2", &runs) //nolint:errcheck // miss 2, after W
		fast.set(false, false)
		close(fast.release) // a's late answer clears missed: miss 2 forgotten
		<-done
		advance(ttl/2 + ttl/10) // W older than the TTL; k2's record not expired
		durable.set(true, false)
		l, _, err := eng.Acquire(&core.Call{Key: "k2"})
		if l != nil || !errors.Is(err, core.ErrStoreUnavailable) {
			t.Errorf("k2, completed after the marker, missed by the fast tier, durable down: lease %v, %v; want ErrStoreUnavailable", l != nil, err)
		}
		if l != nil {
			l.Release(0, nil)
		}
		durable.set(false, false)
	})
}

// TestTieredInFlightOneTierDown: with one tier down, InFlight lists the
// other's locks, so that idemctl inflight, the admin handler and
// idemprom's stuck-keys gauge still see the keys in flight during an
// outage; only both tiers down is an error.
func TestTieredInFlightOneTierDown(t *testing.T) {
	ctx := context.Background()
	for _, down := range []string{"fast", "durable"} {
		fast, durable := newTier(), newTier()
		store := core.NewTiered(fast, durable)
		if _, tok, err := store.Acquire(ctx, "held", time.Minute); err != nil || tok == "" {
			t.Fatalf("acquire: token %q, %v", tok, err)
		}
		failing := fast
		if down == "durable" {
			failing = durable
		}
		failing.set(true, false)
		keys, err := store.(core.Admin).InFlight(ctx, 10)
		if err != nil || len(keys) != 1 || keys[0].Key != "held" {
			t.Errorf("%s tier down: InFlight = %v, %v; want the key held", down, keys, err)
		}
		fast.set(true, false)
		durable.set(true, false)
		if _, err := store.(core.Admin).InFlight(ctx, 10); err == nil {
			t.Errorf("both tiers down: InFlight without an error")
		}
	}
}

// TestTieredInFlightDurableTierStalls: a durable tier that does not answer
// (PostgreSQL behind a partition) rather than refuse does not take the
// fast tier's time: InFlight still lists the fast tier's locks within the
// caller's deadline, as the admin handler and the stuck-keys gauge set.
func TestTieredInFlightDurableTierStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		store := core.NewTiered(fast, durable)
		if _, tok, err := store.Acquire(context.Background(), "held", time.Minute); err != nil || tok == "" {
			t.Fatalf("acquire: token %q, %v", tok, err)
		}
		durable.set(false, true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the admin handler's
		defer cancel()
		keys, err := store.(core.Admin).InFlight(ctx, 10)
		if err != nil || len(keys) != 1 || keys[0].Key != "held" {
			t.Fatalf("durable tier stalled: InFlight = %v, %v; want the fast tier's lock", keys, err)
		}
	})
}

// TestTieredUnlockFastTierDown: an unlock that dropped the durable tier's
// lock and then met the fast tier down says that half of it happened, and
// is not mistaken for one that changed nothing.
func TestTieredUnlockFastTierDown(t *testing.T) {
	ctx := context.Background()
	fast, durable := newTier(), newTier()
	store := core.NewTiered(fast, durable)
	if _, tok, err := store.Acquire(ctx, "held", time.Minute); err != nil || tok == "" {
		t.Fatalf("acquire: token %q, %v", tok, err)
	}
	fast.set(true, false)
	err := store.(core.Admin).Unlock(ctx, "held")
	if !errors.Is(err, errTierDown) || !strings.Contains(err.Error(), "durable tier only") {
		t.Fatalf("Unlock with the fast tier down = %v; want the tier's error, saying the durable tier's lock went", err)
	}
	if keys, err := durable.s.InFlight(ctx, 10); err != nil || len(keys) != 0 {
		t.Fatalf("durable tier after the unlock: %v, %v; want no lock", keys, err)
	}
	fast.set(false, false)
	if err := store.(core.Admin).Unlock(ctx, "held"); err != nil && !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Unlock again with both tiers up = %v", err)
	}
	if _, tok, err := store.Acquire(ctx, "held", time.Minute); err != nil || tok == "" {
		t.Fatalf("acquire after the unlock: token %q, %v", tok, err)
	}
}
