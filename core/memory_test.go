package core_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

func TestMemoryStoreConformance(t *testing.T) {
	idemtest.TestStore(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) }, idemtest.FakeTime())
	idemtest.TestLease(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) }, idemtest.FakeTime())
	idemtest.TestQuota(t, func(*testing.T) core.Store { return core.NewMemoryStore(0) }, idemtest.FakeTime())
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

// A full store evicts nothing to make room: a new key gets ErrStoreFull,
// and every record and lock stays until it expires.
func TestMemoryStoreFullEvictsNothing(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(2)
	_, token, err := s.Acquire(ctx, "record", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "record", token, []byte("stored"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "locked", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "new", time.Minute); !errors.Is(err, core.ErrStoreFull) {
		t.Fatalf("Acquire on a full store: err = %v, want ErrStoreFull", err)
	}
	if rec, _, err := s.Acquire(ctx, "record", time.Minute); string(rec) != "stored" || err != nil {
		t.Fatalf("Acquire(record) = %q, %v: the record of a full store was evicted", rec, err)
	}
	if _, _, err := s.Acquire(ctx, "locked", time.Second); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("Acquire(locked) = %v: the lock of a full store was evicted", err)
	}
}

// One user filling the store with cheap 400s (every 4xx is stored) does
// not push out another user's record: its retry still replays, and its
// handler does not run again. The new keys of the full store are refused
// (503), fail-open as well: run unprotected, their duplicates would run
// again.
func TestMemoryStoreFullKeepsOthersRecords(t *testing.T) {
	e, err := core.New(core.Config{
		Store:    core.NewMemoryStore(10),
		Scope:    func(r *core.Request) string { return r.Header.Get("X-User") },
		Observer: func(core.Event) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs[r.Header.Get("X-User")]++
		if r.Header.Get("X-User") == "mallory" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(user, key string) int {
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("{}"))
		r.Header.Set("X-User", user)
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := post("alice", "charge-1"); code != http.StatusCreated {
		t.Fatalf("alice: %d", code)
	}
	for i := range 50 {
		post("mallory", "junk-"+strconv.Itoa(i))
	}
	code := post("alice", "charge-1")
	if code != http.StatusCreated || runs["alice"] != 1 {
		t.Fatalf("alice's retry: %d, her handler ran %d times; want her record replayed, run once", code, runs["alice"])
	}
	for range 2 {
		if code := post("bob", "charge-2"); code != http.StatusServiceUnavailable {
			t.Fatalf("bob's new key on the full store: %d, want 503", code)
		}
	}
	if runs["bob"] != 0 {
		t.Fatalf("bob's handler ran %d times on the full store, want 0", runs["bob"])
	}
}

// A nil record is an empty record, not a lock: it replays, and it is
// swept as a record.
func TestMemoryStoreNilRecord(t *testing.T) { synctest.Test(t, testMemoryStoreNilRecord) }

func testMemoryStoreNilRecord(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(2)
	_, token, _ := s.Acquire(ctx, "nil", time.Minute)
	if err := s.Complete(ctx, "nil", token, nil, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if rec, token, err := s.Acquire(ctx, "nil", time.Minute); rec == nil || token != "" || err != nil {
		t.Fatalf("Acquire after a nil record = %v, %q, %v; want an empty record", rec, token, err)
	}
	for _, key := range []string{"a"} {
		if _, _, err := s.Acquire(ctx, key, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	advance(100 * time.Millisecond)
	if n := core.MemoryLen(s); n != 0 {
		t.Fatalf("Len after the locks expired = %d, want 0", n)
	}
}

func TestMemoryStoreSweepsExpired(t *testing.T) { synctest.Test(t, testMemoryStoreSweepsExpired) }

func testMemoryStoreSweepsExpired(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(1000)
	for range 1000 {
		if _, _, err := s.Acquire(ctx, idemtest.Key(t), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	advance(time.Millisecond)
	// Every key expired: the next Acquire sweeps them, so the store is not
	// full and holds only the new key.
	if _, _, err := s.Acquire(ctx, "fresh", time.Minute); err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}
	if n := core.MemoryLen(s); n != 1 {
		t.Fatalf("Len after sweep = %d, want 1", n)
	}
}

// A late Complete (its lock expired, nobody took the key) on a full store
// reports the response lost, as a lock taken over does, not a full store:
// there is no lock left for a retry to wait on.
func TestMemoryStoreLateCompleteWhenFull(t *testing.T) {
	synctest.Test(t, testMemoryStoreLateCompleteWhenFull)
}

func testMemoryStoreLateCompleteWhenFull(t *testing.T) {
	ctx := context.Background()
	s := core.NewMemoryStore(1)
	_, stale, err := s.Acquire(ctx, "a", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	advance(time.Millisecond)
	if _, _, err := s.Acquire(ctx, "b", time.Minute); err != nil { // sweeps a, fills the store
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "a", stale, []byte("late"), time.Minute); !errors.Is(err, core.ErrLockLost) {
		t.Fatalf("late Complete on a full store: err = %v, want ErrLockLost", err)
	}
}
