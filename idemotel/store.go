package idemotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// InstrumentStore returns s measured by t (instrument.Store): the duration
// and the failures (instrument.Failed) of each call, and
// idempotency.inflight_requests, the locks that s handed to this process
// and that were not completed or released yet. The result implements
// core.Waiter, core.Admin and core.TxStore if s does.
func (t *Telemetry) InstrumentStore(s core.Store) core.Store {
	return instrument.Store(s, t.observeStore)
}

func (t *Telemetry) observeStore(ctx context.Context, op instrument.Op, d time.Duration, err error, held int) {
	if instrument.Failed(err) {
		t.storeDur.Record(ctx, d.Seconds(), t.failed[op][storeErrorType(err)].record...)
		t.storeErrs.Add(ctx, 1, t.ops[op].add...)
	} else {
		t.storeDur.Record(ctx, d.Seconds(), t.ops[op].record...)
	}
	if held != 0 {
		t.inflight.Add(ctx, int64(held))
	}
}

// storeErrorTypes are the values of error.type on a failed store call's
// duration: a timeout, a full memory store, a record that does not decode,
// or anything else (OpenTelemetry's "_OTHER").
var storeErrorTypes = [...]string{"_OTHER", "timeout", "store_full", "corrupt_record"}

func storeErrorType(err error) int {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return 1
	case errors.Is(err, core.ErrStoreFull):
		return 2
	case errors.Is(err, core.ErrCorruptRecord):
		return 3
	}
	return 0
}

// DefaultStuckInterval is how often ObserveStuckKeys reads the store at
// most.
const DefaultStuckInterval = 30 * time.Second

// ObserveStuckKeys adds the gauge idempotency.oldest_inflight_start_timestamp
// (unit s): when the oldest key in flight in store (core.Admin.InFlight) was
// locked, in Unix seconds, left out when no key is in flight or the read
// failed. Through a Prometheus exporter it is idemprom's
// idempotency_oldest_inflight_start_timestamp_seconds, which the
// IdempotencyKeyStuck alert reads. The store is read at most every interval
// (DefaultStuckInterval if 0), within a 5 s timeout, since listing keys
// scans it (instrument.OldestLock). Call it once per store: a Telemetry
// shared by the Engines of several stores has one gauge, the oldest lock of
// them all (the stores that answer). Its MeterProvider has one such gauge:
// give the stores to one Telemetry's ObserveStuckKeys, not one each.
func (t *Telemetry) ObserveStuckKeys(store core.Admin, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultStuckInterval
	}
	t.stuckMu.Lock()
	defer t.stuckMu.Unlock()
	if len(t.stuck) == 0 {
		// One callback for every store: the SDK ignores the callbacks of an
		// observable instrument made again, and a gauge's observations of
		// one attribute set would replace each other.
		_, err := t.meter.Float64ObservableGauge("idempotency.oldest_inflight_start_timestamp", metric.WithUnit("s"),
			metric.WithDescription("When the oldest idempotency key in flight in the store was locked, in Unix seconds; absent when none is."),
			metric.WithFloat64Callback(t.observeStuck))
		if err != nil {
			return fmt.Errorf("idemotel: %w", err)
		}
	}
	t.stuck = append(t.stuck, instrument.NewOldestLock(store, interval))
	return nil
}

// observeStuck is the callback of the stuck-keys gauge: the oldest lock of
// ObserveStuckKeys's stores.
func (t *Telemetry) observeStuck(ctx context.Context, o metric.Float64Observer) error {
	t.stuckMu.Lock()
	stores := t.stuck[:len(t.stuck):len(t.stuck)] // appended to, never changed
	t.stuckMu.Unlock()
	var oldest time.Time
	for _, s := range stores {
		if at, ok := s.Read(ctx); ok && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	if !oldest.IsZero() {
		o.Observe(float64(oldest.UnixNano()) / 1e9)
	}
	return nil
}
