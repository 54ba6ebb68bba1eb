package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemotel"
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
}

// traced starts a span per request, as otelhttp would, named by the
// request's X-Step header.
func traced(tp trace.TracerProvider, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tp.Tracer("test").Start(r.Context(), r.Header.Get("X-Step"))
		defer span.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func send(h http.Handler, step int, method, path, key, body string) int {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-Step", fmt.Sprint(step))
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

func newTelemetry(t *testing.T) (*idemotel.Telemetry, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tel, reader
}

// points returns each data point of the instrument name by its attributes
// ("method=POST,outcome=stored,route=/orders"): a sum's or a gauge's value,
// or a histogram's count.
func points(t *testing.T, r sdkmetric.Reader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	key := func(s attribute.Set) string {
		var kv []string
		for _, a := range s.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		sort.Strings(kv)
		return strings.Join(kv, ",")
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, idemotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = int64(p.Count)
				}
			default:
				t.Fatalf("%s: data %T", name, m.Data)
			}
		}
	}
	return got
}

func wantPoints(t *testing.T, r sdkmetric.Reader, name string, want map[string]int64) {
	t.Helper()
	if got := points(t, r, name); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

// TestScriptedRequests drives two Engines that share one Telemetry through
// the net/http middleware, inside a tracing middleware: every outcome the
// HTTP contract names, then each instrument read back with a ManualReader
// and each request's span from a span recorder, at exact values.
func TestScriptedRequests(t *testing.T) {
	tel, reader := newTelemetry(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	app := newOrders()
	mux := http.NewServeMux()
	mem := newEngine(t, core.Config{Store: tel.InstrumentStore(core.NewMemoryStore(0)), Observer: tel.Observe})
	mux.Handle("POST /orders", mem.Middleware(app))
	down := newEngine(t, core.Config{Store: tel.InstrumentStore(downStore{}), Observer: tel.Observe})
	mux.Handle("PUT /orders/{id}", down.Middleware(app))
	h := traced(tp, mux)

	long := strings.Repeat("k", 256)
	steps := []struct {
		method, path, key, body string
		status                  int
		outcome                 string // the span's idempotency.outcome, "" for none
		keyed                   bool   // the span carries idempotency.key, core.MaskKey(key)
		err                     string // the exception event's message
	}{
		{"POST", "/orders", "key-00000001", `{"item":"book"}`, 201, "stored", true, ""},
		{"POST", "/orders", "key-00000001", `{"item":"book"}`, 201, "replay", true, ""},
		{"POST", "/orders", "key-00000001", `{"item":"pen"}`, 422, "mismatch", true, ""},
		{"POST", "/orders", "", `{"item":"book"}`, 400, "invalid_key", false, "idem: invalid idempotency key"},
		{"POST", "/orders", long, `{}`, 400, "invalid_key", true, "idem: invalid idempotency key"},
		{"POST", "/orders", "key-00000003", `{"item":"boom"}`, 500, "not_stored", true, ""},
		{"PUT", "/orders/7", "key-00000004", `{"item":"book"}`, 201, "store_error", true, errDown.Error()},
		{"POST", "/orders", "key-00000005", `{"item":"block"}`, 0, "stored", true, ""},
		{"POST", "/orders", "key-00000005", `{"item":"block"}`, 409, "conflict", true, ""},
		{"PATCH", "/orders", "key-00000006", `{"item":"book"}`, 405, "", false, ""},
		{"POST", "/orders", "key-00000001", `{"item":"book"}`, 201, "replay", true, ""},
		{"POST", "/orders", "key-00000007", `{"item":"stored"}`, 201, "stored", true, ""},
	}
	var wg sync.WaitGroup
	for i, s := range steps {
		if s.status == 0 { // held in flight until the next step is answered
			wg.Go(func() {
				if got := send(h, i, s.method, s.path, s.key, s.body); got != http.StatusCreated {
					t.Errorf("step %d: status %d, want 201", i, got)
				}
			})
			<-app.entered
			wantPoints(t, reader, "idempotency.inflight_requests", map[string]int64{"": 1})
			continue
		}
		if got := send(h, i, s.method, s.path, s.key, s.body); got != s.status {
			t.Errorf("step %d, %s %s key %q %s: status %d, want %d", i, s.method, s.path, s.key, s.body, got, s.status)
		}
		if s.status == http.StatusConflict {
			close(app.release)
			wg.Wait()
		}
	}
	if got := app.runs.Load(); got != 5 { // book, boom, the unprotected PUT, block, stored
		t.Errorf("handler ran %d times, want 5", got)
	}

	// OpenTelemetry's HTTP attributes, and error.type where idem refused
	// or failed the request.
	byOutcome := map[string]int64{
		"error.type=conflict,http.request.method=POST,http.route=/orders,idempotency.outcome=conflict":           1,
		"error.type=invalid_key,http.request.method=POST,http.route=/orders,idempotency.outcome=invalid_key":     2,
		"error.type=mismatch,http.request.method=POST,http.route=/orders,idempotency.outcome=mismatch":           1,
		"http.request.method=POST,http.route=/orders,idempotency.outcome=not_stored":                             1,
		"http.request.method=POST,http.route=/orders,idempotency.outcome=replay":                                 2,
		"http.request.method=POST,http.route=/orders,idempotency.outcome=stored":                                 3,
		"error.type=store_error,http.request.method=PUT,http.route=/orders/{id},idempotency.outcome=store_error": 1,
	}
	wantPoints(t, reader, "idempotency.requests", byOutcome)
	wantPoints(t, reader, "idempotency.request.duration", byOutcome)
	// Acquire: every request with a valid key that reached idem (9), one
	// of them failed; Complete: the 3 stored; Release: the 500.
	wantPoints(t, reader, "idempotency.store.operation.duration", map[string]int64{
		"idempotency.store.operation=acquire": 8, "error.type=_OTHER,idempotency.store.operation=acquire": 1,
		"idempotency.store.operation=complete": 3, "idempotency.store.operation=release": 1,
	})
	wantPoints(t, reader, "idempotency.store.errors", map[string]int64{
		"idempotency.store.operation=acquire": 1, "idempotency.store.operation=complete": 0,
		"idempotency.store.operation=refresh": 0, "idempotency.store.operation=release": 0,
	})
	wantPoints(t, reader, "idempotency.inflight_requests", map[string]int64{"": 0})
	wantPoints(t, reader, "idempotency.store.fallbacks", map[string]int64{"": 0})
	wantPoints(t, reader, "idempotency.store.breaker.state", breakerStates(1, 0, 0))

	ended := spans.Ended()
	if len(ended) != len(steps) {
		t.Fatalf("%d spans, want %d", len(ended), len(steps))
	}
	for _, span := range ended {
		var i int
		fmt.Sscan(span.Name(), &i)
		s := steps[i]
		attrs := map[string]string{}
		for _, a := range span.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		want := map[string]string{}
		if s.outcome != "" {
			want["idempotency.outcome"] = s.outcome
			want["idempotency.replay"] = fmt.Sprint(s.outcome == "replay")
		}
		if s.keyed {
			want["idempotency.key"] = core.MaskKey(s.key)
		}
		if fmt.Sprint(attrs) != fmt.Sprint(want) {
			t.Errorf("step %d span attributes %v, want %v", i, attrs, want)
		}
		var errs []string
		for _, ev := range span.Events() {
			for _, a := range ev.Attributes {
				if ev.Name == "exception" && a.Key == "exception.message" {
					errs = append(errs, a.Value.AsString())
				}
			}
		}
		if s.err == "" && len(errs) != 0 || s.err != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0], s.err)) {
			t.Errorf("step %d span exceptions %q, want %q", i, errs, s.err)
		}
		if span.Status().Code != 0 {
			t.Errorf("step %d span status %v, want it unset", i, span.Status())
		}
	}
}

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
			tel, reader := newTelemetry(t)
			app := newOrders()
			h := newEngine(t, core.Config{Store: tel.InstrumentStore(core.NewMemoryStore(0)), Observer: tel.Observe, Wait: wait}).Middleware(app)
			start := make(chan struct{})
			statuses := make(chan int, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					statuses <- send(h, i, "POST", "/orders", "dup-00000001", `{"item":"book"}`)
				})
			}
			close(start)
			wg.Wait()
			close(statuses)
			byStatus := map[int]int64{}
			for s := range statuses {
				byStatus[s]++
			}
			if got := app.runs.Load(); got != 1 {
				t.Errorf("handler ran %d times, want 1", got)
			}
			counts := map[string]int64{}
			for labels, v := range points(t, reader, "idempotency.requests") {
				counts[strings.Split(strings.Split(labels, "outcome=")[1], ",")[0]] += v
			}
			if counts["stored"] != 1 || counts["stored"]+counts["replay"]+counts["conflict"] != n {
				t.Errorf("outcomes %v, want 1 stored and %d replays or conflicts", counts, n-1)
			}
			if counts["conflict"] != byStatus[http.StatusConflict] || byStatus[http.StatusCreated] != n-byStatus[http.StatusConflict] {
				t.Errorf("statuses %v do not match outcomes %v", byStatus, counts)
			}
			if wait > 0 && counts["replay"] != n-1 {
				t.Errorf("with Wait: outcomes %v, want %d replays", counts, n-1)
			}
			if got := points(t, reader, "idempotency.store.operation.duration")["idempotency.store.operation=acquire"]; got < n {
				t.Errorf("%d Acquire calls timed, want at least %d", got, n)
			}
			wantPoints(t, reader, "idempotency.inflight_requests", map[string]int64{"": 0})
		})
	}
}

// TestObserveWithoutSpan: an event without a context, or whose span does
// not record, is counted all the same; one of no transport (core.Do,
// Once) has idem's method and route attributes, those set.
func TestObserveWithoutSpan(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	tel.Observe(core.Event{Outcome: core.OutcomeReplay, Method: "POST", Route: "/a", Err: errDown})
	tel.Observe(core.Event{Context: context.Background(), Outcome: core.OutcomeReplay, Method: "POST", Route: "/a", Key: "k"})
	tel.Observe(core.Event{Outcome: 99})
	wantPoints(t, reader, "idempotency.requests", map[string]int64{
		"error.type=unknown,idempotency.outcome=unknown":                          1,
		"idempotency.method=POST,idempotency.outcome=replay,idempotency.route=/a": 2,
	})
}

// TestNewDefault: a nil MeterProvider means the global one (a no-op until
// the application sets one).
func TestNewDefault(t *testing.T) {
	t.Parallel()
	tel, err := idemotel.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tel.Observe(core.Event{Outcome: core.OutcomeStored})
}

// TestBreaker: the Engine's breaker opens after BreakerFailures store
// errors in a row; its event sets the gauge and counts no request, and the
// calls it spares the store are no store calls.
func TestBreaker(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	eng := newEngine(t, core.Config{Store: tel.InstrumentStore(downStore{}), Observer: tel.Observe,
		BreakerFailures: 2, BreakerCooldown: time.Hour})
	h := eng.Middleware(newOrders()) // outside a mux: no route template, route "unmatched"
	for i := range 5 {
		if got := send(h, i, "POST", "/orders", fmt.Sprintf("key-%08d", i), `{}`); got != http.StatusCreated {
			t.Errorf("request %d: status %d, want 201 (fail-open)", i, got)
		}
	}
	wantPoints(t, reader, "idempotency.requests", map[string]int64{
		"error.type=store_error,http.request.method=POST,http.route=unmatched,idempotency.outcome=store_error": 5,
	})
	wantPoints(t, reader, "idempotency.store.errors", map[string]int64{
		"idempotency.store.operation=acquire": 2, "idempotency.store.operation=complete": 0,
		"idempotency.store.operation=refresh": 0, "idempotency.store.operation=release": 0,
	})
	wantPoints(t, reader, "idempotency.store.breaker.state", breakerStates(0, 0, 1))
}

// TestStoreEvents: fallback and breaker events count as what they are,
// not as requests.
func TestStoreEvents(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	for _, e := range []core.Event{
		{Outcome: core.OutcomeFallback, Err: errDown},
		{Outcome: core.OutcomeBreaker, Breaker: "open"},
		{Outcome: core.OutcomeFallback, Err: errDown},
		{Outcome: core.OutcomeBreaker, Breaker: "half_open"},
	} {
		tel.Observe(e)
	}
	wantPoints(t, reader, "idempotency.store.fallbacks", map[string]int64{"": 2})
	wantPoints(t, reader, "idempotency.store.breaker.state", breakerStates(0, 1, 0))
	wantPoints(t, reader, "idempotency.requests", map[string]int64{})
}

func breakerStates(closed, halfOpen, open int64) map[string]int64 {
	return map[string]int64{
		"idempotency.breaker.state=closed": closed, "idempotency.breaker.state=half_open": halfOpen, "idempotency.breaker.state=open": open,
	}
}

// TestGRPCAttributes: an event of gRPC (grpcidem reports the full method,
// "/pkg.Service/Method", as Method and Route) carries OpenTelemetry's RPC
// attributes instead of the HTTP ones.
func TestGRPCAttributes(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	const m = "/shop.v1.Orders/Create"
	tel.Observe(core.Event{Outcome: core.OutcomeStored, Transport: "grpc", Method: m, Route: m})
	tel.Observe(core.Event{Outcome: core.OutcomeConflict, Transport: "grpc", Method: m, Route: m})
	wantPoints(t, reader, "idempotency.request.duration", map[string]int64{
		"idempotency.outcome=stored,rpc.method=shop.v1.Orders/Create,rpc.system.name=grpc":                       1,
		"error.type=conflict,idempotency.outcome=conflict,rpc.method=shop.v1.Orders/Create,rpc.system.name=grpc": 1,
	})
}

// TestStoreErrorTypes: a failed store call's duration carries error.type,
// a timeout, a full store, a corrupt record, or _OTHER; a key in flight, a
// lost lock and a key over the quota are no failures.
func TestStoreErrorTypes(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	ctx := context.Background()
	for _, err := range []error{
		context.DeadlineExceeded, fmt.Errorf("redis: %w", context.DeadlineExceeded), core.ErrStoreFull,
		core.ErrCorruptRecord, errDown, core.ErrInFlight, core.ErrLockLost, &core.QuotaError{}, nil,
	} {
		s := tel.InstrumentStore(&scriptedStore{errs: map[string]error{"acquire": err}})
		s.Acquire(ctx, "k", time.Minute)
	}
	wantPoints(t, reader, "idempotency.store.operation.duration", map[string]int64{
		"error.type=timeout,idempotency.store.operation=acquire":        2,
		"error.type=store_full,idempotency.store.operation=acquire":     1,
		"error.type=corrupt_record,idempotency.store.operation=acquire": 1,
		"error.type=_OTHER,idempotency.store.operation=acquire":         1,
		"idempotency.store.operation=acquire":                           4,
	})
}

// TestMaxRoutes: past MaxRoutes routes, requests of further routes count
// under http.route "_OTHER" (rpc.method "_OTHER" for gRPC); routes seen
// before keep their series.
func TestMaxRoutes(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	tel, err := idemotel.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), &idemotel.Options{MaxRoutes: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"/a", "/b", "/c", "/a", "/d"} {
		tel.Observe(core.Event{Outcome: core.OutcomeReplay, Transport: "http", Method: "POST", Route: r})
	}
	tel.Observe(core.Event{Outcome: core.OutcomeReplay, Transport: "grpc", Method: "/shop.Orders/Create", Route: "/shop.Orders/Create"})
	wantPoints(t, reader, "idempotency.requests", map[string]int64{
		"http.request.method=POST,http.route=/a,idempotency.outcome=replay":     2,
		"http.request.method=POST,http.route=/b,idempotency.outcome=replay":     1,
		"http.request.method=POST,http.route=_OTHER,idempotency.outcome=replay": 2,
		"idempotency.outcome=replay,rpc.method=_OTHER,rpc.system.name=grpc":     1,
	})
	if _, err := idemotel.New(nil, &idemotel.Options{MaxRoutes: -1}); err == nil {
		t.Error("New with a negative MaxRoutes: no error")
	}
}

// TestMaxRoutesConcurrent: requests to 2000 distinct paths at once keep
// DefaultMaxRoutes routes and one "_OTHER", and lose no count.
func TestMaxRoutesConcurrent(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	const n = 2000
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				tel.Observe(core.Event{Outcome: core.OutcomeStored, Transport: "http", Method: "POST", Route: fmt.Sprintf("/orders/%d", i)})
			}
		})
	}
	wg.Wait()
	got := points(t, reader, "idempotency.requests")
	var total int64
	for _, v := range got {
		total += v
	}
	other := got["http.request.method=POST,http.route=_OTHER,idempotency.outcome=stored"]
	if len(got) != idemotel.DefaultMaxRoutes+1 || other == 0 || total != n {
		t.Errorf("%d series (_OTHER: %d requests), %d requests; want %d, > 0, %d", len(got), other, total, idemotel.DefaultMaxRoutes+1, n)
	}
}

// TestFallbackOfEitherTier: a tiered store reports a fallback when either
// tier fails and the other answers alone, and the instrument describes
// store calls of either tier, not requests the durable tier served.
func TestFallbackOfEitherTier(t *testing.T) {
	t.Parallel()
	tel, reader := newTelemetry(t)
	for _, tiers := range [][2]core.Store{{downStore{}, core.NewMemoryStore(0)}, {core.NewMemoryStore(0), downStore{}}} {
		eng := newEngine(t, core.Config{Store: core.NewTiered(tiers[0], tiers[1]), Observer: tel.Observe})
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"qty":1}`))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		eng.Middleware(newOrders()).ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("status %d, want 201", w.Code)
		}
	}
	// Fast down: the acquire; durable down: the acquire, and the record's
	// second chance there at completion.
	wantPoints(t, reader, "idempotency.store.fallbacks", map[string]int64{"": 3})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		const desc = "Calls of a tiered store that one tier answered alone because the other failed, Redis or PostgreSQL."
		if m.Name == "idempotency.store.fallbacks" && (m.Description != desc || m.Unit != "{call}") {
			t.Errorf("description %q, unit %q; want %q, {call}", m.Description, m.Unit, desc)
		}
	}
}
