package core_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/idem-go/idem/core"
)

// BenchmarkMiddleware measures the net/http middleware on the memory store
// against the bare handler, in process (no network), so the figures are the
// middleware's own cost. `make bench` prints each case as a ratio to bare.
func BenchmarkMiddleware(b *testing.B) {
	run := func(b *testing.B, h http.Handler, key func(i int) string) {
		reqs := newRequests(b.N, key)
		w := &discardWriter{h: make(http.Header, 8)}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			clear(w.h)
			h.ServeHTTP(w, reqs[i])
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, orderHandler(), nil) })
	b.Run("no-key", func(b *testing.B) {
		eng, _ := core.New(core.Config{})
		run(b, eng.Middleware(orderHandler()), nil)
	})
	b.Run("first-run", func(b *testing.B) {
		eng, _ := core.New(core.Config{Store: core.NewMemoryStore(1 << 24)})
		run(b, eng.Middleware(orderHandler()), func(i int) string { return "k-" + strconv.Itoa(i) })
	})
	b.Run("replay", func(b *testing.B) {
		eng, _ := core.New(core.Config{})
		h := eng.Middleware(orderHandler())
		h.ServeHTTP(&discardWriter{h: http.Header{}}, newRequests(1, func(int) string { return "replayed" })[0])
		run(b, h, func(int) string { return "replayed" })
	})
}
