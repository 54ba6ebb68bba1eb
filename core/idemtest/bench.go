package idemtest

import (
	"testing"

	"github.com/idem-go/idem/core"
)

// BenchEngine returns an Engine for an adapter's benchmarks: on a memory
// store with room for every key of b (a full store would fail open, and the
// benchmark would measure the unprotected path), failing b on any store
// error.
func BenchEngine(b *testing.B) *core.Engine {
	b.Helper()
	eng, err := core.New(core.Config{
		Store: core.NewMemoryStore(b.N + 2),
		Observer: func(ev core.Event) {
			if ev.Outcome == core.OutcomeStoreError {
				b.Error(ev.Err)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return eng
}
