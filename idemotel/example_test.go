package idemotel_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemotel"
)

func Example() {
	// The application's SDK: here a reader and a span recorder to print
	// what was recorded; in production, exporters of your choice.
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("app")

	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{Store: tel.InstrumentStore(core.NewMemoryStore(0)), Observer: tel.Observe})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	// A tracing middleware before idem (otelhttp.NewHandler, say).
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), "POST /orders")
		defer span.End()
		mux.ServeHTTP(w, r.WithContext(ctx))
	})

	for range 2 { // a client retries with the same key
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", "9b2f8c1e-3d4a-4f6b-8c7d-1e2f3a4b5c6d")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	for _, s := range spans.Ended() {
		fmt.Print(s.Name())
		for _, a := range s.Attributes() {
			fmt.Printf(" %s=%s", a.Key, a.Value.String())
		}
		fmt.Println()
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "idempotency.requests" {
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := p.Attributes.Value("idempotency.outcome")
				fmt.Println(m.Name, outcome.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// POST /orders idempotency.outcome=stored idempotency.replay=false idempotency.key=9b2f****5c6d
	// POST /orders idempotency.outcome=replay idempotency.replay=true idempotency.key=9b2f****5c6d
	// idempotency.requests stored 1
	// idempotency.requests replay 1
}
