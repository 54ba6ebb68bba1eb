package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

// storeCtx must behave as context.WithTimeout(context.WithoutCancel(parent))
// for everything a store does with it: go-redis selects on Done, pgx
// registers context.AfterFunc, pgstore derives a WithTimeout.
func TestStoreCtx(t *testing.T) {
	parent := context.WithoutCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	done := func(c context.Context) bool {
		select {
		case <-c.Done():
			return true
		default:
			return false
		}
	}
	t.Run("values and deadline", func(t *testing.T) {
		t.Parallel()
		before := time.Now()
		c := newStoreCtx(parent, time.Hour)
		defer c.cancel()
		if c.Value(ctxKey{}) != "v" {
			t.Error("the parent's value is lost")
		}
		if d, ok := c.Deadline(); !ok || d.Before(before.Add(time.Hour)) || d.After(time.Now().Add(time.Hour)) {
			t.Errorf("Deadline = %v, %v", d, ok)
		}
		if c.Err() != nil || done(c) {
			t.Error("done before its deadline")
		}
	})
	t.Run("expires without Done", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := newStoreCtx(parent, time.Millisecond)
			<-time.After(time.Millisecond - 1) // the bubble's clock
			if c.Err() != nil {
				t.Fatalf("Err %v before the deadline", c.Err())
			}
			<-time.After(1) // a clock, not a goroutine: no channel to wait on
			if !errors.Is(c.Err(), context.DeadlineExceeded) || !done(c) || context.Cause(c) != context.DeadlineExceeded {
				t.Errorf("Err %v, Done closed %v, Cause %v", c.Err(), done(c), context.Cause(c))
			}
		})
	})
	t.Run("expires with Done", func(t *testing.T) {
		t.Parallel()
		c := newStoreCtx(parent, 5*time.Millisecond)
		<-c.Done()
		if c.Err() != context.DeadlineExceeded {
			t.Errorf("Err = %v", c.Err())
		}
		c.cancel()
		if c.Err() != context.DeadlineExceeded {
			t.Errorf("Err after cancel = %v, want it unchanged", c.Err())
		}
	})
	t.Run("cancel before and after Done", func(t *testing.T) {
		t.Parallel()
		for _, early := range []bool{false, true} {
			c := newStoreCtx(parent, time.Hour)
			if early {
				c.Done()
			}
			c.cancel()
			c.cancel()
			if !done(c) || c.Err() != context.Canceled {
				t.Errorf("Done early %v: closed %v, Err %v", early, done(c), c.Err())
			}
		}
	})
	t.Run("derived contexts", func(t *testing.T) {
		t.Parallel()
		c := newStoreCtx(parent, time.Hour)
		child, cancelChild := context.WithTimeout(c, 2*time.Hour)
		defer cancelChild()
		if d, _ := child.Deadline(); d != c.deadline {
			t.Errorf("child deadline %v, want the parent's %v", d, c.deadline)
		}
		if child.Value(ctxKey{}) != "v" || child.Err() != nil {
			t.Fatal("child lost a value or is done")
		}
		c.cancel()
		<-child.Done()
		if child.Err() != context.Canceled {
			t.Errorf("child Err = %v", child.Err())
		}
	})
	t.Run("AfterFunc", func(t *testing.T) {
		t.Parallel()
		c := newStoreCtx(parent, time.Hour)
		var ran sync.WaitGroup
		ran.Add(1)
		context.AfterFunc(c, ran.Done)
		stopped := make(chan struct{})
		stop := context.AfterFunc(c, func() { close(stopped) })
		if !stop() || stop() {
			t.Error("stop before done: want true once, then false")
		}
		c.cancel()
		ran.Wait()
		select {
		case <-stopped:
			t.Error("a stopped function ran")
		default:
		}
		// Registered once done: runs at once.
		ran.Add(1)
		late := context.AfterFunc(c, ran.Done)
		ran.Wait()
		if late() {
			t.Error("stop after it ran reported true")
		}
	})
	t.Run("concurrent use", func(t *testing.T) {
		t.Parallel()
		c := newStoreCtx(parent, 2*time.Millisecond)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-c.Done()
				if c.Err() == nil {
					t.Error("Done closed with a nil Err")
				}
			}()
		}
		wg.Wait()
	})
}

// A store call on the memory store, which never asks for Done, costs the
// call's context one allocation.
func TestStoreCtxAllocs(t *testing.T) {
	parent := context.WithoutCancel(context.Background())
	n := testing.AllocsPerRun(100, func() {
		c := newStoreCtx(parent, time.Second)
		_ = c.Err()
		c.cancel()
	})
	if n > 1 {
		t.Errorf("%v allocations, want 1", n)
	}
}

// context.Cause of a store call's context is that context's own end, never
// the cause the request was (or was not) cancelled with.
func TestStoreCtxCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		req, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
		d := &detachedCtx{call: &Lease{ev: Event{Context: req}}}
		c := newStoreCtx(d, time.Second)
		defer c.cancel()
		<-c.Done() // the store call's deadline passes; the request lives
		if cause := context.Cause(c); !errors.Is(cause, context.DeadlineExceeded) {
			t.Fatalf("Cause of a store call past its deadline = %v", cause)
		}
		cancel(errors.New("client went away"))
		if cause := context.Cause(c); !errors.Is(cause, context.DeadlineExceeded) {
			t.Fatalf("Cause once the request is cancelled = %v", cause)
		}
		if context.Cause(d) != nil || d.Value(ctxKey{}) != "v" {
			t.Fatalf("detached: Cause %v, value %v", context.Cause(d), d.Value(ctxKey{}))
		}
	})
}

// contextStore records what the contexts of its Acquire and Refresh carry.
type contextStore struct {
	*MemoryStore
	mu                     sync.Mutex
	acquired, refreshed    any // ctxKey's value
	acquireLease, refLease *Lease
}

func (s *contextStore) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	s.mu.Lock()
	s.acquired, s.acquireLease = ctx.Value(ctxKey{}), callLease(ctx)
	s.mu.Unlock()
	return s.MemoryStore.Acquire(ctx, key, ttl)
}

func (s *contextStore) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	s.mu.Lock()
	s.refreshed, s.refLease = ctx.Value(ctxKey{}), callLease(ctx)
	s.mu.Unlock()
	return s.MemoryStore.Refresh(ctx, key, token, ttl)
}

// A store call's context carries the call's values and its lease; a
// refresh's carries its lease alone, none of the call's values: the call
// may outlast the request, whose context a framework reuses.
func TestStoreCallContextValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &contextStore{MemoryStore: NewMemoryStore(0)}
		eng, _ := New(Config{Store: s, LockTTL: 30 * time.Second})
		ctx := context.WithValue(context.Background(), ctxKey{}, "v")
		l, _, err := eng.Acquire(&Call{Context: ctx, Key: "k"})
		if err != nil || l == nil {
			t.Fatalf("Acquire: %v", err)
		}
		<-time.After(eng.initialLease) // past the first refresh
		l.Release(0, nil)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.acquired != "v" || s.acquireLease != l {
			t.Errorf("Acquire's context: value %v, lease %p, want v and %p", s.acquired, s.acquireLease, l)
		}
		if s.refreshed != nil || s.refLease != l {
			t.Errorf("Refresh's context: value %v, lease %p, want none and %p", s.refreshed, s.refLease, l)
		}
	})
}
