package idemprom_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemprom"
)

func Example() {
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	m, err := idemprom.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := core.New(core.Config{
		Store:    m.InstrumentStore(core.NewMemoryStore(0)),
		Observer: m.Observe,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 2 { // a client retries with the same key
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", "8e5d1c0a-order-1")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for sc := bufio.NewScanner(w.Body); sc.Scan(); {
		if line := sc.Text(); strings.HasPrefix(line, "idempotency_requests_total") || strings.HasPrefix(line, "idempotency_inflight") {
			fmt.Println(line)
		}
	}
	// Output:
	// idempotency_inflight_requests 0
	// idempotency_requests_total{method="POST",outcome="replay",route="/orders"} 1
	// idempotency_requests_total{method="POST",outcome="stored",route="/orders"} 1
}
