// Package idemprom exports idem's metrics to Prometheus.
//
// A Collector counts the Engine's outcomes (Collector.Observe, as
// core.Config.Observer) and times the store's calls (InstrumentStore):
//
//	m, err := idemprom.New(prometheus.DefaultRegisterer, nil)
//	...
//	eng, err := core.New(core.Config{
//		Store:    m.InstrumentStore(redislock.New(rdb, nil)),
//		Observer: m.Observe,
//	})
//
// The metrics, all prefixed idempotency_ (the domain, as the stores'
// idempotency: keys; an operator need not know the library's name):
//
//	idempotency_requests_total{outcome,method,route}                 counter
//	idempotency_request_duration_seconds{outcome,method,route}       histogram
//	idempotency_store_operation_duration_seconds{operation}          histogram
//	idempotency_store_errors_total{operation}                        counter
//	idempotency_inflight_requests                                    gauge
//	idempotency_store_fallbacks_total                                counter
//	idempotency_store_breaker_state{state}                           gauge
//
// outcome is core.Outcome's name (replay, stored, not_stored, conflict,
// mismatch, invalid_key, too_large, bad_body, store_error, lock_lost);
// route is the route template, so mount the middleware inside the router
// (core.Engine.Middleware): without a template the path stands in, one
// series per URL. The key and the scope are never labels. Events that are
// no request's count fallbacks (core.OutcomeFallback) and set the breaker's
// state (core.OutcomeBreaker; the last reported wins when Engines with
// breakers of their own share a Collector). The store metrics and the
// in-flight gauge need InstrumentStore; the rest Observe.
//
// docs/metrics.md maps each metric to the names of the systems idem
// replaces (hits, misses, conflicts, fallbacks, retries), and alerts.yml
// beside this file holds alert rules over them, with promtool tests.
//
// One Collector serves any number of Engines: pass m.Observe to each. New
// on a registry that already holds a Collector returns that Collector.
package idemprom
