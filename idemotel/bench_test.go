package idemotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemotel"
)

var sinkObserver func(core.Event)

// BenchmarkObserve is the cost of one event on the OpenTelemetry SDK:
// "bare" calls an Observer that does nothing, the baseline of the others
// (make bench prints ratios); "span" also annotates a recording span.
func BenchmarkObserve(b *testing.B) {
	ev := core.Event{Context: context.Background(), Outcome: core.OutcomeReplay, Method: "POST",
		Route: "/orders/{id}", Key: "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d", Duration: time.Millisecond}
	run := func(b *testing.B, obs func(core.Event)) {
		sinkObserver = obs
		b.ReportAllocs()
		for b.Loop() {
			sinkObserver(ev)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, func(core.Event) {}) })
	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("idemotel", func(b *testing.B) { run(b, tel.Observe) })
	b.Run("span", func(b *testing.B) {
		ctx, span := sdktrace.NewTracerProvider().Tracer("bench").Start(context.Background(), "request")
		defer span.End()
		ev := ev
		ev.Context = ctx
		sinkObserver = tel.Observe
		b.ReportAllocs()
		for b.Loop() {
			sinkObserver(ev)
		}
	})
}
