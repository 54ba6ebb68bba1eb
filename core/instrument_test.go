package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	l, _, err := eng.Acquire(&core.Call{Key: "k", Scope: "s", Route: "/r", Transport: "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	// A lease left running is refreshed for the rest of the package's run,
	// every few milliseconds while its fast tier is down: its allocations
	// fail the allocation tests that happen to run after this one.
	t.Cleanup(func() { l.Release(0, nil) })
	if ev.count(core.OutcomeFallback) != 1 || !errors.Is(ev.all[0].Err, errTierDown) {
		t.Fatalf("events %v, want a fallback", ev.all)
	}
	// The fallback names the call it happened in, for the log.
	if e := ev.all[0]; e.Key != "k" || e.Scope != "s" || e.Route != "/r" || e.Transport != "grpc" || e.Method != "acquire" {
		t.Fatalf("the fallback's event %+v, want the call's key, scope, route and transport, and the store call", e)
	}
}

// A tiered store that finds a second record of a key (the key ran twice,
// a tier being out of reach each time) is logged as an error, not a
// warning as other fallbacks.
func TestSlogObserverDurableRecordIsError(t *testing.T) {
	var buf bytes.Buffer
	observe := core.SlogObserver(slog.New(slog.NewTextHandler(&buf, nil)))
	observe(core.Event{Outcome: core.OutcomeFallback, Method: "complete", Key: "k", Err: fmt.Errorf("idem: durable tier: %w", core.ErrDurableRecord)})
	observe(core.Event{Outcome: core.OutcomeFallback, Method: "acquire", Key: "k", Err: errTierDown})
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || strings.Count(out, "level=WARN") != 1 {
		t.Fatalf("log:\n%s\nwant the second record at ERROR, the other fallback at WARN", out)
	}
}
