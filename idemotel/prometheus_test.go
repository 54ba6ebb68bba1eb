package idemotel_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemotel"
)

// TestPrometheusNames exports through the OpenTelemetry Prometheus
// exporter, as configured by default: idemprom's metric names and types,
// with OpenTelemetry's attribute names as labels; the relabelling of
// docs/metrics.md (relabel below) gives them idemprom's label names, so
// that its alert rules and dashboard apply (the exporter's otel_scope_*
// labels aside).
func TestPrometheusNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), nil)
	if err != nil {
		t.Fatal(err)
	}
	tel.Observe(core.Event{Outcome: core.OutcomeStored, Transport: "http", Method: "POST", Route: "/orders", Duration: time.Millisecond})
	tel.Observe(core.Event{Outcome: core.OutcomeConflict, Transport: "grpc", Method: "/shop.v1.Orders/Create", Route: "/shop.v1.Orders/Create"})
	tel.Observe(core.Event{Outcome: core.OutcomeReplay, Transport: "kafka", Method: "consume", Route: "orders"})
	s := tel.InstrumentStore(core.NewMemoryStore(0))
	s.Acquire(context.Background(), "k", time.Minute)
	if err := tel.ObserveStuckKeys(s.(core.Admin), 0); err != nil {
		t.Fatal(err)
	}

	exported := map[string]string{
		"idempotency_requests_total": "COUNTER [error_type idempotency_outcome rpc_method rpc_system_name]" +
			" [http_request_method http_route idempotency_outcome]" +
			" [idempotency_method idempotency_outcome idempotency_route idempotency_transport]",
		"idempotency_request_duration_seconds": "HISTOGRAM [error_type idempotency_outcome rpc_method rpc_system_name]" +
			" [http_request_method http_route idempotency_outcome]" +
			" [idempotency_method idempotency_outcome idempotency_route idempotency_transport]",
		"idempotency_store_operation_duration_seconds":        "HISTOGRAM [idempotency_store_operation]",
		"idempotency_store_errors_total":                      "COUNTER [idempotency_store_operation]",
		"idempotency_inflight_requests":                       "GAUGE []",
		"idempotency_store_fallbacks_total":                   "COUNTER []",
		"idempotency_store_breaker_state":                     "GAUGE [idempotency_breaker_state]",
		"idempotency_oldest_inflight_start_timestamp_seconds": "GAUGE []",
	}
	relabelled := map[string]string{
		"idempotency_requests_total":                          "COUNTER [method outcome route]",
		"idempotency_request_duration_seconds":                "HISTOGRAM [method outcome route]",
		"idempotency_store_operation_duration_seconds":        "HISTOGRAM [operation]",
		"idempotency_store_errors_total":                      "COUNTER [operation]",
		"idempotency_inflight_requests":                       "GAUGE []",
		"idempotency_store_fallbacks_total":                   "COUNTER []",
		"idempotency_store_breaker_state":                     "GAUGE [state]",
		"idempotency_oldest_inflight_start_timestamp_seconds": "GAUGE []",
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got, gotRelabelled := map[string]string{}, map[string]string{}
	for _, mf := range mfs {
		var names, mapped []string
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "otel_scope_") {
					labels[l.GetName()] = l.GetValue()
				}
			}
			names = append(names, fmt.Sprint(sortedNames(labels, nil)))
			mapped = append(mapped, fmt.Sprint(sortedNames(relabel(labels), prometheusLabels)))
		}
		sort.Strings(names) // one of each set of label names
		sort.Strings(mapped)
		names, mapped = slices.Compact(names), slices.Compact(mapped)
		got[mf.GetName()] = mf.GetType().String() + " " + strings.Join(names, " ")
		gotRelabelled[mf.GetName()] = mf.GetType().String() + " " + strings.Join(mapped, " ")
		if mf.GetType().String() == "HISTOGRAM" {
			if n := len(mf.GetMetric()[0].GetHistogram().GetBucket()); n != 11 && n != 13 {
				t.Errorf("%s: %d buckets, want idemprom's (11 or 13)", mf.GetName(), n)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(exported) {
		t.Errorf("exported families:\n got %v\nwant %v", got, exported)
	}
	if fmt.Sprint(gotRelabelled) != fmt.Sprint(relabelled) {
		t.Errorf("relabelled families (idemprom's labels):\n got %v\nwant %v", gotRelabelled, relabelled)
	}
}

// prometheusLabels are idemprom's label names.
var prometheusLabels = map[string]bool{"outcome": true, "method": true, "route": true, "operation": true, "state": true}

// sortedNames returns the names of labels, only those in keep unless it is nil.
func sortedNames(labels map[string]string, keep map[string]bool) []string {
	var names []string
	for n := range labels {
		if keep == nil || keep[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// relabel applies the metric_relabel_configs of docs/metrics.md as
// Prometheus does (regular expressions anchored at both ends): a labelmap,
// then rpc_method copied to method and route with its leading "/" back.
func relabel(labels map[string]string) map[string]string {
	labelmap := regexp.MustCompile(`^(?s:idempotency_(outcome|method|route)|idempotency_store_(operation)|idempotency_breaker_(state)|` +
		`http_request_(method)|http_(route))$`)
	out := map[string]string{}
	for n, v := range labels {
		out[n] = v
		if labelmap.MatchString(n) {
			out[labelmap.ReplaceAllString(n, "$1$2$3$4$5")] = v
		}
	}
	if m := out["rpc_method"]; m != "" {
		out["method"], out["route"] = "/"+m, "/"+m
	}
	return out
}
