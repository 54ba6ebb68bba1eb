package blackbox

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idem-go/idem/core/idemtest"
)

// The Fiber examples with FIBER_STREAM_BODY=1 (Fiber's StreamRequestBody):
// a keyed POST whose declared body is over 1 MiB (MaxBodyBytes) gets 413,
// and the request that follows its headers in the body's bytes, a complete
// POST /orders, never runs. Keyed requests within the bound still replay.
// A client sending a body over the bound reads the 413.
func TestExamplesStreamBodySmuggling(t *testing.T) {
	for _, fw := range []string{"fiber", "fiberv3"} {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, build(t, fw), "FIBER_STREAM_BODY=1")
			key, order := newKey(t), `{"item": "pen", "qty": 1}`
			wantStatus(t, "first", s.post("erin", key, order), http.StatusCreated)
			if r := s.post("erin", key, order); r.status != http.StatusCreated || r.header.Get("X-Idempotency-Replay") != "true" {
				t.Fatalf("replay with a streamed body: %d %v", r.status, r.header)
			}
			before := s.count()
			// fasthttp reads the first 8 KiB of a streamed body before the handlers run.
			first, more := idemtest.Smuggle(t, s.url, "/orders", `{"item": "smuggled", "qty": 1}`, 8<<10, 1<<20+1)
			if first != http.StatusRequestEntityTooLarge || len(more) != 0 {
				t.Fatalf("first response %d, then %v; want 413 and nothing more", first, more)
			}
			if n := s.count(); n != before {
				t.Fatalf("%d orders after the smuggling attempt, want %d: the smuggled request ran", n, before)
			}
			// net/http's client reads the answer while it sends the body: it
			// gets the 413, not a connection reset by a server that closed
			// with the body unread.
			large := `{"item": "pen", "qty": 1, "note": "` + strings.Repeat("x", 1<<20) + `"}`
			for i := range 20 {
				if r := s.post("erin", newKey(t), large); r.status != http.StatusRequestEntityTooLarge {
					t.Fatalf("a body over 1 MiB, request %d: %d, want 413", i, r.status)
				}
				if r := s.post("erin", "", large); r.status != http.StatusRequestEntityTooLarge {
					t.Fatalf("a body over 1 MiB without a key, request %d: %d, want 413", i, r.status)
				}
			}
		})
	}
}
