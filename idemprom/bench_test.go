package idemprom_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemprom"
)

var sinkObserver func(core.Event)

// BenchmarkObserve is the cost of one event: "bare" calls an Observer that
// does nothing, the baseline of the others (make bench prints ratios).
func BenchmarkObserve(b *testing.B) {
	ev := core.Event{Outcome: core.OutcomeReplay, Method: "POST", Route: "/orders/{id}", Key: "k", Duration: time.Millisecond}
	run := func(b *testing.B, obs func(core.Event)) {
		sinkObserver = obs
		b.ReportAllocs()
		for b.Loop() {
			sinkObserver(ev)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, func(core.Event) {}) })
	b.Run("idemprom", func(b *testing.B) {
		m, _ := idemprom.New(nil, nil)
		run(b, m.Observe)
	})
}

// BenchmarkMiddleware is the net/http middleware on the memory store, in
// process: "bare" without metrics, "observe" with Collector.Observe,
// "instrumented" with the store wrapped by InstrumentStore too.
func BenchmarkMiddleware(b *testing.B) {
	resp := []byte(`{"id":"ord_1"}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write(resp)
	})
	for _, first := range []bool{false, true} {
		name := "replay"
		if first {
			name = "first-run"
		}
		b.Run(name, func(b *testing.B) {
			for _, variant := range []string{"bare", "observe", "instrumented"} {
				b.Run(variant, func(b *testing.B) {
					m, _ := idemprom.New(nil, nil)
					cfg := core.Config{Store: core.NewMemoryStore(b.N + 2)}
					if variant != "bare" {
						cfg.Observer = m.Observe
					}
					if variant == "instrumented" {
						cfg.Store = m.InstrumentStore(cfg.Store)
					}
					eng, _ := core.New(cfg)
					serve := eng.Middleware(h).ServeHTTP
					r, _ := http.NewRequest(http.MethodPost, "/orders", nil)
					body := &rewindBody{}
					payload := []byte(`{"item":"book","qty":2}`)
					r.ContentLength = int64(len(payload))
					w := &discardWriter{h: http.Header{}}
					key := []string{"bench-replay"}
					r.Header["Idempotency-Key"] = key
					buf := make([]byte, 0, 32)
					b.ReportAllocs()
					b.ResetTimer()
					// A b.N loop, not b.Loop: the store above is sized from
					// b.N, which b.Loop leaves at 1 during the setup (the
					// store then fills after two first runs).
					for i := 0; i < b.N; i++ {
						if first {
							key[0] = string(strconv.AppendInt(append(buf[:0], "bench-"...), int64(i), 10))
						}
						body.Reset(payload)
						r.Body = body
						clear(w.h)
						serve(w, r)
						if w.status != http.StatusCreated {
							b.Fatalf("status %d", w.status)
						}
					}
				})
			}
		})
	}
}

type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }

type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
