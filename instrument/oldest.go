package instrument

import (
	"context"
	"sync"
	"time"

	"github.com/idem-go/idem/core"
)

// OldestLock reads when the oldest lock of a store was taken, for a gauge
// of stuck keys (idemprom.NewStuckKeys, idemotel's
// Telemetry.ObserveStuckKeys). Listing the keys in flight scans the store
// (SCAN on Redis, an index on PostgreSQL), so Read reads it
// (core.Admin.InFlight, within a 5 s timeout) at most once per interval
// and answers from the last read in between. It is safe for concurrent use.
type OldestLock struct {
	store    core.Admin
	interval time.Duration

	mu     sync.Mutex
	read   time.Time // when the store was last read; zero: never
	oldest time.Time // the oldest lock's time; zero: none
}

// NewOldestLock returns an OldestLock on store that reads it at most once
// per interval (on every Read if interval is 0 or less).
func NewOldestLock(store core.Admin, interval time.Duration) *OldestLock {
	return &OldestLock{store: store, interval: interval}
}

// Read returns when the oldest lock in flight was taken, and false when no
// key is in flight or the store's last read failed: a gauge then leaves the
// value out. A failed read is tried again an interval later, like any
// other, so that a store that is down holds up one collection per
// interval, not each.
func (o *OldestLock) Read(ctx context.Context) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if now := time.Now(); o.read.IsZero() || now.Sub(o.read) >= o.interval {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		keys, err := o.store.InFlight(ctx, 1)
		cancel()
		o.read, o.oldest = now, time.Time{}
		if err == nil && len(keys) > 0 {
			o.oldest = keys[0].LockedAt
		}
	}
	return o.oldest, !o.oldest.IsZero()
}
