package core_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	"github.com/idem-go/idem/core"
)

// Allocation budgets per request on the memory store, through the net/http
// middleware, measured with testing.AllocsPerRun. They include everything
// the middleware does (key parsing, reading the body, the fingerprint, the
// store, the record encoding, the replay headers) but not the server around
// it. Raise a budget only with a reason in the commit message.
const (
	replayAllocBudget   = 20
	firstRunAllocBudget = 24
)

// discardWriter is a minimal http.ResponseWriter that allocates nothing.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

var orderBody = []byte(`{"item":"book","qty":2}`)

func orderHandler() http.Handler {
	resp := []byte(`{"id":"ord_1","item":"book","qty":2}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(resp)
	})
}

// newRequests prepares n requests with the given keys, so that building
// them is not counted.
func newRequests(n int, key func(i int) string) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r, _ := http.NewRequest(http.MethodPost, "/orders", bytes.NewReader(orderBody))
		r.Pattern = "POST /orders"
		r.Header.Set("Content-Type", "application/json")
		if key != nil {
			r.Header.Set("Idempotency-Key", key(i))
		}
		reqs[i] = r
	}
	return reqs
}

func allocsPerRequest(t *testing.T, h http.Handler, reqs []*http.Request) float64 {
	w := &discardWriter{h: make(http.Header, 8)}
	i := 0
	return testing.AllocsPerRun(len(reqs)-1, func() {
		clear(w.h)
		h.ServeHTTP(w, reqs[i])
		i++
	})
}

func TestAllocationBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	eng, _ := core.New(core.Config{})
	h := eng.Middleware(orderHandler())
	const runs = 200

	first := allocsPerRequest(t, h, newRequests(runs+1, func(i int) string { return "first-" + strconv.Itoa(i) }))
	h.ServeHTTP(&discardWriter{h: http.Header{}}, newRequests(1, func(int) string { return "replayed" })[0])
	replay := allocsPerRequest(t, h, newRequests(runs+1, func(int) string { return "replayed" }))
	bare := allocsPerRequest(t, orderHandler(), newRequests(runs+1, nil))
	t.Logf("allocs/request: bare handler %.0f, first run %.0f, replay %.0f", bare, first, replay)
	if first > firstRunAllocBudget {
		t.Errorf("first run: %.0f allocs/request, budget %d", first, firstRunAllocBudget)
	}
	if replay > replayAllocBudget {
		t.Errorf("replay: %.0f allocs/request, budget %d", replay, replayAllocBudget)
	}
}
