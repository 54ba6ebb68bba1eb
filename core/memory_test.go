package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

func TestMemoryStoreConformance(t *testing.T) {
	idemtest.TestStore(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) })
}

func TestMemoryStoreBounded(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(2)
	for _, k := range []string{"a", "b"} {
		if _, _, err := s.Acquire(ctx, k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Acquire(ctx, "c", time.Minute); !errors.Is(err, core.ErrStoreFull) {
		t.Fatalf("Acquire on a full store: err = %v, want ErrStoreFull", err)
	}
}

func TestMemoryStoreSweepsExpired(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(1000)
	for range 1000 {
		if _, _, err := s.Acquire(ctx, idemtest.Key(t), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	// Every key expired: the next Acquire sweeps them, so the store is not
	// full and holds only the new key.
	if _, _, err := s.Acquire(ctx, "fresh", time.Minute); err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("Len after sweep = %d, want 1", n)
	}
}

// A late Complete (its lock expired, nobody took the key) on a full store
// reports the response lost, as a lock taken over does, not a full store:
// there is no lock left for a retry to wait on.
func TestMemoryStoreLateCompleteWhenFull(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(1)
	_, stale, err := s.Acquire(ctx, "a", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if _, _, err := s.Acquire(ctx, "b", time.Minute); err != nil { // sweeps a, fills the store
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "a", stale, []byte("late"), time.Minute); !errors.Is(err, core.ErrLockLost) {
		t.Fatalf("late Complete on a full store: err = %v, want ErrLockLost", err)
	}
}
