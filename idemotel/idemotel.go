package idemotel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/idem-go/idem/idemotel"

// DefaultMaxRoutes is how many route values a Telemetry keeps apart by
// default.
const DefaultMaxRoutes = 256

// otherRoute is the http.route (or rpc.method) of requests past
// Options.MaxRoutes: OpenTelemetry's value for a method it does not know.
const otherRoute = "_OTHER"

// Options tunes a Telemetry. A nil *Options means the defaults.
type Options struct {
	// MaxRoutes bounds the values of http.route (rpc.method for gRPC);
	// further routes count as "_OTHER" (docs/metrics.md).
	// Optional. Default: DefaultMaxRoutes.
	MaxRoutes int
}

// Attributes of idem's own, where OpenTelemetry's semantic conventions
// have none (docs/metrics.md).
const (
	outcomeKey   = attribute.Key("idempotency.outcome")         // core.Outcome's name
	operationKey = attribute.Key("idempotency.store.operation") // instrument.Op's name
	stateKey     = attribute.Key("idempotency.breaker.state")   // core.Event.Breaker
	// Of a call neither HTTP nor gRPC (core.Event.Transport).
	transportKey = attribute.Key("idempotency.transport")
	methodKey    = attribute.Key("idempotency.method")
	routeKey     = attribute.Key("idempotency.route")
)

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

	ops    [instrument.NumOps]opOptions
	failed [instrument.NumOps][len(storeErrorTypes)]opOptions // ops with error.type
	states [len(breakerStates)]seriesOptions

	meter     metric.Meter // for ObserveStuckKeys
	stuckMu   sync.Mutex
	stuck     []*instrument.OldestLock // ObserveStuckKeys's stores; the gauge is made with the first
	maxRoutes int
	mu        sync.RWMutex
	series    map[seriesKey]seriesOptions // attribute sets built once per label set
	routes    map[string]struct{}         // the routes in series, at most maxRoutes
}

type seriesKey struct {
	outcome                  core.Outcome
	transport, method, route string
}

// Option slices, reused: passing them to Add and Record allocates nothing.
type seriesOptions struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

type opOptions = seriesOptions

// New returns a Telemetry whose instruments come from mp (nil means
// otel.GetMeterProvider()).
func New(mp metric.MeterProvider, opts *Options) (*Telemetry, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxRoutes == 0 {
		o.MaxRoutes = DefaultMaxRoutes
	}
	if o.MaxRoutes < 0 {
		return nil, errMaxRoutes
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &Telemetry{meter: m, maxRoutes: o.MaxRoutes, series: make(map[seriesKey]seriesOptions), routes: make(map[string]struct{})}
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
		metric.WithDescription("Idempotency store calls that failed, by operation; a key in flight, a lost lock or a quota refusal is no failure."))
	t.inflight, errs[4] = m.Int64UpDownCounter("idempotency.inflight_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests of this process that hold their idempotency key's lock: their handler is running."))
	t.fallbacks, errs[5] = m.Int64Counter("idempotency.store.fallbacks", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of a tiered store that one tier answered alone because the other failed, Redis or PostgreSQL."))
	t.breaker, errs[6] = m.Int64Gauge("idempotency.store.breaker.state",
		metric.WithDescription("State of the idempotency store's circuit breaker: 1 for the current state (closed, open, half_open), 0 for the others."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	ctx := context.Background()
	for op := range instrument.NumOps {
		t.ops[op] = options(attribute.NewSet(operationKey.String(op.String())))
		t.storeErrs.Add(ctx, 0, t.ops[op].add...) // every series from the start: rates need no first sample
		for i, et := range storeErrorTypes {
			t.failed[op][i] = options(attribute.NewSet(operationKey.String(op.String()), semconv.ErrorTypeKey.String(et)))
		}
	}
	t.fallbacks.Add(ctx, 0)
	t.inflight.Add(ctx, 0)
	for i, s := range breakerStates {
		t.states[i] = options(attribute.NewSet(stateKey.String(s)))
	}
	t.setBreaker(ctx, "closed")
	return t, nil
}

var errMaxRoutes = errors.New("idemotel: negative MaxRoutes")

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
	o := t.seriesOf(seriesKey{e.Outcome, e.Transport, e.Method, e.Route})
	t.requests.Add(ctx, 1, o.add...)
	t.duration.Record(ctx, e.Duration.Seconds(), o.record...)

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		outcomeKey.String(e.Outcome.String()),
		attribute.Bool("idempotency.replay", e.Outcome == core.OutcomeReplay),
	)
	if e.Key != "" {
		span.SetAttributes(attribute.String("idempotency.key", core.MaskKey(e.Key)))
	}
	if e.Err != nil {
		span.RecordError(e.Err)
	}
}

// seriesOf returns the options of k's series, its route counted as
// otherRoute once maxRoutes others are.
func (t *Telemetry) seriesOf(k seriesKey) seriesOptions {
	t.mu.RLock()
	o, ok := t.series[k]
	if !ok {
		k = t.capped(k)
		o, ok = t.series[k]
	}
	t.mu.RUnlock()
	if ok {
		return o
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if k = t.capped(k); k.route != otherRoute {
		t.routes[k.route] = struct{}{}
	}
	if o, ok := t.series[k]; ok {
		return o
	}
	o = options(requestAttributes(k))
	t.series[k] = o
	return o
}

// capped returns k with otherRoute for a route that is not in t.routes
// when t.routes is full; t.mu is held.
func (t *Telemetry) capped(k seriesKey) seriesKey {
	if _, ok := t.routes[k.route]; ok || len(t.routes) < t.maxRoutes {
		return k
	}
	if k.method == k.route { // a gRPC full method
		k.method = otherRoute
	}
	k.route = otherRoute
	return k
}

// requestAttributes are the attributes of a request's series: its outcome;
// http.request.method and http.route over HTTP, rpc.system.name and
// rpc.method over gRPC, idempotency.transport, .method and .route (those
// set) over any other; and error.type, the outcome's name, when idem
// refused or failed the request.
func requestAttributes(k seriesKey) attribute.Set {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, outcomeKey.String(k.outcome.String()))
	switch k.transport {
	case "http":
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(k.method), semconv.HTTPRoute(k.route))
	case "grpc":
		attrs = append(attrs, semconv.RPCSystemNameGRPC, semconv.RPCMethod(strings.TrimPrefix(k.method, "/")))
	default:
		for _, a := range [...]attribute.KeyValue{transportKey.String(k.transport), methodKey.String(k.method), routeKey.String(k.route)} {
			if a.Value.AsString() != "" {
				attrs = append(attrs, a)
			}
		}
	}
	switch k.outcome {
	case core.OutcomeReplay, core.OutcomeStored, core.OutcomeNotStored: // the handler's answer, or its replay
	default:
		attrs = append(attrs, semconv.ErrorTypeKey.String(k.outcome.String()))
	}
	return attribute.NewSet(attrs...)
}

var breakerStates = [...]string{"closed", "open", "half_open"} // Event.Breaker

func (t *Telemetry) setBreaker(ctx context.Context, state string) {
	for i, s := range breakerStates {
		var v int64
		if s == state {
			v = 1
		}
		t.breaker.Record(ctx, v, t.states[i].record...)
	}
}
