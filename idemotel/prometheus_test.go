package idemotel_test

import (
	"context"
	"fmt"
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
// exporter, as configured by default: the series are idemprom's, names,
// types and labels, so its alert rules apply (the exporter's otel_scope_*
// labels aside).
func TestPrometheusNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)))
	if err != nil {
		t.Fatal(err)
	}
	tel.Observe(core.Event{Outcome: core.OutcomeStored, Method: "POST", Route: "/orders", Duration: time.Millisecond})
	s := tel.InstrumentStore(core.NewMemoryStore(0))
	s.Acquire(context.Background(), "k", time.Minute)

	want := map[string]string{
		"idempotency_requests_total":                   "COUNTER [method outcome route]",
		"idempotency_request_duration_seconds":         "HISTOGRAM [method outcome route]",
		"idempotency_store_operation_duration_seconds": "HISTOGRAM [operation]",
		"idempotency_store_errors_total":               "COUNTER [operation]",
		"idempotency_inflight_requests":                "GAUGE []",
		"idempotency_store_fallbacks_total":            "COUNTER []",
		"idempotency_store_breaker_state":              "GAUGE [state]",
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if !strings.HasPrefix(l.GetName(), "otel_scope_") {
				labels = append(labels, l.GetName())
			}
		}
		sort.Strings(labels)
		got[mf.GetName()] = fmt.Sprintf("%s %v", mf.GetType(), labels)
		if mf.GetType().String() == "HISTOGRAM" {
			if n := len(mf.GetMetric()[0].GetHistogram().GetBucket()); n != 11 && n != 13 {
				t.Errorf("%s: %d buckets, want idemprom's (11 or 13)", mf.GetName(), n)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("exported families:\n got %v\nwant %v", got, want)
	}
}
