package core_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
)

// countingStore counts Acquire calls and is an Invalidator.
type countingStore struct {
	*core.MemoryStore
	acquires   atomic.Int32
	invalidate func(string)
}

func (s *countingStore) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	s.acquires.Add(1)
	return s.MemoryStore.Acquire(ctx, key, ttl)
}

func (s *countingStore) SetInvalidate(f func(string)) { s.invalidate = f }

func (s *countingStore) Purge(ctx context.Context, key string) error {
	err := s.MemoryStore.Purge(ctx, key)
	s.invalidate(key)
	return err
}

func TestReplayCacheServesReplaysWithoutTheStore(t *testing.T) {
	store := &countingStore{MemoryStore: core.NewMemoryStore(0)}
	eng, err := core.New(core.Config{Store: store, ReplayCache: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("order")) //nolint:errcheck
	}))
	post(t, h, "cached", `{"a":1}`)
	store.acquires.Store(0)
	for range 5 {
		if w := post(t, h, "cached", `{"a":1}`); w.Code != http.StatusCreated || w.Body.String() != "order" || w.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("replay: %d %q", w.Code, w.Body)
		}
	}
	if w := post(t, h, "cached", `{"a":2}`); w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("another body under a cached key: %d, want 422", w.Code)
	}
	if n := store.acquires.Load(); n != 0 || runs.Load() != 1 {
		t.Fatalf("%d store calls and %d runs for cached replays, want 0 and 1", n, runs.Load())
	}
	// An admin purge (here through the store, as idemctl would) drops the
	// copy: the corrected request runs again.
	if err := store.Purge(context.Background(), core.ID("", "cached", "")); err != nil {
		t.Fatal(err)
	}
	post(t, h, "cached", `{"a":2}`)
	if runs.Load() != 2 {
		t.Fatalf("after a purge the handler ran %d times in all, want 2", runs.Load())
	}
}
