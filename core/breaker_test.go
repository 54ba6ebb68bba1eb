package core

import (
	"errors"
	"testing"
	"time"
)

func TestBreakerTransitions(t *testing.T) {
	now := time.Unix(0, 0)
	var states []breakerState
	b := &breaker{failures: 3, cooldown: time.Second, probeFor: time.Hour, now: func() time.Time { return now },
		changed: func(s breakerState) { states = append(states, s) }}
	down := errors.New("dial tcp: connection refused")
	done := func(err error) { // as the Engine reports done's changes
		if to, changed := b.done(err); changed {
			b.changed(to)
		}
	}
	step := func(want bool, err error) {
		t.Helper()
		if got := b.allow(); got != want {
			t.Fatalf("allow = %v, want %v (state %v)", got, want, b.state)
		}
		if want {
			done(err)
		}
	}
	// Answers of a working store never count; a success resets the count.
	step(true, down)
	step(true, down)
	step(true, ErrInFlight)
	step(true, ErrLockLost)
	step(true, down)
	step(true, nil)
	step(true, down)
	step(true, down)
	if len(states) != 0 {
		t.Fatalf("opened after failures that were not in a row: %v", states)
	}
	step(true, down) // the third in a row
	if b.state != breakerOpen || len(states) != 1 {
		t.Fatalf("state %v, changes %v; want open", b.state, states)
	}
	step(false, nil)
	now = now.Add(999 * time.Millisecond)
	step(false, nil)
	now = now.Add(time.Millisecond)
	// The cooldown is over: one probe, and nothing else while it is out.
	if !b.allow() || b.state != breakerHalfOpen {
		t.Fatalf("no probe after the cooldown: state %v", b.state)
	}
	step(false, nil)
	done(down) // the probe failed: open again, for a new cooldown
	if b.state != breakerOpen {
		t.Fatalf("state %v after a failed probe, want open", b.state)
	}
	now = now.Add(500 * time.Millisecond)
	step(false, nil)
	now = now.Add(500 * time.Millisecond)
	step(true, ErrInFlight) // the probe got an answer: the store works
	if b.state != breakerClosed {
		t.Fatalf("state %v after a probe answered, want closed", b.state)
	}
	want := []breakerState{breakerOpen, breakerHalfOpen, breakerOpen, breakerHalfOpen, breakerClosed}
	if len(states) != len(want) {
		t.Fatalf("changes %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("changes %v, want %v", states, want)
		}
	}
}

func TestBreakerDisabled(t *testing.T) {
	b := &breaker{failures: -1, now: time.Now, changed: func(breakerState) { t.Fatal("a disabled breaker changed") }}
	for range 100 {
		if !b.allow() {
			t.Fatal("a disabled breaker refused a call")
		}
		if _, changed := b.done(errors.New("down")); changed {
			t.Fatal("a disabled breaker changed")
		}
	}
}

// A probe that never reports (its store call panicked, or ignored its
// deadline) does not keep the breaker half-open for ever: after probeFor,
// another call probes.
func TestBreakerLostProbe(t *testing.T) {
	now := time.Unix(0, 0)
	b := &breaker{failures: 1, cooldown: time.Second, probeFor: 3 * time.Second,
		now: func() time.Time { return now }, changed: func(breakerState) {}}
	b.allow()
	b.done(errors.New("down")) // open
	now = now.Add(time.Second)
	if !b.allow() { // the probe, which is lost
		t.Fatal("no probe after the cooldown")
	}
	now = now.Add(2 * time.Second)
	if b.allow() {
		t.Fatal("a second probe while the first may still answer")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no new probe after probeFor: the breaker is stuck half-open")
	}
	b.done(nil)
	if b.state != breakerClosed {
		t.Fatalf("state %v after the new probe answered", b.state)
	}
}
