package core_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
)

// refreshCounter is a memory store that counts the refreshes of each key.
type refreshCounter struct {
	*core.MemoryStore
	mu sync.Mutex
	n  map[string]int
}

func (s *refreshCounter) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	s.mu.Lock()
	s.n[key]++
	s.mu.Unlock()
	return s.MemoryStore.Refresh(ctx, key, token, ttl)
}

func (s *refreshCounter) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key]
}

// The Engine's one refresher keeps every running lease's lock, however
// many and whenever they began, and stops refreshing a lease once it
// ends: leases taken 3 ms apart are each refreshed every LockTTL/3 while
// their work runs, none loses its lock over ten lock TTLs, and those
// that complete half way are refreshed no more.
func TestRefresherKeepsManyLeases(t *testing.T) { synctest.Test(t, testRefresherKeepsManyLeases) }

func testRefresherKeepsManyLeases(t *testing.T) {
	const (
		ttl    = 150 * time.Millisecond
		leases = 40
	)
	store := &refreshCounter{MemoryStore: core.NewMemoryStore(0), n: map[string]int{}}
	var ev events
	eng, err := core.New(core.Config{Store: store, LockTTL: ttl, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	core.ShareRefresher(eng)
	ids := make([]string, leases)
	running := make([]*core.Lease, leases)
	for i := range leases {
		key := "key-" + strconv.Itoa(i)
		ids[i] = core.ID("", key, "")
		l, _, err := eng.Acquire(&core.Call{Key: key})
		if err != nil || l == nil || !l.Protected() {
			t.Fatalf("lease %d: %v", i, err)
		}
		running[i] = l
		advance(3 * time.Millisecond)
	}
	advance(5 * ttl)
	synctest.Wait()
	atHalf := make([]int, leases)
	for i, l := range running {
		atHalf[i] = store.count(ids[i])
		if i%2 == 0 {
			if err := l.Complete(&core.Record{Code: 201}); err != nil {
				t.Fatal(err)
			}
		}
	}
	advance(5 * ttl)
	synctest.Wait()
	for i, l := range running {
		n := store.count(ids[i])
		switch {
		case atHalf[i] < 13: // about 5 TTLs of refreshes, every TTL/3
			t.Errorf("lease %d: %d refreshes in 5 lock TTLs, want about 15", i, atHalf[i])
		case i%2 == 0 && n != atHalf[i]:
			t.Errorf("lease %d: refreshed %d times after it completed", i, n-atHalf[i])
		case i%2 == 1 && n < atHalf[i]+13:
			t.Errorf("lease %d: %d refreshes in the second 5 lock TTLs, want about 15", i, n-atHalf[i])
		}
		if i%2 == 1 {
			if _, _, err := eng.Acquire(&core.Call{Key: "key-" + strconv.Itoa(i)}); !errors.Is(err, core.ErrInFlight) {
				t.Errorf("lease %d: a duplicate after 10 lock TTLs got %v, want ErrInFlight", i, err)
			}
			l.Release(0, nil)
		}
	}
	if n := ev.count(core.OutcomeLockLost); n != 0 {
		t.Errorf("%d locks lost", n)
	}
}

// One Engine used outside testing/synctest bubbles and in two of them, as
// a package-level Engine is by tests that each start a bubble: the leases
// of each bubble keep their locks on its fake clock, and none of them
// touches the refresher's timer, which runs on real time.
func TestRefresherAcrossBubbles(t *testing.T) {
	const ttl = 150 * time.Millisecond
	eng, err := core.New(core.Config{LockTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	outside := func(key string) { // a lease on real time, armed and ended at once
		l, _, err := eng.Acquire(&core.Call{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(0, nil)
	}
	outside("real-1")
	for _, bubble := range []string{"a", "b"} {
		synctest.Test(t, func(t *testing.T) {
			key := "slow-" + bubble
			l, _, err := eng.Acquire(&core.Call{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if bubble == "a" { // a lease that ends before its first refresh
				short, _, _ := eng.Acquire(&core.Call{Key: "short-a"})
				short.Release(0, nil)
			}
			advance(10 * ttl) // the work runs ten lock TTLs
			if _, _, err := eng.Acquire(&core.Call{Key: key}); !errors.Is(err, core.ErrInFlight) {
				t.Errorf("bubble %s: a duplicate after 10 lock TTLs got %v, want ErrInFlight", bubble, err)
			}
			if err := l.Complete(&core.Record{Code: 201}); err != nil {
				t.Fatal(err)
			}
		})
	}
	outside("real-2")
}
