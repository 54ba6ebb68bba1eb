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
	idemtest.TestLease(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) })
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

// A full store makes room for a new key by evicting the record that expires
// soonest, never a lock: new keys stay protected.
func TestMemoryStoreEvictsSoonestRecord(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(3)
	complete := func(key string, ttl time.Duration) {
		t.Helper()
		_, token, err := s.Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, token, []byte(key), ttl); err != nil {
			t.Fatal(err)
		}
	}
	complete("long", time.Hour)
	complete("short", time.Minute) // expires first: evicted first
	// A lock that expires before both records is still not evicted.
	if _, _, err := s.Acquire(ctx, "locked", time.Second); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"new-1", "new-2"} {
		if rec, token, err := s.Acquire(ctx, key, time.Minute); err != nil || rec != nil || token == "" {
			t.Fatalf("Acquire(%s) on a full store = %q, %q, %v; want a lock", key, rec, token, err)
		}
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3", n)
	}
	// Both records are gone, soonest first; the locks stayed.
	if _, _, err := s.Acquire(ctx, "locked", time.Second); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("the lock of a full store was evicted: Acquire = %v", err)
	}
	// A store of nothing but locks has no room.
	if _, _, err := s.Acquire(ctx, "new-3", time.Minute); !errors.Is(err, core.ErrStoreFull) {
		t.Fatalf("Acquire on a store full of locks: err = %v, want ErrStoreFull", err)
	}
}

// The record that expires soonest goes first, whatever the order in which
// the records were stored.
func TestMemoryStoreEvictionOrder(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(2)
	for _, kt := range []struct {
		key string
		ttl time.Duration
	}{{"a", time.Hour}, {"b", time.Minute}} {
		_, token, _ := s.Acquire(ctx, kt.key, time.Minute)
		if err := s.Complete(ctx, kt.key, token, []byte(kt.key), kt.ttl); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Acquire(ctx, "c", time.Minute); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := s.Acquire(ctx, "a", time.Minute); string(rec) != "a" || err != nil {
		t.Fatalf("the record expiring last was evicted: Acquire(a) = %q, %v", rec, err)
	}
	if rec, token, err := s.Acquire(ctx, "b", time.Minute); rec != nil || token == "" || err != nil {
		t.Fatalf("Acquire(b) = %q, %q, %v; want a new lock: b's record was evicted", rec, token, err)
	}
}

// A nil record is an empty record, not a lock: it replays, and it is
// evicted and swept as a record.
func TestMemoryStoreNilRecord(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(2)
	_, token, _ := s.Acquire(ctx, "nil", time.Minute)
	if err := s.Complete(ctx, "nil", token, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if rec, token, err := s.Acquire(ctx, "nil", time.Minute); rec == nil || token != "" || err != nil {
		t.Fatalf("Acquire after a nil record = %v, %q, %v; want an empty record", rec, token, err)
	}
	for _, key := range []string{"a", "b"} { // b evicts the nil record
		if _, _, err := s.Acquire(ctx, key, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := s.Len(); n != 0 {
		t.Fatalf("Len after the locks expired = %d, want 0", n)
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
