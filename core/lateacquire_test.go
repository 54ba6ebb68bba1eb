package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
)

// lateReply answers its first Acquire late, a store slower than the
// Engine's LockTTL: it takes the lock before the delay (the reply is slow)
// or, with queued, after it (the request waited in a queue).
type lateReply struct {
	*core.MemoryStore
	delay  time.Duration
	queued bool
	calls  atomic.Int32
}

func (s *lateReply) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	first := s.calls.Add(1) == 1
	if first && s.queued {
		advance(s.delay)
	}
	raw, token, err := s.MemoryStore.Acquire(ctx, key, ttl)
	if first && !s.queued {
		advance(s.delay)
	}
	return raw, token, err
}

// A lock whose reply came after it may have expired is not run on: another
// call may have taken the key meanwhile, and then both would run.
func TestAcquireReplyAfterLockExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &lateReply{MemoryStore: core.NewMemoryStore(0), delay: 150 * time.Millisecond}
		eng, err := core.New(core.Config{Store: store, LockTTL: 100 * time.Millisecond, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *core.Lease
			err error
		}
		first := make(chan result)
		go func() {
			l, _, err := eng.Acquire(&core.Call{Key: "k"})
			first <- result{l, err}
		}()
		advance(120 * time.Millisecond) // the first lock expired; its reply is not back yet
		second, _, err := eng.Acquire(&core.Call{Key: "k"})
		if err != nil || second == nil {
			t.Fatalf("second: %v, %v", second, err)
		}
		r := <-first
		if r.l != nil {
			r.l.Release(0, nil)
			second.Release(0, nil)
			t.Fatal("both calls hold the key: the work would run twice")
		}
		if !errors.Is(r.err, core.ErrInFlight) {
			t.Fatalf("first: %v, want ErrInFlight", r.err)
		}
		second.Release(0, nil)
	})
}

// A late reply whose lock expired meanwhile, which nobody took, is a
// conflict too; the retry finds the key free.
func TestAcquireReplyAfterLockExpiredAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &lateReply{MemoryStore: core.NewMemoryStore(0), delay: 80 * time.Millisecond}
		eng, err := core.New(core.Config{Store: store, LockTTL: 60 * time.Millisecond, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		if l, _, err := eng.Acquire(&core.Call{Key: "k"}); l != nil || !errors.Is(err, core.ErrInFlight) {
			t.Fatalf("expired before its reply: %v, want ErrInFlight", err)
		}
		l, _, err := eng.Acquire(&core.Call{Key: "k"})
		if err != nil || l == nil {
			t.Fatalf("retry: %v, %v", l, err)
		}
		l.Release(0, nil)
	})
}

// A late reply whose lock is still held (the store took it late) is run
// on, and keeps its lock while the work runs.
func TestAcquireReplyLateLockStillHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &lateReply{MemoryStore: core.NewMemoryStore(0), delay: 80 * time.Millisecond, queued: true}
		eng, err := core.New(core.Config{Store: store, LockTTL: 60 * time.Millisecond, Observer: func(core.Event) {}})
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := eng.Acquire(&core.Call{Key: "k"})
		if err != nil || l == nil {
			t.Fatalf("lock held at its reply: %v, %v", l, err)
		}
		advance(200 * time.Millisecond) // refreshed meanwhile
		if other, _, err := eng.Acquire(&core.Call{Key: "k"}); !errors.Is(err, core.ErrInFlight) {
			t.Fatalf("duplicate while the work runs: %v, %v; want ErrInFlight", other, err)
		}
		if err := l.Complete(&core.Record{}); err != nil {
			t.Fatal(err)
		}
	})
}
