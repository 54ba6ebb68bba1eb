package core

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// The memory store forgets a scope once its window is empty and none of its
// keys is in flight: one-off scopes do not pile up.
func TestMemoryStoreForgetsScopes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore(0)
		eng, err := New(Config{Store: s, Quota: Quota{InFlight: 2, PerWindow: 3, Window: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		acquire := func(scope, key string) *Lease {
			l, _, err := eng.Acquire(&Call{Scope: scope, Key: key, Fingerprint: sha256.Sum256(nil)})
			if err != nil || l == nil {
				t.Fatalf("Acquire(%s, %s) = %v, %v", scope, key, l, err)
			}
			return l
		}
		for i := range 100 {
			scope := fmt.Sprint("user-", i)
			acquire(scope, "done").Complete(&Record{Code: 201})
			acquire(scope, "failed").Release(500, nil)
		}
		held := acquire("busy", "held")
		counts := func() (int, int) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sweep(s.now())
			return len(s.scopes), len(s.windows)
		}
		if scopes, windows := counts(); scopes != 101 || windows != 101 {
			t.Fatalf("%d scopes, %d windows; want 101 and 101", scopes, windows)
		}
		<-time.After(time.Minute)
		if scopes, windows := counts(); scopes != 1 || windows != 0 {
			t.Fatalf("after the window: %d scopes, %d windows; want 1 (a key in flight) and 0", scopes, windows)
		}
		held.Release(0, nil)
		if scopes, _ := counts(); scopes != 0 {
			t.Fatalf("after the last key: %d scopes, want 0", scopes)
		}
	})
}

// Scopes count against the memory store's maximum as keys do: a client that
// sends each request under a scope of its own, its keys released (a 5xx, an
// unrouted request), leaves no key behind, and its scopes, kept for the
// window, must not pile up past the bound that keys have.
func TestMemoryStoreBoundsScopes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 100
		s := NewMemoryStore(max)
		eng, err := New(Config{Store: s, Quota: Quota{PerWindow: 10, Window: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		full := 0
		for i := range 10 * max {
			l, _, err := eng.Acquire(&Call{Scope: fmt.Sprint("user-", i), Key: "k", Fingerprint: sha256.Sum256(nil)})
			if errors.Is(err, ErrStoreFull) {
				full++
				continue
			}
			if err != nil || l == nil {
				t.Fatalf("Acquire(user-%d) = %v, %v", i, l, err)
			}
			l.Release(500, nil)
		}
		counts := func() (int, int) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sweep(s.now())
			return len(s.entries), len(s.scopes)
		}
		if entries, scopes := counts(); entries != 0 || scopes != max || full != 9*max {
			t.Fatalf("%d keys, %d scopes, %d refused as full; want 0, %d and %d", entries, scopes, full, max, 9*max)
		}
		<-time.After(time.Hour)
		if _, scopes := counts(); scopes != 0 {
			t.Fatalf("after the window: %d scopes, want 0", scopes)
		}
		l, _, err := eng.Acquire(&Call{Scope: "later", Key: "k", Fingerprint: sha256.Sum256(nil)})
		if err != nil || l == nil {
			t.Fatalf("a new scope after the window: %v, %v", l, err)
		}
		l.Complete(&Record{Code: 201})
	})
}
