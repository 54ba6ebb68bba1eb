package core_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"testing"

	"github.com/idem-go/idem/core"
)

// Allocation budgets per request on the memory store, through the net/http
// middleware, measured with testing.AllocsPerRun. They include everything
// the middleware does (key parsing, reading the body, the fingerprint, the
// store, the record encoding, the replay headers, the contexts that bound
// store calls) but not the server around it; the race detector adds
// raceAllocs. Raise a budget only with a reason in the commit message.
const (
	replayAllocBudget   = 8
	firstRunAllocBudget = 12
	noKeyAllocBudget    = 1
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
	// As the examples answer: about 100 bytes.
	resp := []byte(`{"id":"ord_2J8Hq3kVx9","item":"book","qty":2,"amount":4200,"currency":"EUR","status":"created"}` + "\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(resp)
	})
}

// rewindBody is a request body that can be read again, so one request
// serves every iteration of a benchmark or an allocation count.
type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }

// reusableRequest sends the same order again and again, each time with the
// key key(i) (none if key is nil), without allocating.
type reusableRequest struct {
	r    *http.Request
	body *rewindBody
	w    *discardWriter
	key  func(i int) string
	i    int
}

func newReusableRequest(key func(i int) string) *reusableRequest {
	r, _ := http.NewRequest(http.MethodPost, "/orders", nil)
	r.Pattern = "POST /orders"
	r.Header.Set("Content-Type", "application/json")
	if key != nil {
		r.Header.Set("Idempotency-Key", "")
	}
	return &reusableRequest{r: r, body: &rewindBody{}, w: &discardWriter{h: make(http.Header, 8)}, key: key}
}

func (q *reusableRequest) serve(h http.Handler) {
	q.body.Reset(orderBody)
	q.r.Body = q.body
	q.r.ContentLength = int64(len(orderBody))
	if q.key != nil {
		q.r.Header["Idempotency-Key"][0] = q.key(q.i)
	}
	q.i++
	clear(q.w.h)
	h.ServeHTTP(q.w, q.r)
}

// keys returns n distinct keys of a UUID's length, made before the
// measurement.
func keys(n int) func(i int) string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", i)
	}
	return func(i int) string { return ks[i] }
}

func replayed(int) string { return "replayed" }

func TestAllocationBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	eng, _ := core.New(core.Config{})
	h := eng.Middleware(orderHandler())
	const runs = 200
	count := func(h http.Handler, key func(int) string) float64 {
		q := newReusableRequest(key)
		return testing.AllocsPerRun(runs, func() { q.serve(h) })
	}
	warm := newReusableRequest(func(i int) string { return "warm-" + strconv.Itoa(i) })
	for range 100 { // every refresher has its timer, and the store's lock tokens their length
		warm.serve(h)
	}
	first := count(h, keys(runs+1))
	newReusableRequest(replayed).serve(h)
	replay := count(h, replayed)
	noKey := count(h, nil)
	bare := count(orderHandler(), nil)
	t.Logf("allocs/request: bare handler %.0f, no key %.0f, first run %.0f, replay %.0f", bare, noKey, first, replay)
	if first > firstRunAllocBudget+raceAllocs {
		t.Errorf("first run: %.0f allocs/request, budget %d", first, firstRunAllocBudget+raceAllocs)
	}
	if replay > replayAllocBudget+raceAllocs {
		t.Errorf("replay: %.0f allocs/request, budget %d", replay, replayAllocBudget+raceAllocs)
	}
	if noKey > noKeyAllocBudget {
		t.Errorf("no key: %.0f allocs/request, budget %d", noKey, noKeyAllocBudget)
	}
}

// A declared body length is not allocated before the bytes arrive: the
// buffer starts at 64 KiB and doubles as bytes come, so a client that
// declares a large body and sends little holds about twice what it sent.
// A body that does come whole, declared or not, costs about twice its size
// in buffers.
func TestBodyBufferFollowsTheBytes(t *testing.T) {
	eng, _ := core.New(core.Config{MaxBodyBytes: 8 << 20})
	perRequest := func(body []byte, declared int64) uint64 {
		const n = 10
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			f, resp := eng.Begin(&core.Request{
				Method:        http.MethodPost,
				Path:          "/upload",
				Header:        http.Header{"Idempotency-Key": {"body-" + strconv.Itoa(len(body)) + "-" + strconv.Itoa(i)}},
				Body:          bytes.NewReader(body),
				ContentLength: declared,
			})
			if f == nil {
				t.Fatalf("Begin: %+v", resp)
			}
			f.Abort()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	for _, tc := range []struct {
		name     string
		sent     int
		declared int64
		atMost   uint64
	}{
		{"2 bytes of 8 MiB declared", 2, 8 << 20, 128 << 10},
		{"64 KiB + 1 of 8 MiB declared", 64<<10 + 1, 8 << 20, 512 << 10},
		{"8 MiB - 1 whole", 8<<20 - 1, 8<<20 - 1, 5 * 8 << 20 / 2},
		{"8 MiB whole, the limit", 8 << 20, 8 << 20, 5 * 8 << 20 / 2},
		{"8 MiB undeclared", 8 << 20, -1, 5 * 8 << 20 / 2},
	} {
		if got := perRequest(bytes.Repeat([]byte("x"), tc.sent), tc.declared); got > tc.atMost {
			t.Errorf("%s: %d bytes allocated per request, want at most %d", tc.name, got, tc.atMost)
		}
	}
}
