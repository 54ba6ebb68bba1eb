package idemprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemprom"
)

var errDown = errors.New("test: store down")

// downStore fails every call.
type downStore struct{}

func (downStore) Acquire(context.Context, string, time.Duration) ([]byte, string, error) {
	return nil, "", errDown
}
func (downStore) Complete(context.Context, string, string, []byte, time.Duration) error {
	return errDown
}
func (downStore) Release(context.Context, string, string) error { return errDown }
func (downStore) Refresh(context.Context, string, string, time.Duration) error {
	return errDown
}

// orders is the test's handler: it counts its runs, answers 500 for the
// item "boom", and, for the item "block", tells entered and waits for
// release.
type orders struct {
	runs    atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func newOrders() *orders {
	return &orders{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	switch {
	case strings.Contains(string(body), "boom"):
		w.WriteHeader(http.StatusInternalServerError)
		return
	case strings.Contains(string(body), "block"):
		o.entered <- struct{}{}
		<-o.release
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run":%d}`, o.runs.Load())
}

func send(h http.Handler, method, path, key, body string) int {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func newEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// histCounts returns the sample count of each series of the histogram name,
// by its labels ("method=POST,outcome=stored,route=/orders").
func histCounts(t *testing.T, g prometheus.Gatherer, name string) map[string]uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			counts[strings.Join(labels, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	return counts
}

func wantCounts(t *testing.T, name string, got, want map[string]uint64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s sample counts:\n got %v\nwant %v", name, got, want)
	}
}

// TestScriptedRequests drives two Engines that share one Collector through
// the net/http middleware: every outcome the HTTP contract names, then each
// metric read back at its exact value.
func TestScriptedRequests(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := idemprom.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	app := newOrders()
	mux := http.NewServeMux()
	mem := newEngine(t, core.Config{Store: m.InstrumentStore(core.NewMemoryStore(0)), Observer: m.Observe})
	mux.Handle("POST /orders", mem.Middleware(app))
	down := newEngine(t, core.Config{Store: m.InstrumentStore(downStore{}), Observer: m.Observe})
	mux.Handle("PUT /orders/{id}", down.Middleware(app))

	steps := []struct {
		method, path, key, body string
		status                  int
	}{
		{"POST", "/orders", "key-00000001", `{"item":"book"}`, 201},   // stored
		{"POST", "/orders", "key-00000001", `{"item":"book"}`, 201},   // replay
		{"POST", "/orders", "key-00000001", `{"item":"pen"}`, 422},    // mismatch
		{"POST", "/orders", "", `{"item":"book"}`, 400},               // invalid_key: empty
		{"POST", "/orders", strings.Repeat("k", 256), `{}`, 400},      // invalid_key: too long
		{"POST", "/orders", "key-00000003", `{"item":"boom"}`, 500},   // not_stored
		{"PUT", "/orders/7", "key-00000004", `{"item":"book"}`, 201},  // store_error, run unprotected
		{"POST", "/orders", "key-00000005", `{"item":"block"}`, 0},    // stored, after the 409 below
		{"POST", "/orders", "key-00000005", `{"item":"block"}`, 409},  // conflict
		{"PATCH", "/orders", "key-00000006", `{"item":"book"}`, 405},  // no route: never reaches idem
		{"POST", "/orders", "key-00000001", `{"item":"book"}`, 201},   // replay
		{"POST", "/orders", "key-00000007", `{"item":"stored"}`, 201}, // stored
	}
	var wg sync.WaitGroup
	for _, s := range steps {
		if s.status == 0 { // held in flight until the next step is answered
			wg.Go(func() {
				if got := send(mux, s.method, s.path, s.key, s.body); got != http.StatusCreated {
					t.Errorf("%s %s key %q: status %d, want 201", s.method, s.path, s.key, got)
				}
			})
			<-app.entered
			if got := testutil.ToFloat64(metric(t, m, "idempotency_inflight_requests")); got != 1 {
				t.Errorf("idempotency_inflight_requests while the handler runs = %v, want 1", got)
			}
			continue
		}
		if got := send(mux, s.method, s.path, s.key, s.body); got != s.status {
			t.Errorf("%s %s key %q %s: status %d, want %d", s.method, s.path, s.key, s.body, got, s.status)
		}
		if s.status == http.StatusConflict {
			close(app.release)
			wg.Wait()
		}
	}
	if got := app.runs.Load(); got != 5 { // book, boom, the unprotected PUT, block, stored
		t.Errorf("handler ran %d times, want 5", got)
	}

	const want = `
# HELP idempotency_requests_total Requests with an idempotency key, by outcome (replay, stored, conflict, ...), method and route template.
# TYPE idempotency_requests_total counter
idempotency_requests_total{method="POST",outcome="conflict",route="/orders"} 1
idempotency_requests_total{method="POST",outcome="invalid_key",route="/orders"} 2
idempotency_requests_total{method="POST",outcome="mismatch",route="/orders"} 1
idempotency_requests_total{method="POST",outcome="not_stored",route="/orders"} 1
idempotency_requests_total{method="POST",outcome="replay",route="/orders"} 2
idempotency_requests_total{method="POST",outcome="stored",route="/orders"} 3
idempotency_requests_total{method="PUT",outcome="store_error",route="/orders/{id}"} 1
# HELP idempotency_store_errors_total Idempotency store calls that failed, by operation; a key in flight, a lost lock or a quota refusal is no failure.
# TYPE idempotency_store_errors_total counter
idempotency_store_errors_total{operation="acquire"} 1
idempotency_store_errors_total{operation="complete"} 0
idempotency_store_errors_total{operation="refresh"} 0
idempotency_store_errors_total{operation="release"} 0
# HELP idempotency_inflight_requests Requests of this process that hold their idempotency key's lock: their handler is running.
# TYPE idempotency_inflight_requests gauge
idempotency_inflight_requests 0
# HELP idempotency_store_fallbacks_total Calls of a tiered store that one tier answered alone because the other failed, Redis or PostgreSQL.
# TYPE idempotency_store_fallbacks_total counter
idempotency_store_fallbacks_total 0
# HELP idempotency_store_breaker_state State of the idempotency store's circuit breaker: 1 for the current state (closed, open, half_open), 0 for the others.
# TYPE idempotency_store_breaker_state gauge
idempotency_store_breaker_state{state="closed"} 1
idempotency_store_breaker_state{state="half_open"} 0
idempotency_store_breaker_state{state="open"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idempotency_requests_total",
		"idempotency_store_errors_total", "idempotency_inflight_requests", "idempotency_store_fallbacks_total",
		"idempotency_store_breaker_state"); err != nil {
		t.Error(err)
	}
	wantCounts(t, "idempotency_request_duration_seconds", histCounts(t, reg, "idempotency_request_duration_seconds"), map[string]uint64{
		"method=POST,outcome=conflict,route=/orders":        1,
		"method=POST,outcome=invalid_key,route=/orders":     2,
		"method=POST,outcome=mismatch,route=/orders":        1,
		"method=POST,outcome=not_stored,route=/orders":      1,
		"method=POST,outcome=replay,route=/orders":          2,
		"method=POST,outcome=stored,route=/orders":          3,
		"method=PUT,outcome=store_error,route=/orders/{id}": 1,
	})
	// Acquire: every request with a valid key that reached idem (9); Complete:
	// the 3 stored; Release: the 500.
	wantCounts(t, "idempotency_store_operation_duration_seconds", histCounts(t, reg, "idempotency_store_operation_duration_seconds"), map[string]uint64{
		"operation=acquire":  9,
		"operation=complete": 3,
		"operation=refresh":  0,
		"operation=release":  1,
	})
}

// metric returns the Collector's metric name alone, for testutil.ToFloat64.
func metric(t *testing.T, c prometheus.Collector, name string) prometheus.Collector {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	for m := range ch {
		if strings.Contains(m.Desc().String(), `fqName: "`+name+`"`) {
			return single{m}
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

type single struct{ m prometheus.Metric }

func (s single) Describe(ch chan<- *prometheus.Desc) { ch <- s.m.Desc() }
func (s single) Collect(ch chan<- prometheus.Metric) { ch <- s.m }

// TestConcurrentDuplicates sends many requests with one key at once: the
// handler runs once, every request is counted once, and no lock is left
// counted in flight; with Config.Wait, through the wrapper's core.Waiter,
// every duplicate gets the replay.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 64
	for _, wait := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			t.Parallel()
			m, err := idemprom.New(nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			store := m.InstrumentStore(core.NewMemoryStore(0))
			if _, ok := store.(core.Waiter); !ok {
				t.Fatal("the instrumented MemoryStore is no core.Waiter")
			}
			app := newOrders()
			h := newEngine(t, core.Config{Store: store, Observer: m.Observe, Wait: wait}).Middleware(app)
			start := make(chan struct{})
			statuses := make(chan int, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					<-start
					statuses <- send(h, "POST", "/orders", "dup-00000001", `{"item":"book"}`)
				})
			}
			close(start)
			wg.Wait()
			close(statuses)
			byStatus := map[int]int{}
			for s := range statuses {
				byStatus[s]++
			}
			if got := app.runs.Load(); got != 1 {
				t.Errorf("handler ran %d times, want 1", got)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(m)
			counts := map[string]float64{}
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "idempotency_requests_total" {
					for _, mm := range mf.GetMetric() {
						for _, l := range mm.GetLabel() {
							if l.GetName() == "outcome" {
								counts[l.GetValue()] += mm.GetCounter().GetValue()
							}
						}
					}
				}
			}
			if counts["stored"] != 1 || counts["stored"]+counts["replay"]+counts["conflict"] != n {
				t.Errorf("outcomes %v, want 1 stored and %d replays or conflicts", counts, n-1)
			}
			if int(counts["conflict"]) != byStatus[http.StatusConflict] || byStatus[http.StatusCreated] != n-byStatus[http.StatusConflict] {
				t.Errorf("statuses %v do not match outcomes %v", byStatus, counts)
			}
			if wait > 0 && counts["replay"] != n-1 {
				t.Errorf("with Wait: outcomes %v, want %d replays", counts, n-1)
			}
			if got := histCounts(t, reg, "idempotency_store_operation_duration_seconds")["operation=acquire"]; got < n {
				t.Errorf("%d Acquire calls timed, want at least %d", got, n)
			}
			if got := testutil.ToFloat64(metric(t, m, "idempotency_inflight_requests")); got != 0 {
				t.Errorf("idempotency_inflight_requests = %v after the requests, want 0", got)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	t.Run("shared registry", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewPedanticRegistry()
		a, err := idemprom.New(reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := idemprom.New(reg, &idemprom.Options{MaxRoutes: idemprom.DefaultMaxRoutes}) // the defaults, spelt out
		if err != nil || a != b {
			t.Fatalf("second New on one registry = %p, %v; want the first Collector %p", b, err, a)
		}
		if c, err := idemprom.New(reg, &idemprom.Options{RequestBuckets: []float64{1, 2}}); c != nil || err == nil {
			t.Fatalf("New on one registry with other buckets = %p, %v; want an error", c, err)
		}
		other, err := idemprom.New(prometheus.NewPedanticRegistry(), nil)
		if err != nil || other == a {
			t.Fatalf("New on another registry = %p, %v; want a new Collector", other, err)
		}
	})
	t.Run("name taken", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "idempotency_requests_total", Help: "someone else's"}))
		if c, err := idemprom.New(reg, nil); err == nil || !strings.HasPrefix(err.Error(), "idemprom: ") {
			t.Fatalf("New = %v, %v; want an idemprom error", c, err)
		}
	})
	t.Run("unregistered", func(t *testing.T) {
		t.Parallel()
		c, err := idemprom.New(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(c); err != nil {
			t.Fatalf("registering a Collector made with a nil Registerer: %v", err)
		}
	})
	for _, b := range [][]float64{{}, {1, 1}, {2, 1}} {
		t.Run(fmt.Sprintf("buckets %v", b), func(t *testing.T) {
			t.Parallel()
			for _, o := range []*idemprom.Options{{RequestBuckets: b}, {StoreBuckets: b}} {
				if c, err := idemprom.New(nil, o); err == nil {
					t.Errorf("New(%+v) = %v, want an error", o, c)
				}
			}
		})
	}
}

// TestObserveUnknownOutcome: an outcome this package does not know yet is
// counted under its own name, "unknown" for now.
func TestObserveUnknownOutcome(t *testing.T) {
	t.Parallel()
	c, _ := idemprom.New(nil, nil)
	c.Observe(core.Event{})
	c.Observe(core.Event{Outcome: 99, Method: "POST", Route: "/x"})
	const want = `
# HELP idempotency_requests_total Requests with an idempotency key, by outcome (replay, stored, conflict, ...), method and route template.
# TYPE idempotency_requests_total counter
idempotency_requests_total{method="",outcome="unknown",route=""} 1
idempotency_requests_total{method="POST",outcome="unknown",route="/x"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "idempotency_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestMaxRoutes: past MaxRoutes route values, requests of further routes
// count under route "_OTHER" (and method "_OTHER" for a gRPC full method,
// which is its route too); routes seen before keep their series.
func TestMaxRoutes(t *testing.T) {
	t.Parallel()
	c, err := idemprom.New(nil, &idemprom.Options{MaxRoutes: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"/a", "/b", "/a", "/c", "/d", "/e", "/a", "/c"} {
		c.Observe(core.Event{Outcome: core.OutcomeStored, Method: "POST", Route: r})
	}
	c.Observe(core.Event{Outcome: core.OutcomeReplay, Method: "PUT", Route: "/b"})
	c.Observe(core.Event{Outcome: core.OutcomeReplay, Method: "PUT", Route: "/f"})
	c.Observe(core.Event{Outcome: core.OutcomeStored, Method: "/shop.Orders/Create", Route: "/shop.Orders/Create"})
	const want = `
# HELP idempotency_requests_total Requests with an idempotency key, by outcome (replay, stored, conflict, ...), method and route template.
# TYPE idempotency_requests_total counter
idempotency_requests_total{method="POST",outcome="stored",route="/a"} 3
idempotency_requests_total{method="POST",outcome="stored",route="/b"} 1
idempotency_requests_total{method="POST",outcome="stored",route="/c"} 2
idempotency_requests_total{method="POST",outcome="stored",route="_OTHER"} 2
idempotency_requests_total{method="PUT",outcome="replay",route="/b"} 1
idempotency_requests_total{method="PUT",outcome="replay",route="_OTHER"} 1
idempotency_requests_total{method="_OTHER",outcome="stored",route="_OTHER"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "idempotency_requests_total"); err != nil {
		t.Error(err)
	}
	if _, err := idemprom.New(nil, &idemprom.Options{MaxRoutes: -1}); err == nil {
		t.Error("New with a negative MaxRoutes: no error")
	}
}

// TestMaxRoutesConcurrent: requests to 2000 distinct paths at once (a
// middleware outside the router, the path standing in for the route) keep
// DefaultMaxRoutes route values and one "_OTHER", and lose no count.
func TestMaxRoutesConcurrent(t *testing.T) {
	t.Parallel()
	c, _ := idemprom.New(nil, nil)
	const n = 2000
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				c.Observe(core.Event{Outcome: core.OutcomeStored, Method: "POST", Route: fmt.Sprintf("/orders/%d", i)})
			}
		})
	}
	wg.Wait()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	routes, total := map[string]bool{}, 0.0
	for _, mf := range mfs {
		if mf.GetName() != "idempotency_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" {
					routes[l.GetValue()] = true
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	if len(routes) != idemprom.DefaultMaxRoutes+1 || !routes["_OTHER"] || total != n {
		t.Errorf("%d route values (_OTHER among them: %v), %v requests; want %d, true, %d", len(routes), routes["_OTHER"], total, idemprom.DefaultMaxRoutes+1, n)
	}
}

// TestLint runs client_golang's promlint (Prometheus's naming conventions)
// over every metric, each with a sample.
func TestLint(t *testing.T) {
	t.Parallel()
	c, _ := idemprom.New(nil, nil)
	c.Observe(core.Event{Outcome: core.OutcomeStored, Method: "POST", Route: "/orders"})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(c); n != 4+2*4+3 { // one series per store operation, per breaker state
		t.Errorf("%d series, want 15", n)
	}
}

// TestAlertRulesNames: every metric that alerts.yml reads is one the
// Collector exports, but the stuck-key gauge, which the stores export.
func TestAlertRulesNames(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := idemprom.New(nil, nil)
	ch := make(chan *prometheus.Desc, 16)
	c.Describe(ch)
	close(ch)
	exported := map[string]bool{"idempotency_oldest_inflight_start_timestamp_seconds": true}
	for d := range ch {
		name := regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())[1]
		exported[name] = true
	}
	used := regexp.MustCompile(`idempotency_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("alerts.yml reads no idempotency_ metric")
	}
	for _, name := range used {
		if !exported[name] {
			t.Errorf("alerts.yml reads %s, which idemprom does not export", name)
		}
	}
}

// TestBreaker: the Engine's breaker opens after BreakerFailures store
// errors in a row; its event sets the gauge and counts no request, and the
// calls it spares the store are no store calls.
func TestBreaker(t *testing.T) {
	t.Parallel()
	m, _ := idemprom.New(nil, nil)
	eng := newEngine(t, core.Config{Store: m.InstrumentStore(downStore{}), Observer: m.Observe,
		BreakerFailures: 2, BreakerCooldown: time.Hour})
	h := eng.Middleware(newOrders()) // outside a mux: no route template, route "unmatched"
	for i := range 5 {
		if got := send(h, "POST", "/orders", fmt.Sprintf("key-%08d", i), `{}`); got != http.StatusCreated {
			t.Errorf("request %d: status %d, want 201 (fail-open)", i, got)
		}
	}
	const want = `
# HELP idempotency_requests_total Requests with an idempotency key, by outcome (replay, stored, conflict, ...), method and route template.
# TYPE idempotency_requests_total counter
idempotency_requests_total{method="POST",outcome="store_error",route="unmatched"} 5
# HELP idempotency_store_errors_total Idempotency store calls that failed, by operation; a key in flight, a lost lock or a quota refusal is no failure.
# TYPE idempotency_store_errors_total counter
idempotency_store_errors_total{operation="acquire"} 2
idempotency_store_errors_total{operation="complete"} 0
idempotency_store_errors_total{operation="refresh"} 0
idempotency_store_errors_total{operation="release"} 0
# HELP idempotency_store_breaker_state State of the idempotency store's circuit breaker: 1 for the current state (closed, open, half_open), 0 for the others.
# TYPE idempotency_store_breaker_state gauge
idempotency_store_breaker_state{state="closed"} 0
idempotency_store_breaker_state{state="half_open"} 0
idempotency_store_breaker_state{state="open"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "idempotency_requests_total",
		"idempotency_store_errors_total", "idempotency_store_breaker_state"); err != nil {
		t.Error(err)
	}
}

// TestStoreEvents: fallback and breaker events count as what they are,
// not as requests.
func TestStoreEvents(t *testing.T) {
	t.Parallel()
	m, _ := idemprom.New(nil, nil)
	for _, e := range []core.Event{
		{Outcome: core.OutcomeFallback, Err: errDown},
		{Outcome: core.OutcomeBreaker, Breaker: "open"},
		{Outcome: core.OutcomeFallback, Err: errDown},
		{Outcome: core.OutcomeBreaker, Breaker: "half_open"},
	} {
		m.Observe(e)
	}
	const want = `
# HELP idempotency_store_fallbacks_total Calls of a tiered store that one tier answered alone because the other failed, Redis or PostgreSQL.
# TYPE idempotency_store_fallbacks_total counter
idempotency_store_fallbacks_total 2
# HELP idempotency_store_breaker_state State of the idempotency store's circuit breaker: 1 for the current state (closed, open, half_open), 0 for the others.
# TYPE idempotency_store_breaker_state gauge
idempotency_store_breaker_state{state="closed"} 0
idempotency_store_breaker_state{state="half_open"} 1
idempotency_store_breaker_state{state="open"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "idempotency_store_fallbacks_total",
		"idempotency_store_breaker_state", "idempotency_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestFallbackOfEitherTier: a tiered store reports a fallback when either
// tier fails and the other answers alone, PostgreSQL as well as Redis, and
// the metric's help says so rather than blame the fast tier.
func TestFallbackOfEitherTier(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		fast, durable core.Store
		fallbacks     int // the acquire; with the durable tier down, the record's second chance there too
	}{
		{"fast down", downStore{}, core.NewMemoryStore(0), 1},
		{"durable down", core.NewMemoryStore(0), downStore{}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := idemprom.New(nil, nil)
			eng := newEngine(t, core.Config{Store: core.NewTiered(tt.fast, tt.durable), Observer: m.Observe})
			if code := send(eng.Middleware(newOrders()), http.MethodPost, "/orders", "k", `{"qty":1}`); code != http.StatusCreated {
				t.Fatalf("status %d, want 201", code)
			}
			want := fmt.Sprintf(`
# HELP idempotency_store_fallbacks_total Calls of a tiered store that one tier answered alone because the other failed, Redis or PostgreSQL.
# TYPE idempotency_store_fallbacks_total counter
idempotency_store_fallbacks_total %d
`, tt.fallbacks)
			if err := testutil.CollectAndCompare(m, strings.NewReader(want), "idempotency_store_fallbacks_total"); err != nil {
				t.Error(err)
			}
		})
	}
}
