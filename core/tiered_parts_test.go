package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

// outTx is a TxStore out of reach while down: every call fails, its
// lease-mode Refresh included (downTx fails Acquire and Begin alone).
type outTx struct{ *downTx }

func (d outTx) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	if d.down.Load() {
		return errors.New("durable tier down")
	}
	return d.TxStore.Refresh(ctx, key, token, ttl)
}

// tierFaults is a tiered Engine whose tiers a test takes down and brings
// back: the lease mode over two tiers, or the transactional mode.
type tierFaults struct {
	eng         *core.Engine
	fast        *tier
	durableDown func(bool)
}

func newTierFaults(t *testing.T, tx bool) *tierFaults {
	f := &tierFaults{fast: newTier()}
	var durable core.Store
	if tx {
		d := outTx{&downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}}
		durable, f.durableDown = d, func(down bool) { d.down.Store(down) }
	} else {
		d := newTier()
		durable, f.durableDown = d, func(down bool) { d.set(down, false) }
	}
	eng, err := core.New(core.Config{Store: core.NewTiered(f.fast, durable), FailClosed: true, Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	f.eng = eng
	marked(t, eng)
	return f
}

// marked makes eng's tiered store write its marker in the fast tier, both
// tiers up, and lets the records' TTL pass: the fast tier has then held
// every record long enough to hold a key alone under FailClosed. Call it
// only inside synctest.Test.
func marked(t *testing.T, eng *core.Engine) {
	t.Helper()
	l, _, err := eng.Acquire(&core.Call{Key: "marker"})
	if l == nil {
		t.Fatalf("marker: %v", err)
	}
	l.Release(0, nil)
	advance(eng.Config().ResponseTTL)
}

// TestTieredLockPartLost: a lease whose lock lost its part in one tier,
// while the other part held the key, keeps the key and takes that part
// again, so that a later fault of the other tier lets no duplicate run the
// work while it still runs. Each fault alone is one the tiered store
// survives; the lease used to be taken for lost (the Engine stopped
// refreshing it) or to run on with one part.
func TestTieredLockPartLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults func(f *tierFaults) // from +0 s, when the key is taken, to +30 s
	}{
		// The fast tier is down when the key is taken, in the durable
		// tier alone (or its transaction); it is back a second later.
		{"fast part missing", func(f *tierFaults) {
			advance(time.Second)
			f.fast.set(false, false)
			advance(29 * time.Second)
		}},
		// A fallback lock (taken with the durable tier down) takes the
		// durable tier's lock at its first refresh; the durable tier is
		// then out of reach for longer than that lock's 10 s.
		{"durable part expired", func(f *tierFaults) {
			advance(time.Second)
			f.durableDown(false)
			advance(3 * time.Second)
			f.durableDown(true)
			advance(12 * time.Second)
			f.durableDown(false)
			advance(14 * time.Second)
		}},
		// The fast tier restarts empty.
		{"fast part lost", func(f *tierFaults) {
			advance(time.Second)
			f.fast.lose()
			advance(29 * time.Second)
		}},
		// The fast tier is down across the first refresh: its lock keeps
		// its initial lease of 10 s, and the refresh is tried again.
		{"fast part not refreshed", func(f *tierFaults) {
			advance(time.Second)
			f.fast.set(true, false)
			advance(4 * time.Second)
			f.fast.set(false, false)
			advance(25 * time.Second)
		}},
	} {
		for _, tx := range []bool{false, true} {
			name := tc.name + map[bool]string{false: "/lease", true: "/tx"}[tx]
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f := newTierFaults(t, tx)
					f.durableDown(tc.name == "durable part expired")
					f.fast.set(tc.name == "fast part missing", false)
					a := firstLease(t, f.eng)
					tc.faults(f)
					f.durableDown(true) // +30 s: the durable tier fails, the work still runs
					b, _, err := f.eng.Acquire(&core.Call{Key: "k"})
					if b != nil {
						t.Fatalf("a duplicate while the work runs, the durable tier down: a lease (protected %v); want ErrInFlight", b.Protected())
					}
					if !errors.Is(err, core.ErrInFlight) {
						t.Fatalf("a duplicate while the work runs, the durable tier down: %v; want ErrInFlight", err)
					}
					f.durableDown(false)
					if err := a.Complete(&core.Record{Code: 201, Body: []byte("A")}); err != nil {
						t.Fatalf("Complete: %v", err)
					}
					if _, rec, err := f.eng.Acquire(&core.Call{Key: "k"}); rec == nil || string(rec.Body) != "A" {
						t.Fatalf("after Complete: %v, %v; want the replay", rec, err)
					}
				})
			})
		}
	}
}

// gated is a tier whose Refresh, while gate is set, signals entered and
// waits for the gate to open before it runs.
type gated struct {
	*tier
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (g *gated) arm() (entered, gate chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.entered = make(chan struct{}), make(chan struct{})
	return g.entered, g.gate
}

func (g *gated) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	g.mu.Lock()
	gate, entered := g.gate, g.entered
	g.gate = nil
	g.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	return g.tier.Refresh(ctx, key, token, ttl)
}

// A refresh in flight finds the fast part lost while the lease ends: the
// lease's Complete or Release waits for it, and ends the fast lock it took
// again (it used to be orphaned, blocking the key for LockTTL, and the
// store kept the lease's locks for ever).
func TestTieredRefreshRacesEnd(t *testing.T) {
	for _, complete := range []bool{false, true} {
		t.Run(map[bool]string{false: "release", true: "complete"}[complete], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast := &gated{tier: newTier()}
				durable := newTier()
				store := core.NewTiered(fast, durable)
				eng, err := core.New(core.Config{Store: store, FailClosed: true, Observer: func(core.Event) {}})
				if err != nil {
					t.Fatal(err)
				}
				a := firstLease(t, eng)
				fast.tier.lose() // Redis restarts empty
				entered, gate := fast.arm()
				<-entered // the first refresh is under way, past the durable tier's refresh
				ended := make(chan error, 1)
				go func() {
					if complete {
						ended <- a.Complete(&core.Record{Code: 200, Body: []byte("A")})
					} else {
						a.Release(500, nil)
						ended <- nil
					}
				}()
				synctest.Wait() // the lease's end waits for the refresh
				close(gate)
				if err := <-ended; err != nil {
					t.Fatal(err)
				}
				b, rec, err := eng.Acquire(&core.Call{Key: "k"})
				switch {
				case complete && (rec == nil || string(rec.Body) != "A"):
					t.Errorf("retry after Complete: %v, %v; want the replay", rec, err)
				case !complete && errors.Is(err, core.ErrInFlight):
					t.Errorf("retry after Release: ErrInFlight (the key is blocked by an orphaned fast lock)")
				case !complete && b == nil:
					t.Errorf("retry after Release: %v", err)
				}
				if b != nil {
					b.Release(0, nil)
				}
				if n := core.TieredHeld(store); n != 0 {
					t.Errorf("the tiered store keeps the locks of %d leases after every lease ended; want 0", n)
				}
			})
		})
	}
}

// The fast tier loses its data and the durable tier stalls at the same
// refresh: the fast tier's part is taken again all the same, so that a
// duplicate meets it rather than fall back past the stalled durable tier
// and run.
func TestTieredFastLostDurableStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		eng := failClosedTiered(t, fast, durable)
		a := firstLease(t, eng)
		advance(time.Second)
		fast.lose()
		durable.set(false, true)  // stalls
		advance(10 * time.Second) // refreshes at 3.3 s and after, each finding the fast part lost
		wantNoDuplicate(t, eng, "a duplicate while the first runs")
		durable.set(false, false)
		a.Release(0, nil)
	})
}

// The durable tier loses its part (ErrLockLost) while the fast tier fails
// at the same refresh: the durable part is taken again and the lease goes
// on (Refresh returned ErrLockLost, and the lease stopped refreshing).
func TestTieredDurableLostFastDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		eng := failClosedTiered(t, fast, durable)
		a := firstLease(t, eng)
		advance(time.Second)
		durable.lose()
		fast.set(true, false)
		advance(4 * time.Second) // the first refresh, at 3.3 s
		wantNoDuplicate(t, eng, "a duplicate while the first runs")
		fast.set(false, false)
		a.Release(0, nil)
	})
}

// Redis down for the whole request; PostgreSQL, whose lock alone holds the
// key, is out of reach for 15 s (a failover): its lock, refreshed every few
// seconds to take Redis's back, is still extended by LockTTL, and outlives
// the blip.
func TestTieredDurableAloneKeepsLockTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		fast.set(true, false)
		eng := failClosedTiered(t, fast, durable)
		a := firstLease(t, eng)
		advance(5 * time.Second) // the first refresh, at 3.3 s
		durable.set(true, false)
		advance(15 * time.Second)
		durable.set(false, false)
		wantNoDuplicate(t, eng, "a duplicate after a 15 s PostgreSQL blip, Redis down, the first still running")
		a.Release(0, nil)
	})
}

// A refresh takes back a lost part; the take-back acquire runs but its
// answer is lost (a stall). The lock it took is taken for 10 s, as a new
// lock is, not LockTTL (5 min, as it was): 30 s after the lease's Release,
// a retry runs.
func TestTieredTakeBackAnswerLost(t *testing.T) {
	for _, which := range []string{"fast", "durable"} {
		t.Run(which, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast, durable := &lostReply{tier: newTier()}, &lostReply{tier: newTier()}
				eng := failClosedTiered(t, fast, durable)
				a := firstLease(t, eng)
				advance(time.Second)
				lt := fast
				if which == "durable" {
					lt = durable
				}
				lt.lose()
				lt.lost.Store(true)
				advance(3 * time.Second) // the first refresh (3.3 s) finds the part lost, takes it back late
				lt.lost.Store(false)
				advance(time.Second)
				a.Release(500, nil) // the work failed: a retry must run it again
				advance(30 * time.Second)
				b, _, err := eng.Acquire(&core.Call{Key: "k"})
				if b == nil {
					t.Errorf("retry 30 s after Release: %v; want a lease (an orphan of the take-back holds the key for LockTTL)", err)
				} else {
					b.Release(0, nil)
				}
			})
		})
	}
}

// Every path that ends a lease whose parts changed forgets them.
func TestTieredHeldForgotten(t *testing.T) {
	type path struct {
		name string
		tx   bool
		end  func(l *core.Lease) error
	}
	for _, p := range []path{
		{"lease/complete", false, func(l *core.Lease) error { return l.Complete(&core.Record{Code: 200}) }},
		{"lease/release", false, func(l *core.Lease) error { l.Release(0, nil); return nil }},
		{"tx/commit", true, func(l *core.Lease) error { return l.Complete(&core.Record{Code: 200}) }},
		{"tx/rollback", true, func(l *core.Lease) error { l.Release(0, nil); return nil }},
		{"tx/unstorable", true, func(l *core.Lease) error { l.Complete(&core.Record{Code: 1000}); return nil }},
	} {
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast := newTier()
				var durable core.Store = newTier()
				if p.tx {
					durable = idemtest.NewTxStore(t)
				}
				store := core.NewTiered(fast, durable)
				eng, err := core.New(core.Config{Store: store, FailClosed: true, Observer: func(core.Event) {}})
				if err != nil {
					t.Fatal(err)
				}
				fast.set(true, false)
				a := firstLease(t, eng)
				advance(time.Second)
				fast.set(false, false)
				advance(3 * time.Second) // takes the fast part
				if n := core.TieredHeld(store); n != 1 {
					t.Fatalf("the tiered store keeps the parts of %d leases while the lease runs, want 1 (the fast part taken)", n)
				}
				p.end(a) //nolint:errcheck // the parts are the point

				if n := core.TieredHeld(store); n != 0 {
					t.Errorf("the tiered store keeps the parts of %d leases after the lease ended, want 0", n)
				}
			})
		})
	}
}

// A fallback lease in the transactional mode (fastTxn): the refresh takes
// the durable part; Commit and Rollback forget it.
func TestTieredFastTxnHeldForgotten(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(map[bool]string{false: "rollback", true: "commit"}[commit], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast := newTier()
				d := outTx{&downTx{TxStore: idemtest.NewTxStore(t).(core.TxStore)}}
				store := core.NewTiered(fast, d)
				eng, err := core.New(core.Config{Store: store, FailClosed: true, Observer: func(core.Event) {}})
				if err != nil {
					t.Fatal(err)
				}
				marked(t, eng)
				f := &tierFaults{eng: eng, fast: fast, durableDown: func(b bool) { d.down.Store(b) }}
				f.durableDown(true)
				a := firstLease(t, f.eng)
				advance(time.Second)
				f.durableDown(false)
				advance(3 * time.Second)
				if commit {
					a.Complete(&core.Record{Code: 200}) //nolint:errcheck // the parts are the point
				} else {
					a.Release(0, nil)
				}
				if n := core.TieredHeld(store); n != 0 {
					t.Errorf("the tiered store keeps the parts of %d leases after the lease ended, want 0", n)
				}
			})
		})
	}
}

// An Observer that ends the lease on a fallback event of its refresh
// (Release waits for a refresh under way): Release returns once the
// refresh's deadline has passed, where it waited for ever.
func TestObserverEndsLeaseInRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		var a atomic.Pointer[core.Lease]
		released := make(chan struct{})
		eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), FailClosed: true, Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeFallback && ev.Method == "refresh" {
				if l := a.Load(); l != nil {
					a.Store(nil)
					l.Release(0, nil)
					close(released)
				}
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := eng.Acquire(&core.Call{Key: "k"})
		if err != nil || l == nil {
			t.Fatal(err)
		}
		a.Store(l)
		durable.set(true, false)
		advance(6 * time.Second)
		select {
		case <-released:
		default:
			t.Errorf("Release from the Observer inside a refresh did not return")
		}
		durable.set(false, false)
	})
}

// A lock taken while the fast tier was down keeps a fast part, refreshed
// in time, over a minute, for several configs.
func TestTieredFastPartKept(t *testing.T) {
	for _, cfg := range []core.Config{{}, {StoreTimeout: 5 * time.Second}, {LockTTL: 20 * time.Second}, {LockTTL: 4 * time.Second}} {
		t.Run(fmt.Sprint(cfg.StoreTimeout, cfg.LockTTL), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fast, durable := newTier(), newTier()
				cfg.Store, cfg.FailClosed, cfg.Observer = core.NewTiered(fast, durable), true, func(core.Event) {}
				eng, err := core.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				fast.set(true, false)
				a := firstLease(t, eng)
				advance(time.Second)
				fast.set(false, false)
				advance(5500 * time.Millisecond)
				for i := 0; i < 120; i++ {
					advance(500 * time.Millisecond)
					st, err := fast.s.Inspect(context.Background(), core.ID("", "k", ""))
					if err != nil || st.Record != nil {
						t.Fatalf("at +%v: the fast tier holds no lock: %v", time.Duration(i+14)*500*time.Millisecond, err)
					}
				}
				a.Release(0, nil)
			})
		})
	}
}

// failClosedTiered is a fail-closed Engine over NewTiered(fast, durable).
func failClosedTiered(t *testing.T, fast, durable core.Store) *core.Engine {
	t.Helper()
	eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), FailClosed: true, Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// wantNoDuplicate checks that a duplicate of key "k" gets ErrInFlight
// while the first call still runs.
func wantNoDuplicate(t *testing.T, eng *core.Engine, when string) {
	t.Helper()
	b, _, err := eng.Acquire(&core.Call{Key: "k"})
	switch {
	case b != nil:
		b.Release(0, nil)
		t.Errorf("%s: a duplicate got a lease (protected %v); want ErrInFlight", when, b.Protected())
	case !errors.Is(err, core.ErrInFlight):
		t.Errorf("%s: a duplicate: %v; want ErrInFlight", when, err)
	}
}

// firstLease takes key "k" through eng, protected, or fails the test.
func firstLease(t *testing.T, eng *core.Engine) *core.Lease {
	t.Helper()
	l, _, err := eng.Acquire(&core.Call{Key: "k"})
	if err != nil || l == nil || !l.Protected() {
		t.Fatalf("first: a lease %v, %v; want a protected one", l != nil, err)
	}
	return l
}

// A fallback in a lock's refresh names the lease's call, as one in its
// acquire does.
func TestTieredRefreshFallbackNamesCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast, durable := newTier(), newTier()
		var mu sync.Mutex
		var refreshes []core.Event
		eng, err := core.New(core.Config{Store: core.NewTiered(fast, durable), Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeFallback && ev.Method == "refresh" {
				mu.Lock()
				refreshes = append(refreshes, ev)
				mu.Unlock()
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := eng.Acquire(&core.Call{Key: "k", Scope: "s", Route: "/r", Transport: "grpc"})
		if err != nil || l == nil {
			t.Fatal(err)
		}
		durable.set(true, false)
		advance(6 * time.Second)
		durable.set(false, false)
		l.Release(0, nil)
		mu.Lock()
		defer mu.Unlock()
		if len(refreshes) == 0 {
			t.Fatal("no fallback in the refresh with the durable tier down")
		}
		for _, ev := range refreshes {
			if ev.Key != "k" || ev.Scope != "s" || ev.Route != "/r" || ev.Transport != "grpc" {
				t.Fatalf("a refresh's fallback %+v, want the call's key, scope, route and transport", ev)
			}
		}
	})
}
