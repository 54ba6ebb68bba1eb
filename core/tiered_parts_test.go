package core_test

import (
	"context"
	"errors"
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
	return f
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
					a, _, err := f.eng.Acquire(&core.Call{Key: "k"})
					if err != nil || a == nil || !a.Protected() {
						t.Fatalf("first: %v, %v", a != nil, err)
					}
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
