package idemotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem/core"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/idem-go/idem/idemotel"

// Bucket boundaries of the duration histograms, in seconds, as idemprom's
// (advisory: an SDK View overrides them).
var (
	requestBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	storeBuckets   = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// Telemetry records idem's metrics and annotates request spans (see the
// package doc). It is safe for concurrent use; one Telemetry may serve any
// number of Engines and stores.
type Telemetry struct {
	requests  metric.Int64Counter
	duration  metric.Float64Histogram
	storeDur  metric.Float64Histogram
	storeErrs metric.Int64Counter
	inflight  metric.Int64UpDownCounter
	fallbacks metric.Int64Counter
	breaker   metric.Int64Gauge

	ops    [core.NumStoreOps]opOptions
	states [len(breakerStates)]seriesOptions

	mu     sync.RWMutex
	series map[seriesKey]seriesOptions // attribute sets built once per label set
}

type seriesKey struct {
	outcome       core.Outcome
	method, route string
}

// Option slices, reused: passing them to Add and Record allocates nothing.
type seriesOptions struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

type opOptions = seriesOptions

// New returns a Telemetry whose instruments come from mp (nil means
// otel.GetMeterProvider()).
func New(mp metric.MeterProvider) (*Telemetry, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &Telemetry{series: make(map[seriesKey]seriesOptions)}
	var errs [7]error
	t.requests, errs[0] = m.Int64Counter("idempotency.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests with an idempotency key, by outcome (replay, stored, conflict, ...), method and route template."))
	t.duration, errs[1] = m.Float64Histogram("idempotency.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a request with an idempotency key to its outcome; for stored and not_stored, the handler's time included."),
		metric.WithExplicitBucketBoundaries(requestBuckets...))
	t.storeDur, errs[2] = m.Float64Histogram("idempotency.store.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the idempotency store's calls, by operation (acquire, complete, release, refresh)."),
		metric.WithExplicitBucketBoundaries(storeBuckets...))
	t.storeErrs, errs[3] = m.Int64Counter("idempotency.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Idempotency store calls that failed, by operation; a key in flight or a lost lock is no failure."))
	t.inflight, errs[4] = m.Int64UpDownCounter("idempotency.inflight_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests of this process that hold their idempotency key's lock: their handler is running."))
	t.fallbacks, errs[5] = m.Int64Counter("idempotency.store.fallbacks", metric.WithUnit("{request}"),
		metric.WithDescription("Requests that the fallback store served because the primary store failed."))
	t.breaker, errs[6] = m.Int64Gauge("idempotency.store.breaker.state",
		metric.WithDescription("State of the circuit breaker around the idempotency store: 1 for the current state (closed, open, half_open), 0 for the others."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	ctx := context.Background()
	for op := range core.NumStoreOps {
		t.ops[op] = options(attribute.NewSet(attribute.String("operation", op.String())))
		t.storeErrs.Add(ctx, 0, t.ops[op].add...) // every series from the start: rates need no first sample
	}
	t.fallbacks.Add(ctx, 0)
	t.inflight.Add(ctx, 0)
	for i, s := range breakerStates {
		t.states[i] = options(attribute.NewSet(attribute.String("state", s.String())))
	}
	t.setBreaker(ctx, core.BreakerClosed)
	return t, nil
}

func options(set attribute.Set) seriesOptions {
	o := metric.WithAttributeSet(set)
	return seriesOptions{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// Observe records e and annotates the span of e.Context, if it records,
// with idempotency.outcome, idempotency.replay and idempotency.key
// (masked), and e.Err as an exception event. Use it as
// core.Config.Observer (Observer: t.Observe).
func (t *Telemetry) Observe(e core.Event) {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	switch e.Outcome { // events that are no request's outcome
	case core.OutcomeFallback:
		t.fallbacks.Add(ctx, 1)
		return
	case core.OutcomeBreaker:
		t.setBreaker(ctx, e.Breaker)
		return
	}
	k := seriesKey{e.Outcome, e.Method, e.Route}
	t.mu.RLock()
	o, ok := t.series[k]
	t.mu.RUnlock()
	if !ok {
		o = options(attribute.NewSet(
			attribute.String("outcome", e.Outcome.String()),
			attribute.String("method", e.Method),
			attribute.String("route", e.Route)))
		t.mu.Lock()
		t.series[k] = o
		t.mu.Unlock()
	}
	t.requests.Add(ctx, 1, o.add...)
	t.duration.Record(ctx, e.Duration.Seconds(), o.record...)

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		attribute.String("idempotency.outcome", e.Outcome.String()),
		attribute.Bool("idempotency.replay", e.Outcome == core.OutcomeReplay),
	)
	if e.Key != "" {
		span.SetAttributes(attribute.String("idempotency.key", core.MaskKey(e.Key)))
	}
	if e.Err != nil {
		span.RecordError(e.Err)
	}
}

var breakerStates = [...]core.BreakerState{core.BreakerClosed, core.BreakerOpen, core.BreakerHalfOpen}

func (t *Telemetry) setBreaker(ctx context.Context, state core.BreakerState) {
	for i, s := range breakerStates {
		var v int64
		if s == state {
			v = 1
		}
		t.breaker.Record(ctx, v, t.states[i].record...)
	}
}
