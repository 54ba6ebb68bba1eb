// Package idemprom exports idem's metrics to Prometheus.
//
// New registers a Collector: pass Collector.Observe as core.Config.Observer
// (outcomes, durations, fallbacks, the breaker's state) and wrap the store
// with Collector.InstrumentStore (store call durations and errors, requests
// in flight). Every metric is prefixed idempotency_; outcome, method, route,
// operation and state are the labels, never the key or the scope, and
// routes past Options.MaxRoutes count as route="_OTHER". One Collector
// serves any number of Engines, and New on a registry that already holds
// one made with the same Options returns it; its breaker gauge then shows the state that any of them
// reported last, so Engines on stores of their own want a Collector each
// (a registry each, or prometheus.WrapRegistererWith a label). NewStuckKeys
// reports the oldest lock in flight.
//
// See Example. [docs/metrics.md] lists the metrics and their labels, maps
// them to the names of the systems idem replaces, and explains the alert
// rules (alerts.yml, with promtool tests) and the Grafana dashboard
// (dashboards/idempotency.json) beside this file.
//
// [docs/metrics.md]: https://github.com/idem-go/idem/blob/main/docs/metrics.md
package idemprom
