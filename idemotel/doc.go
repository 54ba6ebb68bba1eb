// Package idemotel reports idem's metrics through the OpenTelemetry metrics
// API and annotates each request's span. It uses the API only: the
// application chooses the SDK and the exporter.
//
//	tel, err := idemotel.New(nil) // otel.GetMeterProvider()
//	...
//	eng, err := core.New(core.Config{
//		Store:    tel.InstrumentStore(redislock.New(rdb, nil)),
//		Observer: tel.Observe,
//	})
//
// Instruments (meter ScopeName):
//
//	idempotency.requests{outcome,method,route}              counter, {request}
//	idempotency.request.duration{outcome,method,route}      histogram, s
//	idempotency.store.operation.duration{operation}         histogram, s
//	idempotency.store.errors{operation}                     counter, {error}
//	idempotency.inflight_requests                           updowncounter, {request}
//	idempotency.store.fallbacks                             counter, {request}
//	idempotency.store.breaker.state{state}                  gauge
//
// They are idemprom's metrics: an OpenTelemetry Prometheus exporter names
// them idempotency_requests_total and so on, with the same labels, so the
// alert rules of idemprom (idemprom/alerts.yml) apply unchanged. The store
// metrics and the in-flight count need InstrumentStore; the rest Observe,
// where events that are no request's count fallbacks (core.OutcomeFallback)
// and set the breaker's state (core.OutcomeBreaker).
// See docs/metrics.md.
//
// Observe also sets, on the span of core.Event.Context (the request's, as
// an otelhttp or otelgrpc middleware before idem starts it), the attributes
// idempotency.outcome, idempotency.replay and idempotency.key (masked with
// core.MaskKey; never the scope), and records Event.Err as an exception
// event. It leaves the span's status to the transport's instrumentation.
package idemotel
