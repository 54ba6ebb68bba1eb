package redislock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/redislock"
)

// signalling passes the store's invalidations on and reports each.
type signalling struct {
	*redislock.Store
	got chan string
}

func (s *signalling) SetInvalidate(f func(string)) {
	s.Store.SetInvalidate(func(key string) { f(key); s.got <- key })
}

// testPurgeInvalidatesCaches: two instances cache a completed record; a
// purge through a third Store drops it from both, so that the corrected
// request runs again.
func testPurgeInvalidatesCaches(t *testing.T, c redis.UniversalClient, prefix string) {
	var runs atomic.Int32
	var instances []http.Handler
	var stores []*signalling
	for range 2 {
		s := &signalling{Store: mustNew(t, c, &redislock.Options{Prefix: prefix}), got: make(chan string, 4)}
		eng, err := core.New(core.Config{Store: s, ReplayCache: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
		instances = append(instances, eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		})))
	}
	post := func(h http.Handler) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "purged-key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	post(instances[0])
	for _, h := range instances {
		if w := post(h); w.Header().Get(core.HeaderReplay) != "true" {
			t.Fatalf("not a replay: %d", w.Code)
		}
	}
	// The Stores subscribe in the background: a purge published before
	// both subscriptions are live reaches neither.
	ctx, channel := context.Background(), prefix+":purged"
	for deadline := time.Now().Add(30 * time.Second); ; runtime.Gosched() {
		n, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[channel] == int64(len(stores)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions to %s after 30 s, want %d", n[channel], channel, len(stores))
		}
	}
	admin := mustNew(t, c, &redislock.Options{Prefix: prefix})
	id := core.ID("", "purged-key", "")
	if err := admin.Purge(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		select {
		case got := <-s.got:
			if got != id {
				t.Fatalf("invalidated %q, want %q", got, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no invalidation 30 s after the purge")
		}
	}
	if w := post(instances[1]); w.Header().Get(core.HeaderReplay) != "" || runs.Load() != 2 {
		t.Fatalf("after the purge: replay %q, %d runs; want the handler run again", w.Header().Get(core.HeaderReplay), runs.Load())
	}
	if w := post(instances[0]); w.Header().Get(core.HeaderReplay) != "true" || runs.Load() != 2 {
		t.Fatalf("the other instance after the new run: replay %q, %d runs", w.Header().Get(core.HeaderReplay), runs.Load())
	}
}

func TestPurgeInvalidatesCachesMiniredis(t *testing.T) {
	_, c := newMiniredis(t)
	testPurgeInvalidatesCaches(t, c, "cache")
}

// Every Engine on one Store gets the purges of one subscription: more
// Engines add no connection.
func TestInvalidateSubscribesOnce(t *testing.T) {
	_, c := newMiniredis(t)
	s := mustNew(t, c, &redislock.Options{Prefix: "once"})
	var got [3]atomic.Int32
	for i := range got {
		s.SetInvalidate(func(key string) {
			if key == "k" {
				got[i].Add(1)
			}
		})
	}
	ctx := context.Background()
	// Publish until every Engine got a purge: its subscription is live.
	for i := 0; got[0].Load() == 0 || got[1].Load() == 0 || got[2].Load() == 0; i++ {
		if i == 100_000 {
			t.Fatalf("purges received: %d, %d, %d", got[0].Load(), got[1].Load(), got[2].Load())
		}
		if err := c.Publish(ctx, "once:purged", "k").Err(); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	n, err := c.PubSubNumSub(ctx, "once:purged").Result()
	if err != nil || n["once:purged"] != 1 {
		t.Fatalf("%v subscriptions for 3 Engines (%v), want 1", n, err)
	}
}

// Close ends the Store's subscription and drops what it fed; a later
// SetInvalidate subscribes to nothing.
func TestCloseEndsSubscription(t *testing.T) {
	_, c := newMiniredis(t)
	s := mustNew(t, c, &redislock.Options{Prefix: "closed"})
	var got atomic.Int32
	s.SetInvalidate(func(string) { got.Add(1) })
	ctx := context.Background()
	subscribers := func() int64 {
		n, err := c.PubSubNumSub(ctx, "closed:purged").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n["closed:purged"]
	}
	for i := 0; got.Load() == 0; i++ { // until the subscription is live
		if i == 100_000 {
			t.Fatal("no purge received")
		}
		if err := c.Publish(ctx, "closed:purged", "k").Err(); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	s.Close()
	for i := 0; subscribers() != 0; i++ {
		if i == 100_000 {
			t.Fatalf("%d subscriptions after Close, want 0", subscribers())
		}
		runtime.Gosched()
	}
	s.SetInvalidate(func(string) {})
	if n := subscribers(); n != 0 {
		t.Fatalf("SetInvalidate after Close subscribed: %d subscriptions", n)
	}
	s.Close() // twice is fine
}
