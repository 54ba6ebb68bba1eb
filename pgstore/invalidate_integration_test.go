//go:build integration

package pgstore_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

// TestPurgeInvalidatesReplayCache: two Engines (two processes) with
// Config.ReplayCache on one table; a record that B replays from its cache
// is purged through A's admin handler; PostgreSQL notifies B's listener,
// and B's next request with the key runs the handler again.
func TestPurgeInvalidatesReplayCache(t *testing.T) {
	a, pool, schema := newStore(t, nil)
	// B: another Store on the same table, on a pool of its own.
	poolB, err := pgxpool.New(t.Context(), pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(poolB.Close)
	b, err := pgstore.New(poolB, &pgstore.Options{Schema: schema, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close) // before poolB closes: stops the listener

	var runs atomic.Int64
	serve := func(store core.Store) http.Handler {
		eng, err := core.New(core.Config{Store: store, ReplayCache: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
		}))
	}
	hA, hB := serve(a), serve(b)
	// Told after B's Engine has dropped its copy: functions run in the
	// order they were set.
	purged := make(chan string, 16)
	b.SetInvalidate(func(key string) { purged <- key })

	post := func(h http.Handler, key string) string {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("POST: %d %s", w.Code, w.Body)
		}
		return w.Header().Get(core.HeaderReplay)
	}
	// B's listener connects in the background: purge probes until it
	// hears one (the 100 ms is a retry tick, not a pass condition).
	adm := admin.Handler(a, func(*http.Request) bool { return true })
	purge := func(key string) {
		r := httptest.NewRequest("POST", "/admin/idempotency/purge?key="+key, nil)
		w := httptest.NewRecorder()
		adm.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("purge %s: %d %s", key, w.Code, w.Body)
		}
	}
	heard := func(key string, tick time.Duration) bool {
		timer := time.NewTimer(tick)
		defer timer.Stop()
		for {
			select {
			case k := <-purged:
				if k == core.ID("", key, "") {
					return true
				}
			case <-timer.C:
				return false
			}
		}
	}
	for i := 0; ; i++ {
		if i == 300 {
			t.Fatal("B's listener heard no purge in 30 s")
		}
		probe := "probe-" + strconv.Itoa(i)
		post(hA, probe)
		purge(probe)
		if heard(probe, 100*time.Millisecond) {
			break
		}
	}

	const key = "order-1"
	post(hA, key)
	before := runs.Load()
	for range 2 { // from PostgreSQL, then from B's cache
		if post(hB, key) != "true" || runs.Load() != before {
			t.Fatal("B: want a replay")
		}
	}
	purge(key)
	if !heard(key, time.Minute) {
		t.Fatal("B's listener did not hear the purge")
	}
	if post(hB, key) != "" || runs.Load() != before+1 {
		t.Fatalf("B after the purge: replayed, or the handler ran %d times more; want it run once", runs.Load()-before)
	}
}
