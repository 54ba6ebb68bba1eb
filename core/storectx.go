package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// storeCtx is the context of one store call: the call's values, never
// cancelled by the request, and done at a deadline or when cancel is
// called. context.WithTimeout costs four allocations and a timer per call;
// storeCtx costs one, and makes its channel and timer only when a store
// asks for Done (or derives a context from it): the memory store never
// does, go-redis and pgx do.
type storeCtx struct {
	context.Context // the parent: its values; never done (a Lease's detachedCtx)

	deadline time.Time

	mu    sync.Mutex
	err   error         // nil until done
	done  chan struct{} // nil until Done is called
	timer *time.Timer   // closes done at the deadline
	after []*afterFunc  // registered by AfterFunc, run once done
}

// newStoreCtx returns a context of parent's values that is done after d.
// parent must never be done.
func newStoreCtx(parent context.Context, d time.Duration) *storeCtx {
	return new(storeCtx).start(parent, time.Now().Add(d))
}

// start makes c, unused so far, a context of parent's values that is done
// at deadline, and returns it: newStoreCtx in memory the caller holds.
func (c *storeCtx) start(parent context.Context, deadline time.Time) *storeCtx {
	*c = storeCtx{Context: parent, deadline: deadline}
	return c
}

func (c *storeCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel closed at the deadline or on cancel; the first
// call makes it and arms its timer.
func (c *storeCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		c.check()
		if c.err != nil {
			c.finish()
		} else {
			c.timer = time.AfterFunc(time.Until(c.deadline), c.expire)
		}
	}
	return c.done
}

// Err returns context.DeadlineExceeded once the deadline passed (even if
// nobody asked for Done), context.Canceled after cancel, else nil.
func (c *storeCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && c.check() {
		c.finish()
	}
	return c.err
}

// check sets err if the deadline passed, and reports whether it did.
func (c *storeCtx) check() bool {
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.err = context.DeadlineExceeded
		return true
	}
	return false
}

func (c *storeCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.DeadlineExceeded
	}
	c.finish()
}

// cancel ends the call: Err is context.Canceled unless the deadline came
// first. It is the CancelFunc of the call.
func (c *storeCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.Canceled
	}
	c.finish()
}

// finish, with err set and mu held, closes done, stops the timer and starts
// the AfterFunc functions, once.
func (c *storeCtx) finish() {
	if c.closed() {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.done == nil {
		return // Done will make it closed
	}
	close(c.done)
	for _, a := range c.after {
		if a.state.CompareAndSwap(afterWaiting, afterRun) {
			go a.f()
		}
	}
	c.after = nil
}

// closed reports whether done is closed. c.mu is held.
func (c *storeCtx) closed() bool {
	select {
	case <-c.done: // never ready while done is nil
		return true
	default:
		return false
	}
}

// afterFunc is a function registered with storeCtx.AfterFunc.
type afterFunc struct {
	f     func()
	state atomic.Int32
}

const (
	afterWaiting = iota
	afterRun
	afterStopped
)

// AfterFunc arranges to call f in its own goroutine once c is done, as
// context.AfterFunc does; the returned stop reports whether it stopped f
// from being run. context.AfterFunc and the contexts derived from c call
// it (it satisfies the context package's afterFuncer), so that neither
// starts a goroutine to watch c, as they would for a foreign context.
func (c *storeCtx) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	c.Done() // armed
	c.mu.Lock()
	if c.closed() {
		a.state.Store(afterRun)
		go f()
	} else {
		c.after = append(c.after, a)
	}
	c.mu.Unlock()
	return func() bool { return a.state.CompareAndSwap(afterWaiting, afterStopped) }
}

// detachedCtx is context.WithoutCancel without its allocations (one to
// make it, one per Value call, which boxes it): the values of the context
// of call (its Event's, which never changes), never done. A Lease holds
// one for its store calls, whose lease is call: a store that reports an
// event of its own (the tiered store's fallback) names the call's key,
// scope and route (callLease).
type detachedCtx struct {
	call *Lease
}

// callKey is the context key of the lease of a store call's call.
type callKey struct{}

// callLease returns the lease whose store call ctx is, or nil: its ev's
// Key, Scope, Route and Transport, its ttl and its Engine's Config, which
// never change, may be read.
func callLease(ctx context.Context) *Lease {
	l, _ := ctx.Value(callKey{}).(*Lease)
	return l
}

func (*detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedCtx) Done() <-chan struct{}       { return nil }
func (*detachedCtx) Err() error                  { return nil }

// Value returns the call's value of key, but none for cancelCtxKey: the
// call's cancellation is not this context's, as with WithoutCancel.
func (c *detachedCtx) Value(key any) any {
	switch key {
	case cancelCtxKey:
		return nil
	case callKey{}:
		return c.call
	}
	return c.call.ev.Context.Value(key)
}

// refreshCtx is the parent of the context of a lease's refresh: none of
// the call's values, only its lease (callLease).
type refreshCtx struct {
	context.Context // context.Background()
	call            *Lease
}

func (c *refreshCtx) Value(key any) any {
	if key == (callKey{}) {
		return c.call
	}
	return c.Context.Value(key)
}

// cancelCtxKey is the unexported key under which the context package (and
// context.Cause) looks up a context's nearest cancellation: the key that
// context.Cause asks a probe for.
var cancelCtxKey = func() any {
	p := &keyProbe{Context: context.Background()}
	context.Cause(p) //nolint:errcheck // only its question matters
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (*keyProbe) Err() error { return context.Canceled } // else Cause asks nothing

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}
