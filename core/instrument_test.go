package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

func nopObserve(context.Context, instrument.Op, time.Duration, error, int) {}

// New finds a notifier behind an instrumented store: the tiered store's
// fallbacks reach the Observer.
func TestInstrumentedTieredReportsFallbacks(t *testing.T) {
	var ev events
	fast := newTier()
	fast.set(true, false)
	store := instrument.Store(core.NewTiered(fast, newTier()), nopObserve)
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
