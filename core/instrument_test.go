package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

type opLog struct {
	mu   sync.Mutex
	ops  []string
	held int
}

func (l *opLog) observe(_ context.Context, op core.StoreOp, _ time.Duration, err error, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	name := op.String()
	if err != nil {
		name += "!"
	}
	l.ops = append(l.ops, name)
	l.held += held
}

func TestInstrumentStore(t *testing.T) {
	var log opLog
	s := core.InstrumentStore(core.NewMemoryStore(0), log.observe)
	if _, ok := s.(core.Waiter); !ok {
		t.Fatal("the memory store's Waiter was not passed through")
	}
	if _, ok := s.(core.Admin); !ok {
		t.Fatal("the memory store's Admin was not passed through")
	}
	ctx := context.Background()
	_, tok, _ := s.Acquire(ctx, "k", time.Minute)
	s.Acquire(ctx, "k", time.Minute)      //nolint:errcheck // in flight
	s.Refresh(ctx, "k", tok, time.Minute) //nolint:errcheck
	if log.held != 1 {
		t.Fatalf("held %d with one lock taken", log.held)
	}
	s.Complete(ctx, "k", tok, []byte("r"), time.Minute) //nolint:errcheck
	s.Release(ctx, "k", tok)                            //nolint:errcheck // a second end counts nothing
	want := []string{"acquire", "acquire!", "refresh", "complete", "release!"}
	if len(log.ops) != len(want) || log.held != 0 {
		t.Fatalf("ops %v, held %d; want %v, 0", log.ops, log.held, want)
	}
	for i := range want {
		if log.ops[i] != want[i] {
			t.Fatalf("ops %v, want %v", log.ops, want)
		}
	}
	idemtest.TestStore(t, func(*testing.T) core.Store { return core.InstrumentStore(core.NewMemoryStore(0), (&opLog{}).observe) })
	idemtest.TestAdmin(t, func(*testing.T) core.Store { return core.InstrumentStore(core.NewMemoryStore(0), (&opLog{}).observe) })
}

// New finds a Notifier behind an instrumented store: the tiered store's
// fallbacks reach the Observer.
func TestInstrumentedTieredReportsFallbacks(t *testing.T) {
	var ev events
	fast := newTier()
	fast.set(true, false)
	store := core.InstrumentStore(core.NewTiered(fast, newTier()), (&opLog{}).observe)
	eng, err := core.New(core.Config{Store: store, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := eng.Acquire(&core.Call{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if ev.count(core.OutcomeFallback) != 1 || !errors.Is(ev.all[0].Err, errTierDown) {
		t.Fatalf("events %v, want a fallback", ev.all)
	}
}
