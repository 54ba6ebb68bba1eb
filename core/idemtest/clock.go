package idemtest

import (
	"testing"
	"testing/synctest"
	"time"
)

// Option configures how TestStore, TestLease, TestAdmin and TestQuota let time pass
// for the store under test (its locks and records expiring).
type Option func(*options)

type options struct {
	fake    bool
	advance func(t *testing.T, d time.Duration)
}

// FakeTime runs every subtest in a testing/synctest bubble, where time is
// fake and passes at once: for a store whose clock is the process's
// (time.Now and timers), such as core.MemoryStore. Not for a store that
// talks to a server: a goroutine blocked on a socket stops a bubble's clock.
func FakeTime() Option {
	return func(o *options) { o.fake = true }
}

// Advance sets how the suite lets d pass for the store, when it needs a lock
// or a record to expire; the default waits d in real time, as a Redis or
// PostgreSQL server needs. With miniredis, its FastForward makes it instant.
func Advance(fn func(t *testing.T, d time.Duration)) Option {
	return func(o *options) { o.advance = fn }
}

func newOptions(opts []Option) *options {
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// run runs a subtest's body, in a bubble with FakeTime.
func (o *options) run(t *testing.T, fn func(t *testing.T)) {
	if o.fake {
		synctest.Test(t, fn)
		return
	}
	fn(t)
}

// pass lets d pass for the store: with Advance, as it says; else a timer,
// real, or fake inside a bubble (FakeTime).
func (o *options) pass(t *testing.T, d time.Duration) {
	t.Helper()
	if o.advance != nil {
		o.advance(t, d)
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
	}
}
