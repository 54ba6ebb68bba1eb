package idemprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem/core"
)

// DefaultStuckInterval is how often NewStuckKeys reads the store at most.
const DefaultStuckInterval = 30 * time.Second

// NewStuckKeys returns a prometheus.Collector of
// idempotency_oldest_inflight_age_seconds, the age of the oldest key in
// flight in store (core.Admin.InFlight), 0 when none: the gauge that the
// IdempotencyKeyStuck alert reads. Listing keys in flight scans the store
// (SCAN on Redis, an index on PostgreSQL), so a scrape reads it at most
// every interval (DefaultStuckInterval if 0), within a 5 s timeout; when
// the read fails, the gauge is left out of the scrape.
func NewStuckKeys(store core.Admin, interval time.Duration) prometheus.Collector {
	if interval <= 0 {
		interval = DefaultStuckInterval
	}
	return &stuckKeys{store: store, interval: interval, now: time.Now,
		desc: prometheus.NewDesc("idempotency_oldest_inflight_age_seconds",
			"Age of the oldest idempotency key in flight in the store (its lock taken that long ago), 0 when none.", nil, nil)}
}

type stuckKeys struct {
	store    core.Admin
	interval time.Duration
	now      func() time.Time
	desc     *prometheus.Desc

	mu   sync.Mutex
	read time.Time // when the store was last read; zero: never, or failed
	age  float64
}

func (s *stuckKeys) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *stuckKeys) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.read.IsZero() || now.Sub(s.read) >= s.interval {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		keys, err := s.store.InFlight(ctx, 1)
		cancel()
		if err != nil {
			s.read = time.Time{}
			return
		}
		s.read, s.age = now, 0
		if len(keys) > 0 && !keys[0].LockedAt.IsZero() {
			s.age = now.Sub(keys[0].LockedAt).Seconds()
		}
	}
	ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, s.age)
}
