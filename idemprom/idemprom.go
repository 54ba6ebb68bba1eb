package idemprom

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/instrument"
)

// DefaultRequestBuckets are the default buckets of
// idempotency_request_duration_seconds, in seconds.
var DefaultRequestBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// DefaultStoreBuckets are the default buckets of
// idempotency_store_operation_duration_seconds, in seconds: a store call
// takes well under a millisecond to tens of milliseconds.
var DefaultStoreBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// DefaultMaxRoutes is how many route label values a Collector keeps apart
// by default.
const DefaultMaxRoutes = 256

// otherRoute is the route label of requests past Options.MaxRoutes.
const otherRoute = "_OTHER"

// Options tunes a Collector. A nil *Options means the defaults.
type Options struct {
	// RequestBuckets of idempotency_request_duration_seconds.
	// Optional. Default: DefaultRequestBuckets.
	RequestBuckets []float64
	// StoreBuckets of idempotency_store_operation_duration_seconds.
	// Optional. Default: DefaultStoreBuckets.
	StoreBuckets []float64
	// MaxRoutes bounds the route label's values; further routes count as
	// route="_OTHER" (docs/metrics.md). Optional. Default: DefaultMaxRoutes.
	MaxRoutes int
}

// Collector holds idem's metrics (see the package doc). It is a
// prometheus.Collector, safe for concurrent use; one Collector may serve
// any number of Engines and stores.
type Collector struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	storeDur  *prometheus.HistogramVec
	storeErrs *prometheus.CounterVec
	inflight  prometheus.Gauge
	fallbacks prometheus.Counter
	breaker   *prometheus.GaugeVec

	ops [instrument.NumOps]opMetrics // resolved once: the store wrapper does no label lookup

	opts      Options // as New filled them in
	maxRoutes int
	mu        sync.RWMutex
	series    map[seriesKey]series // resolved once per label set: one lookup per event, not two
	routes    map[string]struct{}  // the route label values in series, at most maxRoutes
}

type seriesKey struct {
	outcome       core.Outcome
	method, route string
}

type series struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

type opMetrics struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// New returns a Collector registered on reg (none if reg is nil). If reg
// already holds a Collector made with the same Options, New returns that
// one, so that Engines built apart can share a registry; made with other
// Options, an error.
func New(reg prometheus.Registerer, opts *Options) (*Collector, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.RequestBuckets == nil {
		o.RequestBuckets = DefaultRequestBuckets
	}
	if o.StoreBuckets == nil {
		o.StoreBuckets = DefaultStoreBuckets
	}
	if o.MaxRoutes == 0 {
		o.MaxRoutes = DefaultMaxRoutes
	}
	if !increasing(o.RequestBuckets) || !increasing(o.StoreBuckets) {
		return nil, errBuckets
	}
	if o.MaxRoutes < 0 {
		return nil, errMaxRoutes
	}
	labels := []string{"outcome", "method", "route"}
	c := &Collector{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_requests_total",
			Help: "Requests with an idempotency key, by outcome (replay, stored, conflict, ...), method and route template.",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_request_duration_seconds",
			Help:    "Time from the start of a request with an idempotency key to its outcome; for stored and not_stored, the handler's time included.",
			Buckets: slices.Clone(o.RequestBuckets),
		}, labels),
		storeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_store_operation_duration_seconds",
			Help:    "Duration of the idempotency store's calls, by operation (acquire, complete, release, refresh).",
			Buckets: slices.Clone(o.StoreBuckets),
		}, []string{"operation"}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_store_errors_total",
			Help: "Idempotency store calls that failed, by operation; a key in flight, a lost lock or a quota refusal is no failure.",
		}, []string{"operation"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_inflight_requests",
			Help: "Requests of this process that hold their idempotency key's lock: their handler is running.",
		}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_store_fallbacks_total",
			Help: "Calls of a tiered store that one tier answered alone because the other failed, Redis or PostgreSQL.",
		}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idempotency_store_breaker_state",
			Help: "State of the idempotency store's circuit breaker: 1 for the current state (closed, open, half_open), 0 for the others.",
		}, []string{"state"}),
		opts:      o,
		maxRoutes: o.MaxRoutes,
		series:    make(map[seriesKey]series),
		routes:    make(map[string]struct{}),
	}
	c.setBreaker("closed")
	for op := range instrument.NumOps {
		c.ops[op] = opMetrics{
			duration: c.storeDur.WithLabelValues(op.String()),
			errors:   c.storeErrs.WithLabelValues(op.String()),
		}
	}
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if prev, ok := are.ExistingCollector.(*Collector); ok {
				if !sameOptions(prev.opts, o) {
					return nil, errOtherOptions
				}
				return prev, nil
			}
		}
		return nil, fmt.Errorf("idemprom: register: %w", err)
	}
	return c, nil
}

var (
	errBuckets      = errors.New("idemprom: buckets must be strictly increasing")
	errMaxRoutes    = errors.New("idemprom: negative MaxRoutes")
	errOtherOptions = errors.New("idemprom: the registry holds a Collector made with other Options")
)

func sameOptions(a, b Options) bool {
	return slices.Equal(a.RequestBuckets, b.RequestBuckets) && slices.Equal(a.StoreBuckets, b.StoreBuckets) && a.MaxRoutes == b.MaxRoutes
}

func increasing(b []float64) bool {
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			return false
		}
	}
	return len(b) > 0
}

// Observe counts e; use it as core.Config.Observer (Observer: c.Observe).
func (c *Collector) Observe(e core.Event) {
	switch e.Outcome { // events that are no request's outcome
	case core.OutcomeFallback:
		c.fallbacks.Inc()
		return
	case core.OutcomeBreaker:
		c.setBreaker(e.Breaker)
		return
	}
	s := c.seriesOf(seriesKey{e.Outcome, e.Method, e.Route})
	s.requests.Inc()
	s.duration.Observe(e.Duration.Seconds())
}

// seriesOf returns the series of k, its route counted as otherRoute once
// maxRoutes others are.
func (c *Collector) seriesOf(k seriesKey) series {
	c.mu.RLock()
	s, ok := c.series[k]
	if !ok {
		k = c.capped(k)
		s, ok = c.series[k]
	}
	c.mu.RUnlock()
	if ok {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k = c.capped(k); k.route != otherRoute {
		c.routes[k.route] = struct{}{}
	}
	if s, ok := c.series[k]; ok {
		return s
	}
	outcome := k.outcome.String()
	s = series{
		requests: c.requests.WithLabelValues(outcome, k.method, k.route),
		duration: c.duration.WithLabelValues(outcome, k.method, k.route),
	}
	c.series[k] = s
	return s
}

// capped returns k with otherRoute for a route that is not in c.routes
// when c.routes is full; c.mu is held.
func (c *Collector) capped(k seriesKey) seriesKey {
	if _, ok := c.routes[k.route]; ok || len(c.routes) < c.maxRoutes {
		return k
	}
	if k.method == k.route {
		k.method = otherRoute
	}
	k.route = otherRoute
	return k
}

var breakerStates = [...]string{"closed", "open", "half_open"} // Event.Breaker

func (c *Collector) setBreaker(state string) {
	for _, s := range breakerStates {
		v := 0.0
		if s == state {
			v = 1
		}
		c.breaker.WithLabelValues(s).Set(v)
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.metrics() {
		m.Collect(ch)
	}
}

func (c *Collector) metrics() [7]prometheus.Collector {
	return [...]prometheus.Collector{c.requests, c.duration, c.storeDur, c.storeErrs, c.inflight, c.fallbacks, c.breaker}
}
