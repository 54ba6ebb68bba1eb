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
// idempotency_oldest_inflight_start_timestamp_seconds: when the oldest key
// in flight in store (core.Admin.InFlight) was locked, in Unix seconds,
// left out when no key is in flight. The IdempotencyKeyStuck alert reads
// time() minus it. Listing keys in flight scans the store (SCAN on Redis,
// an index on PostgreSQL), so a scrape reads it at most every interval
// (DefaultStuckInterval if 0), within a 5 s timeout; when the read fails,
// the gauge is left out of the scrape.
func NewStuckKeys(store core.Admin, interval time.Duration) prometheus.Collector {
	if interval <= 0 {
		interval = DefaultStuckInterval
	}
	return &stuckKeys{store: store, interval: interval, now: time.Now,
		desc: prometheus.NewDesc("idempotency_oldest_inflight_start_timestamp_seconds",
			"When the oldest idempotency key in flight in the store was locked, in Unix seconds; absent when none is.", nil, nil)}
}

type stuckKeys struct {
	store    core.Admin
	interval time.Duration
	now      func() time.Time
	desc     *prometheus.Desc

	mu     sync.Mutex
	read   time.Time // when the store was last read; zero: never, or failed
	oldest time.Time // the oldest lock's time; zero: none
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
		s.read, s.oldest = now, time.Time{}
		if len(keys) > 0 {
			s.oldest = keys[0].LockedAt
		}
	}
	if !s.oldest.IsZero() {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(s.oldest.UnixNano())/1e9)
	}
}
