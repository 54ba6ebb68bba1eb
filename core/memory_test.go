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
