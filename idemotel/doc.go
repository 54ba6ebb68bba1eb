// Package idemotel reports idem's metrics through the OpenTelemetry metrics
// API and annotates each request's span. It uses the API only: the
// application chooses the SDK and the exporter.
//
// New makes a Telemetry on a MeterProvider (nil: otel.GetMeterProvider()):
// pass Telemetry.Observe as core.Config.Observer and wrap the store with
// Telemetry.InstrumentStore, as with idemprom; ObserveStuckKeys adds the
// gauge of the oldest lock in flight. Instruments are prefixed
// idempotency. and attributes follow OpenTelemetry's semantic conventions
// where they have one (http.route, rpc.method, error.type); routes past
// Options.MaxRoutes count as "_OTHER". Observe also sets, on the span of
// core.Event.Context, idempotency.outcome, idempotency.replay and
// idempotency.key (masked with core.MaskKey; never the scope), records
// Event.Err as an exception event, and leaves the span's status to the
// transport's instrumentation. The breaker gauge shows the state that any
// Engine on the Telemetry reported last: Engines on stores of their own
// want a Telemetry each, on MeterProviders of their own.
//
// See Example. [docs/metrics.md] lists the instruments and their attributes,
// and maps them to idemprom's names through a Prometheus exporter, so that
// idemprom's alert rules and dashboard apply.
//
// [docs/metrics.md]: https://github.com/idem-go/idem/blob/main/docs/metrics.md
package idemotel
