package core_test

import (
	"net/http"
	"testing"

	"github.com/idem-go/idem/core"
)

// BenchmarkMiddleware measures the net/http middleware on the memory store
// against the bare handler, in process (no network), so the figures are the
// middleware's own cost. `make bench` prints each case as a ratio to bare.
func BenchmarkMiddleware(b *testing.B) {
	run := func(b *testing.B, h http.Handler, key func(i int) string) {
		q := newReusableRequest(key)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			q.serve(h)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, orderHandler(), nil) })
	b.Run("no-key", func(b *testing.B) {
		eng, _ := core.New(core.Config{})
		run(b, eng.Middleware(orderHandler()), nil)
	})
	b.Run("first-run", func(b *testing.B) {
		eng, _ := core.New(core.Config{Store: core.NewMemoryStore(b.N + 1)})
		run(b, eng.Middleware(orderHandler()), keys(b.N))
	})
	b.Run("replay", func(b *testing.B) {
		eng, _ := core.New(core.Config{})
		h := eng.Middleware(orderHandler())
		newReusableRequest(replayed).serve(h)
		run(b, h, replayed)
	})
}
