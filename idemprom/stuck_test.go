package idemprom

import (
	"context"
	"errors"
	"strings"
	"testing"
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

func TestStuckKeys(t *testing.T) {
	now := time.Unix(10_000, 0)
	store := &inflightStore{}
	c := NewStuckKeys(store, time.Minute).(*stuckKeys)
	c.now = func() time.Time { return now }
	want := func(v string) {
		t.Helper()
		exp := ""
		if v != "" {
			exp = "# HELP idempotency_oldest_inflight_age_seconds Age of the oldest idempotency key in flight in the store (its lock taken that long ago), 0 when none.\n" +
				"# TYPE idempotency_oldest_inflight_age_seconds gauge\nidempotency_oldest_inflight_age_seconds " + v + "\n"
		}
		if err := testutil.CollectAndCompare(c, strings.NewReader(exp)); err != nil {
			t.Fatal(err)
		}
	}
	want("0") // nothing in flight
	store.keys = []core.KeyState{{Key: "k", LockedAt: now.Add(-90 * time.Second)}}
	now = now.Add(30 * time.Second)
	want("0") // within the interval: not read again
	now = now.Add(30 * time.Second)
	want("150")
	if store.calls != 2 {
		t.Fatalf("%d reads of the store, want 2", store.calls)
	}
	store.err = errors.New("redis down")
	now = now.Add(time.Minute)
	want("") // a failed read leaves the gauge out
	store.err = nil
	want("210") // and the next scrape reads again
}
