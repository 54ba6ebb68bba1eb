package idemprom

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-go/idem/core"
)

// inflightStore answers InFlight with its keys, or fails, and counts calls.
type inflightStore struct {
	core.Admin
	keys  []core.KeyState
	err   error
	calls int
}

func (s *inflightStore) InFlight(context.Context, int) ([]core.KeyState, error) {
	s.calls++
	return s.keys, s.err
}

// TestStuckKeys reads the store at most every interval; the gauge is the
// oldest lock's time, absent when no key is in flight or the read failed.
func TestStuckKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		store := &inflightStore{}
		c := NewStuckKeys(store, time.Minute)
		want := func(v string) {
			t.Helper()
			exp := ""
			if v != "" {
				exp = "# HELP idempotency_oldest_inflight_start_timestamp_seconds When the oldest idempotency key in flight in the store was locked, " +
					"in Unix seconds; absent when none is.\n" +
					"# TYPE idempotency_oldest_inflight_start_timestamp_seconds gauge\nidempotency_oldest_inflight_start_timestamp_seconds " + v + "\n"
			}
			if err := testutil.CollectAndCompare(c, strings.NewReader(exp)); err != nil {
				t.Fatal(err)
			}
		}
		lockedAt := start.Add(-90*time.Second + 250*time.Millisecond)
		at := strconv.FormatFloat(float64(lockedAt.UnixNano())/1e9, 'f', -1, 64)
		want("") // nothing in flight
		store.keys = []core.KeyState{{Key: "k", LockedAt: lockedAt}}
		time.Sleep(30 * time.Second) // the bubble's clock
		want("")                     // within the interval: not read again
		time.Sleep(30 * time.Second)
		want(at)
		time.Sleep(30 * time.Second)
		want(at) // within the interval: the same lock, its time still true
		if store.calls != 2 {
			t.Fatalf("%d reads of the store, want 2", store.calls)
		}
		store.err = errors.New("redis down")
		time.Sleep(time.Minute)
		want("") // a failed read leaves the gauge out
		store.err = nil
		want("") // until the next read, an interval later: not each scrape
		time.Sleep(time.Minute)
		want(at)
		if store.calls != 4 {
			t.Fatalf("%d reads of the store, want 4", store.calls)
		}
	})
}
