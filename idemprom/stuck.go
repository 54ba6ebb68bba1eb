package idemprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
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
// the gauge is left out of the scrapes until the next read.
func NewStuckKeys(store core.Admin, interval time.Duration) prometheus.Collector {
	if interval <= 0 {
		interval = DefaultStuckInterval
	}
	return &stuckKeys{oldest: instrument.NewOldestLock(store, interval),
		desc: prometheus.NewDesc("idempotency_oldest_inflight_start_timestamp_seconds",
			"When the oldest idempotency key in flight in the store was locked, in Unix seconds; absent when none is.", nil, nil)}
}

type stuckKeys struct {
	oldest *instrument.OldestLock
	desc   *prometheus.Desc
}

func (s *stuckKeys) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *stuckKeys) Collect(ch chan<- prometheus.Metric) {
	if t, ok := s.oldest.Read(context.Background()); ok {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(t.UnixNano())/1e9)
	}
}
