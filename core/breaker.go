package core

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errCircuitOpen is the store error of a call that the Engine did not make
// because its circuit breaker is open: the store failed
// Config.BreakerFailures times in a row, and Config.BreakerCooldown has not
// passed since. The policy applies as to any store error.
var errCircuitOpen = errors.New("idem: store circuit open")

// breakerState is the state of the Engine's circuit breaker around its
// store; its String is Event.Breaker.
type breakerState int

// States of the circuit breaker.
const (
	breakerClosed   breakerState = iota // the store is called
	breakerOpen                         // the store is not called: errCircuitOpen
	breakerHalfOpen                     // one call probes the store; the others get errCircuitOpen
)

// String returns "closed", "open" or "half_open".
func (s breakerState) String() string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// breaker is a consecutive-failure circuit breaker with a single half-open
// probe and an injected clock (why not sony/gobreaker: docs/design.md).
type breaker struct {
	failures int           // consecutive failures that open it; 0 disables it
	cooldown time.Duration // open time before a probe
	probeFor time.Duration // how long a probe may take before another goes
	now      func() time.Time
	changed  func(breakerState) // called without the mutex

	mu     sync.Mutex
	state  breakerState
	count  int       // consecutive failures while closed
	opened time.Time // when it last opened
	probed time.Time // when the last probe went, while half-open
}

// allow reports whether a call may go to the store; a call allowed while
// half-open is the probe, and must report to done.
func (b *breaker) allow() bool {
	if b.failures <= 0 {
		return true
	}
	b.mu.Lock()
	switch b.state {
	case breakerClosed:
		b.mu.Unlock()
		return true
	case breakerOpen:
		if b.now().Sub(b.opened) < b.cooldown {
			b.mu.Unlock()
			return false
		}
		b.state, b.probed = breakerHalfOpen, b.now()
		b.mu.Unlock()
		b.changed(breakerHalfOpen)
		return true
	}
	// Half-open: its probe is on its way, unless it has taken longer than
	// a store call may (it panicked, or its store ignored the deadline).
	if b.now().Sub(b.probed) < b.probeFor {
		b.mu.Unlock()
		return false
	}
	b.probed = b.now()
	b.mu.Unlock()
	return true
}

// done reports the result of a store call: err is nil, a store failure, or
// an answer of a working store (ErrInFlight, ErrLockLost, ...). It returns
// the state the breaker changed to, if it changed, for the caller to report
// once what the call took is safe (changed reports allow's changes).
func (b *breaker) done(err error) (to breakerState, changed bool) {
	if b.failures <= 0 {
		return 0, false
	}
	failed := err != nil && storeFailure(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !failed && b.state == breakerClosed:
		b.count = 0
	case !failed: // half-open's probe, or a call made before it opened: the store answered
		b.state, b.count = breakerClosed, 0
		return breakerClosed, true
	case b.state == breakerHalfOpen, b.state == breakerClosed && b.count+1 >= b.failures:
		b.state, b.opened = breakerOpen, b.now()
		return breakerOpen, true
	case b.state == breakerClosed:
		b.count++
	}
	// Open: a failure of a call made before it opened changes nothing.
	return 0, false
}

// storeFailure reports whether err says the store is not working, as
// opposed to an answer about a key or a bad record.
func storeFailure(err error) bool {
	return !errors.Is(err, ErrInFlight) && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrStoreFull) && !errors.Is(err, ErrQuotaExceeded) &&
		!errors.Is(err, ErrStoreBusy) && !errors.Is(err, ErrCorruptRecord) && !errors.Is(err, errCircuitOpen) && !errors.Is(err, context.Canceled)
}
