package idemtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// TestAdmin runs the conformance suite of core.Admin on the stores newStore
// returns, which must implement it. newStore is called once per subtest, and
// InFlight must list only the keys of the store it returned: give each one a
// prefix, a schema or a table of its own on a shared backend. opts as for
// TestStore.
func TestAdmin(t *testing.T, newStore func(t *testing.T) core.Store, opts ...Option) {
	t.Helper()
	o := newOptions(opts)
	tests := []struct {
		name string
		fn   func(t *testing.T, s adminStore, o *options)
	}{
		{"InspectRecord", testInspectRecord},
		{"InspectLock", testInspectLock},
		{"InspectMissing", testInspectMissing},
		{"EngineRecordByID", testEngineRecordByID},
		{"PurgeRefusedInFlight", testPurgeInFlight},
		{"PurgeLetsKeyRunAgain", testPurge},
		{"Unlock", testUnlock},
		{"InFlightOldestFirst", testInFlight},
		{"ConcurrentAcquireAndPurge", testConcurrentPurge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o.run(t, func(t *testing.T) {
				s := newStore(t)
				a, ok := s.(core.Admin)
				if !ok {
					t.Fatalf("%T does not implement core.Admin", s)
				}
				tt.fn(t, adminStore{s, a}, o)
			})
		})
	}
}

type adminStore struct {
	core.Store
	core.Admin
}

// clockSlack is how far a store's times (LockedAt, Expires) may be from the
// test's clock: a remote store may read its own.
const clockSlack = 5 * time.Second

func wantTime(t *testing.T, what string, got, from, to time.Time) {
	t.Helper()
	if got.Before(from.Add(-clockSlack)) || got.After(to.Add(clockSlack)) {
		t.Fatalf("%s = %v, want between %v and %v", what, got, from, to)
	}
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("%s: err = %v, want ErrNotFound", what, err)
	}
}

func inspect(t *testing.T, s adminStore, key string) core.KeyState {
	t.Helper()
	st, err := s.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if st.Key != key {
		t.Fatalf("Inspect(%s).Key = %q", key, st.Key)
	}
	return st
}

func testInspectRecord(t *testing.T, s adminStore, _ *options) {
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	before := time.Now()
	if err := s.Complete(ctx, key, token, []byte("record\x00"), time.Hour); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	st := inspect(t, s, key)
	if !bytes.Equal(st.Record, []byte("record\x00")) || !st.LockedAt.IsZero() {
		t.Fatalf("Inspect of a record = %+v", st)
	}
	wantTime(t, "Expires", st.Expires, before.Add(time.Hour), after.Add(time.Hour))
}

func testInspectLock(t *testing.T, s adminStore, _ *options) {
	key := Key(t)
	before := time.Now()
	mustLock(t, s, key, time.Minute)
	after := time.Now()
	st := inspect(t, s, key)
	if st.Record != nil {
		t.Fatalf("Inspect of a lock: Record = %q, want nil", st.Record)
	}
	wantTime(t, "LockedAt", st.LockedAt, before, after)
	wantTime(t, "Expires", st.Expires, before.Add(time.Minute), after.Add(time.Minute))
}

func testInspectMissing(t *testing.T, s adminStore, _ *options) {
	ctx := context.Background()
	key := Key(t)
	_, err := s.Inspect(ctx, key)
	wantNotFound(t, "Inspect of a key never used", err)
	token := mustLock(t, s, key, time.Minute)
	if err := s.Release(ctx, key, token); err != nil {
		t.Fatal(err)
	}
	_, err = s.Inspect(ctx, key)
	wantNotFound(t, "Inspect of a released key", err)
}

// testEngineRecordByID: what the Engine stores for a scope and a client
// key is found under core.ID(scope, key, ""), as admin tools look for it.
func testEngineRecordByID(t *testing.T, s adminStore, _ *options) {
	e := newEngine(t, core.Config{Store: s})
	scope, key := "user-"+Key(t)[:8], "order-"+Key(t)[:8]
	c := &core.Call{Key: key, Scope: scope, Method: "POST", Route: "/orders", Fingerprint: sha256.Sum256([]byte("r"))}
	l, _, err := e.Acquire(c)
	if err != nil || l == nil {
		t.Fatalf("Acquire: %v", err)
	}
	st := inspect(t, s, core.ID(scope, key, ""))
	if st.Record != nil || st.LockedAt.IsZero() {
		t.Fatalf("Inspect while the call runs = %+v, want a lock", st)
	}
	l.Complete(&core.Record{Code: 201, Body: []byte("created")})
	st = inspect(t, s, core.ID(scope, key, ""))
	rec, err := core.DecodeRecord(st.Record)
	if err != nil {
		t.Fatalf("DecodeRecord: %v", err)
	}
	if rec.Scope != scope || rec.Key != key || rec.Code != 201 || string(rec.Body) != "created" {
		t.Fatalf("record %+v", rec)
	}
	_, err = s.Inspect(context.Background(), core.ID(scope, key, "/orders"))
	wantNotFound(t, "Inspect with the route joined (not ScopeRoute)", err)
}

func testPurgeInFlight(t *testing.T, s adminStore, _ *options) {
	ctx := context.Background()
	key := Key(t)
	token := mustLock(t, s, key, time.Minute)
	if err := s.Purge(ctx, key); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("Purge of a locked key: err = %v, want ErrInFlight", err)
	}
	wantInFlight(t, s, key)
	if err := s.Complete(ctx, key, token, []byte("done"), time.Minute); err != nil {
		t.Fatalf("Complete after a refused Purge: %v", err)
	}
	wantRecord(t, s, key, []byte("done"))
}

func testPurge(t *testing.T, s adminStore, _ *options) {
	ctx := context.Background()
	key := Key(t)
	wantNotFound(t, "Purge of a key never used", s.Purge(ctx, key))
	token := mustLock(t, s, key, time.Minute)
	if err := s.Complete(ctx, key, token, []byte("wrong"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, key); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	_, err := s.Inspect(ctx, key)
	wantNotFound(t, "Inspect after Purge", err)
	wantNotFound(t, "Purge twice", s.Purge(ctx, key))
	again := mustLock(t, s, key, time.Minute)
	if err := s.Complete(ctx, key, again, []byte("right"), time.Hour); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, key, []byte("right"))
}

func testUnlock(t *testing.T, s adminStore, _ *options) {
	ctx := context.Background()
	key := Key(t)
	wantNotFound(t, "Unlock of a key never used", s.Unlock(ctx, key))
	stuck := mustLock(t, s, key, time.Hour)
	if err := s.Unlock(ctx, key); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	_, err := s.Inspect(ctx, key)
	wantNotFound(t, "Inspect after Unlock", err)
	wantNotFound(t, "Unlock twice", s.Unlock(ctx, key))
	fresh := mustLock(t, s, key, time.Minute)
	if fresh == stuck {
		t.Fatalf("the lock after Unlock reused token %q", stuck)
	}
	wantLockLost(t, "Complete of the unlocked token", s.Complete(ctx, key, stuck, []byte("stuck"), time.Minute))
	if err := s.Complete(ctx, key, fresh, []byte("fresh"), time.Minute); err != nil {
		t.Fatal(err)
	}
	wantNotFound(t, "Unlock of a record", s.Unlock(ctx, key))
	wantRecord(t, s, key, []byte("fresh"))
}

func testInFlight(t *testing.T, s adminStore, o *options) {
	ctx := context.Background()
	if got, err := s.InFlight(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("InFlight of an empty store = %v, %v", got, err)
	}
	done := Key(t)
	token := mustLock(t, s, done, time.Minute)
	if err := s.Complete(ctx, done, token, []byte("done"), time.Minute); err != nil {
		t.Fatal(err)
	}
	type lock struct {
		key           string
		token         string
		before, after time.Time
	}
	locks := make([]lock, 3)
	for i := range locks {
		if i > 0 {
			o.pass(t, 3*time.Millisecond) // stores keeping times to the millisecond tell the locks apart
		}
		locks[i].key = Key(t)
		locks[i].before = time.Now()
		locks[i].token = mustLock(t, s, locks[i].key, time.Minute)
		locks[i].after = time.Now()
	}
	check := func(limit int, want []lock) {
		t.Helper()
		got, err := s.InFlight(ctx, limit)
		if err != nil {
			t.Fatalf("InFlight(%d): %v", limit, err)
		}
		if len(got) != len(want) {
			t.Fatalf("InFlight(%d) = %d keys %+v, want %d", limit, len(got), got, len(want))
		}
		for i, w := range want {
			if got[i].Key != w.key || got[i].Record != nil {
				t.Fatalf("InFlight(%d)[%d] = %+v, want key %s, oldest first", limit, i, got[i], w.key)
			}
			wantTime(t, "LockedAt", got[i].LockedAt, w.before, w.after)
			wantTime(t, "Expires", got[i].Expires, w.before.Add(time.Minute), w.after.Add(time.Minute))
		}
	}
	check(10, locks)
	check(2, locks[:2])
	if err := s.Release(ctx, locks[0].key, locks[0].token); err != nil {
		t.Fatal(err)
	}
	check(10, locks[1:])
}

// testConcurrentPurge: workers acquire one key in a loop, each completing
// when it gets the lock, while an operator purges it again and again. A
// purge never lets a second request in while one holds the lock, nor drops
// a lock: every purge lets exactly one request run again.
func testConcurrentPurge(t *testing.T, s adminStore, _ *options) {
	const (
		workers = 16
		purges  = 20
	)
	ctx := context.Background()
	key := Key(t)
	var (
		holders, runs, purged atomic.Int64
		stop                  = make(chan struct{})
		wg                    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, token, err := s.Acquire(ctx, key, time.Minute)
				switch {
				case errors.Is(err, core.ErrInFlight):
					runtime.Gosched() // let the holder and the operator on
					continue
				case err != nil:
					t.Errorf("Acquire: %v", err)
					return
				case token == "":
					runtime.Gosched() // the record, a replay: let the operator purge it
					continue
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d requests hold the lock at once", n)
				}
				runs.Add(1)
				runtime.Gosched()
				holders.Add(-1)
				if err := s.Complete(ctx, key, token, []byte("run"), time.Minute); err != nil {
					t.Errorf("Complete: %v (a purge dropped the lock?)", err)
				}
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for purged.Load() < purges && !t.Failed() {
		if time.Now().After(deadline) {
			t.Errorf("%d purges in a minute, want %d", purged.Load(), purges)
			break
		}
		switch err := s.Purge(ctx, key); {
		case err == nil:
			purged.Add(1)
		case errors.Is(err, core.ErrInFlight), errors.Is(err, core.ErrNotFound):
		default:
			t.Errorf("Purge: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	// Every run but the first followed a purge, and every purge removed
	// the record of a run: after the last purge, one more run may or may
	// not have happened before the workers stopped.
	if n, p := runs.Load(), purged.Load(); n != p && n != p+1 {
		t.Fatalf("%d runs for %d purges, want %d or %d", n, p, p, p+1)
	}
}
