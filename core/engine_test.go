package core_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

// events collects observed outcomes.
type events struct {
	mu  sync.Mutex
	all []core.Event
}

func (e *events) observe(ev core.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

func (e *events) count(o core.Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.Outcome == o {
			n++
		}
	}
	return n
}

func post(t *testing.T, h http.Handler, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]core.Config{
		"negative body limit": {MaxBodyBytes: -1},
		"negative ttl":        {ResponseTTL: -time.Second},
		"tiny lock ttl":       {LockTTL: time.Microsecond},
		// A bare number is nanoseconds: every retry would run again.
		"response ttl in nanoseconds": {ResponseTTL: 86400},
		"negative wait":               {Wait: -1},
		// Each would leave every request unprotected, silently.
		"lower-case method":        {Methods: []string{"POST", "patch"}},
		"empty method":             {Methods: []string{""}},
		"key header not a name":    {KeyHeader: "Idempotency Key"},
		"legacy header not a name": {LegacyKeyHeader: "X-Key:"},
		"replay header not a name": {ReplayHeader: "Replayed?"},
	} {
		if _, err := core.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// A handler that runs three times the lock TTL keeps its lock through the
// refresher: every duplicate meanwhile is a conflict, and it runs once.
func TestSlowHandlerKeepsLock(t *testing.T) { synctest.Test(t, testSlowHandlerKeepsLock) }

func testSlowHandlerKeepsLock(t *testing.T) {
	const ttl = 150 * time.Millisecond
	var ev events
	eng, err := core.New(core.Config{LockTTL: ttl, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	started := make(chan struct{})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		close(started)
		advance(3 * ttl)
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan int)
	go func() { done <- post(t, h, "slow", "{}").Code }()
	<-started
	for at := time.Duration(0); at < 3*ttl; at += 10 * time.Millisecond {
		if code := post(t, h, "slow", "{}").Code; code != http.StatusConflict {
			t.Fatalf("duplicate %v into the first request: %d, want 409", at, code)
		}
		advance(10 * time.Millisecond)
	}
	if code := <-done; code != http.StatusCreated {
		t.Errorf("first request: %d", code)
	}
	if runs.Load() != 1 || ev.count(core.OutcomeLockLost) != 0 {
		t.Fatalf("handler ran %d times, %d lost locks", runs.Load(), ev.count(core.OutcomeLockLost))
	}
}

// flakyRefresh is a memory store whose Refresh fails, as a store that is
// unreachable for a while: the lock expires under a running handler.
type flakyRefresh struct{ *core.MemoryStore }

func (flakyRefresh) Refresh(context.Context, string, string, time.Duration) error {
	return errors.New("store unreachable")
}

// A lock lost anyway (the refresh failed, the lock expired, another request
// took over and finished) is reported, and the late completion does not
// overwrite the newer record.
func TestLostLockIsFenced(t *testing.T) { synctest.Test(t, testLostLockIsFenced) }

func testLostLockIsFenced(t *testing.T) {
	var ev events
	eng, err := core.New(core.Config{LockTTL: 60 * time.Millisecond, Store: flakyRefresh{core.NewMemoryStore(0)}, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	release, started := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, map[int32]string{1: "late", 2: "second"}[n])
	}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- post(t, h, "lost", "{}") }()
	<-started
	advance(150 * time.Millisecond) // the first lock expires unrefreshed
	if w := post(t, h, "lost", "{}"); w.Body.String() != "second" {
		t.Fatalf("takeover request got %d %q", w.Code, w.Body)
	}
	close(release)
	<-done
	w := post(t, h, "lost", "{}")
	if w.Body.String() != "second" || w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatalf("after the late completion the replay is %q: the newer record was overwritten", w.Body)
	}
	if ev.count(core.OutcomeLockLost) != 1 {
		t.Fatalf("lock lost reported %d times, want 1", ev.count(core.OutcomeLockLost))
	}
}

// ServeMux routes on the escaped path: /docs/x%2Fy is one document at the
// root and /docs/x/y a document in a folder. One key sent to both is a key
// reused, not a replay of the root document's response.
func TestEscapedPathFingerprinted(t *testing.T) {
	eng, _ := core.New(core.Config{})
	mux := http.NewServeMux()
	mux.Handle("POST /docs/{name}", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "root "+r.PathValue("name"))
	})))
	mux.Handle("POST /docs/{folder}/{name}", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "folder "+r.PathValue("folder"))
	})))
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/docs/x%2Fy", http.StatusOK, "root x/y"},
		{"/docs/x/y", http.StatusUnprocessableEntity, problemType("key-reused")},
		{"/docs/x%2Fy", http.StatusOK, "root x/y"}, // the replay
	} {
		r := httptest.NewRequest(http.MethodPost, tc.path, nil)
		r.Header.Set("Idempotency-Key", "escaped")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.body) {
			t.Fatalf("%s: %d %s, want %d %s", tc.path, w.Code, w.Body, tc.status, tc.body)
		}
	}
}

// A flushed response is stored when the handler returns: here a reverse
// proxy, which flushes every response without a Content-Length (a Go
// upstream's body over 2 KB). The retry is the replay; the upstream ran once.
func TestFlushedResponseStored(t *testing.T) {
	var upstreamRuns atomic.Int32
	big := strings.Repeat("x", 5000)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, fmt.Sprintf("payment %d ", upstreamRuns.Add(1))+big)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	eng, _ := core.New(core.Config{})
	srv := httptest.NewServer(eng.Middleware(httputil.NewSingleHostReverseProxy(u)))
	defer srv.Close()
	for i, replay := range []string{"", "true"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "proxied")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(b) != "payment 1 "+big || resp.Header.Get(core.HeaderReplay) != replay {
			t.Fatalf("request %d: %d %.20q replay %q, want 201 payment 1, replay %q",
				i, resp.StatusCode, b, resp.Header.Get(core.HeaderReplay), replay)
		}
	}
	if n := upstreamRuns.Load(); n != 1 {
		t.Fatalf("upstream ran %d times for one key", n)
	}
}

// A response whose status is not final (1xx, which a Gin handler can set
// with c.Status) is not stored: its replay would hang the client. The lock
// is released, and the next request runs.
func TestInformationalStatusNotStored(t *testing.T) {
	eng, _ := core.New(core.Config{Storable: func(int) bool { return true }, FailClosed: true})
	begin := func() (*core.Flight, *core.Response) {
		return eng.Begin(&core.Request{Method: http.MethodPost, Path: "/orders",
			Header: http.Header{"Idempotency-Key": {"informational"}}})
	}
	f, resp := begin()
	if f == nil {
		t.Fatalf("first request: %d %s, want a flight", resp.StatusCode, resp.Body)
	}
	f.Complete(http.StatusEarlyHints, http.Header{})
	if f, resp := begin(); f == nil {
		t.Fatalf("after a 103: %d %s, want a flight (nothing stored)", resp.StatusCode, resp.Body)
	} else {
		f.Abort()
	}
}

// A handler that hijacks the connection has its lock released without
// storing: what it wrote is not known.
func TestHijackedNotStored(t *testing.T) {
	ended := make(chan core.Event, 2)
	eng, _ := core.New(core.Config{Observer: func(ev core.Event) { ended <- ev }})
	var runs atomic.Int32
	srv := httptest.NewServer(eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		buf.Flush()
	})))
	defer srv.Close()
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hijack", nil)
		req.Header.Set("Idempotency-Key", "hijack")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(core.HeaderReplay) != "" {
			t.Fatalf("status %d, replay %q: want the hijacked 200", resp.StatusCode, resp.Header.Get(core.HeaderReplay))
		}
		// The client may see the hijacked response before the middleware
		// released the lock: the request's event says it has.
		if ev := <-ended; ev.Outcome != core.OutcomeNotStored {
			t.Fatalf("outcome %v, want not_stored", ev.Outcome)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (not stored)", runs.Load())
	}
}

func TestPerRequestTTL(t *testing.T) { synctest.Test(t, testPerRequestTTL) }

func testPerRequestTTL(t *testing.T) {
	eng, _ := core.New(core.Config{
		ResponseTTL: time.Hour,
		TTL: func(r *core.Request) time.Duration {
			if strings.HasPrefix(r.Path, "/payments") {
				return 50 * time.Millisecond
			}
			return 0
		},
	})
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
	send := func(path string) {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.Header.Set("Idempotency-Key", "ttl"+path)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	send("/payments")
	send("/orders")
	advance(50 * time.Millisecond)
	send("/payments") // expired: runs again
	send("/orders")   // an hour: replayed
	if runs.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", runs.Load())
	}
}

// Durations of centuries (math.MaxInt64, 292 years) wrap around nowhere:
// a record's ExpiresAt stays in the future (it was in 1734, and the
// replay cache and the tiered store's refill took it for expired), and a
// 409's Retry-After stays positive.
func TestLongestDurations(t *testing.T) {
	store := core.NewMemoryStore(0)
	eng, err := core.New(core.Config{Store: store, TTL: func(*core.Request) time.Duration { return math.MaxInt64 },
		RetryAfter: math.MaxInt64, BreakerCooldown: math.MaxInt64, StoreTimeout: math.MaxInt64, Observer: func(core.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	var conflict *httptest.ResponseRecorder
	var h http.Handler
	h = eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conflict = post(t, h, "k", "")
		w.WriteHeader(http.StatusCreated)
	}))
	post(t, h, "k", "")
	if got := conflict.Header().Get("Retry-After"); conflict.Code != http.StatusConflict || strings.HasPrefix(got, "-") || got == "" {
		t.Errorf("duplicate in flight: %d, Retry-After %q; want 409 with a positive one", conflict.Code, got)
	}
	st, err := store.Inspect(context.Background(), core.ID("", "k", ""))
	if err != nil || st.Record == nil {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	rec, err := core.DecodeRecord(st.Record)
	if err != nil || rec.ExpiresAt.Year() < 2262 {
		t.Fatalf("record expires at %v (%v); want 2262, the latest a record holds", rec.ExpiresAt, err)
	}
}

func TestDeclaredContentLengthOverLimit(t *testing.T) {
	eng, _ := core.New(core.Config{MaxBodyBytes: 10})
	read := false
	f, resp := eng.Begin(&core.Request{
		Method: http.MethodPost, Path: "/x", Header: http.Header{"Idempotency-Key": {"k"}},
		Body: readerFunc(func([]byte) (int, error) { read = true; return 0, io.EOF }), ContentLength: 1 << 30,
	})
	if f != nil || resp == nil || resp.StatusCode != http.StatusRequestEntityTooLarge || read {
		t.Fatalf("Begin = %v, %+v, body read: %v", f, resp, read)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// slowCreated is a handler that counts its runs in runs, takes d of a
// synctest bubble's time, and answers 201 "done".
func slowCreated(runs *atomic.Int32, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		advance(d)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
	})
}

// pollingStore hides the MemoryStore's Waiter, so the Engine polls.
type pollingStore struct{ core.Store }

func TestWaitModePollsStoresWithoutWaiter(t *testing.T) {
	synctest.Test(t, testWaitModePollsStoresWithoutWaiter)
}

func testWaitModePollsStoresWithoutWaiter(t *testing.T) {
	eng, _ := core.New(core.Config{Wait: 5 * time.Second, Store: pollingStore{core.NewMemoryStore(0)}})
	var runs atomic.Int32
	h := eng.Middleware(slowCreated(&runs, 200*time.Millisecond))
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := post(t, h, "poll", "{}")
			if w.Body.String() == "done" {
				codes[i] = w.Code
			}
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != http.StatusCreated {
			t.Fatalf("codes %v, want every waiter to get the 201", codes)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

// A waiter whose backoff would overshoot Config.Wait looks once more at the
// deadline: the waiter, sent once the first request's handler has started,
// polls at about 10, 30, 70 and 150 ms into its wait, the first request is
// done at about 200 ms, and the next step (160 ms) is cut at 300 ms.
func TestWaitLooksOnceMoreAtTheDeadline(t *testing.T) {
	synctest.Test(t, testWaitLooksOnceMoreAtTheDeadline)
}

func testWaitLooksOnceMoreAtTheDeadline(t *testing.T) {
	eng, _ := core.New(core.Config{Wait: 300 * time.Millisecond, Store: pollingStore{core.NewMemoryStore(0)}})
	var runs atomic.Int32
	slow := slowCreated(&runs, 200*time.Millisecond)
	started := make(chan struct{})
	var once sync.Once
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(started) })
		slow.ServeHTTP(w, r)
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, h, "deadline", "{}")
	}()
	<-started
	w := post(t, h, "deadline", "{}")
	<-done
	if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" || runs.Load() != 1 {
		t.Fatalf("waiter: %d replay %q, handler runs %d; want the replay of the one run", w.Code, w.Header().Get(core.HeaderReplay), runs.Load())
	}
}

func TestSlogObserverMasksKeys(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng, _ := core.New(core.Config{Observer: core.SlogObserver(l)})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	key := "550e8400-e29b-41d4-a716-446655440000"
	post(t, h, key, "{}")
	post(t, h, key, "{}")
	out := buf.String()
	if strings.Contains(out, key) || !strings.Contains(out, "key=550e****0000") {
		t.Fatalf("log does not mask the key:\n%s", out)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	var outcomes []string
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(f, "outcome="); ok {
				outcomes = append(outcomes, v)
			}
		}
	}
	if strings.Join(outcomes, ",") != "stored,replay" {
		t.Fatalf("outcomes %v, want stored then replay", outcomes)
	}
}

// MaskKey shows at most a third of a key, and never more than 8 characters.
func TestMaskKey(t *testing.T) {
	for key, want := range map[string]string{
		"":                                     "****",
		"ab":                                   "****",
		"abc":                                  "a****",
		"short":                                "s****",
		"123456789":                            "12****9",
		"550e8400-e29b-41d4-a716-446655440000": "550e****0000",
		strings.Repeat("x", 255):               "xxxx****xxxx",
	} {
		got := core.MaskKey(key)
		shown := len(got) - len("****")
		if got != want || shown > len(key)/3 || shown > 8 {
			t.Errorf("MaskKey(%q) = %q, want %q", key, got, want)
		}
	}
}

// Headers that middleware before idem sets per request (CORS, tracing) are
// not stored: a replay carries the values its own request got. Headers the
// handler changes after WriteHeader never reach the client and are not
// stored either.
func TestResponseHeadersOfOuterMiddlewareAndLateHeaders(t *testing.T) {
	eng, _ := core.New(core.Config{})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Origin") // the handler's own: stored
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-Late", "never sent")
	}))
	cors := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		h.ServeHTTP(w, r)
	})
	send := func(origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Header.Set("Idempotency-Key", "cors")
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		cors.ServeHTTP(w, r)
		return w
	}
	send("https://a.example")
	w := send("https://b.example")
	if w.Header().Get(core.HeaderReplay) != "true" {
		t.Fatal("second request not replayed")
	}
	if got := w.Header().Get("Access-Control-Allow-Origin"); got != "https://b.example" {
		t.Fatalf("replay carries Access-Control-Allow-Origin %q, want its own request's https://b.example", got)
	}
	if got := w.Header().Get("Vary"); got != "Origin" {
		t.Fatalf("replay lost the handler's Vary: %q", got)
	}
	if got := w.Header().Get("X-Late"); got != "" {
		t.Fatalf("a header set after WriteHeader was stored: %q", got)
	}
}

func TestBodyReadErrors(t *testing.T) {
	eng, _ := core.New(core.Config{})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler ran") }))
	for _, tc := range []struct {
		name   string
		body   func(w http.ResponseWriter) io.ReadCloser
		status int
		typ    string
		detail string
	}{
		{"MaxBytesReader", func(w http.ResponseWriter) io.ReadCloser {
			return http.MaxBytesReader(w, io.NopCloser(strings.NewReader(`{"a":"`+strings.Repeat("x", 100)+`"}`)), 10)
		}, http.StatusRequestEntityTooLarge, problemType("body-too-large"), "at most 10 bytes of body"}, // the reader's limit
		{"broken connection", func(http.ResponseWriter) io.ReadCloser {
			return io.NopCloser(readerFunc(func([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }))
		}, http.StatusBadRequest, problemType("unreadable-body"), ""},
	} {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Header.Set("Idempotency-Key", "body-"+tc.name)
		w := httptest.NewRecorder()
		r.Body = tc.body(w)
		h.ServeHTTP(w, r)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.typ) || !strings.Contains(w.Body.String(), tc.detail) {
			t.Errorf("%s: %d %s, want %d %s %q", tc.name, w.Code, w.Body, tc.status, tc.typ, tc.detail)
		}
	}
}

// A middleware before idem that read the body leaves it empty, while its
// Content-Length still declares it: taking it for an empty body would give
// every later body the first one's replay. It is refused with a 500, and
// the handler does not run. A Content-Encoding exempts it: a decompressing
// middleware keeps the compressed length, and an empty payload compresses
// to a few bytes.
func TestBodyConsumedBeforeMiddleware(t *testing.T) {
	eng, _ := core.New(core.Config{})
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	drain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // a logging middleware
		h.ServeHTTP(w, r)
	})
	for _, body := range []string{`{"amount":100}`, `{"amount":999}`} {
		w := post(t, drain, "consumed", body)
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), problemType("body-consumed")) {
			t.Fatalf("body read before the middleware: %d %s, want 500 %s", w.Code, w.Body, problemType("body-consumed"))
		}
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}

	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(""))
	r.ContentLength = 23 // gzip of nothing, decompressed by a middleware
	r.Header.Set("Content-Encoding", "gzip")
	r.Header.Set("Idempotency-Key", "decompressed")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("decompressed empty body: %d, %d runs", w.Code, runs.Load())
	}
}

// faultyStore is a memory store, without its Waiter, whose Acquire fails
// once the key is in flight (from the second call on), and whose Complete
// fails if failComplete is set.
type faultyStore struct {
	core.Store
	acquires     atomic.Int32
	failComplete bool
}

var errFaulty = errors.New("store down")

func (s *faultyStore) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	if s.acquires.Add(1) > 2 {
		return nil, "", errFaulty
	}
	return s.Store.Acquire(ctx, key, ttl)
}

func (s *faultyStore) Complete(ctx context.Context, key, token string, rec []byte, ttl time.Duration) error {
	if s.failComplete {
		return errFaulty
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// A request waiting for a key in flight must not run the handler when the
// store then fails: fail-open is for a store that cannot say, not for a key
// known to be running.
func TestWaitStoreErrorDoesNotRunUnprotected(t *testing.T) {
	synctest.Test(t, testWaitStoreErrorDoesNotRunUnprotected)
}

func testWaitStoreErrorDoesNotRunUnprotected(t *testing.T) {
	var ev events
	store := &faultyStore{Store: core.NewMemoryStore(0)}
	eng, _ := core.New(core.Config{Wait: 300 * time.Millisecond, Store: store, Observer: ev.observe})
	release, started := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan struct{})
	go func() { post(t, h, "k", "{}"); close(done) }()
	<-started
	w := post(t, h, "k", "{}") // in flight, then the store fails while it polls
	close(release)
	<-done
	if w.Code != http.StatusConflict {
		t.Errorf("waiter got %d, want 409", w.Code)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var conflict *core.Event
	for i := range ev.all {
		if ev.all[i].Outcome == core.OutcomeConflict {
			conflict = &ev.all[i]
		}
	}
	if conflict == nil || !errors.Is(conflict.Err, errFaulty) {
		t.Errorf("conflict event %+v, want one carrying the store error", conflict)
	}
}

// When the store fails to take the response, the handler has run: a retry
// must get 409 until the lock expires, not run it again.
func TestCompleteFailureKeepsLock(t *testing.T) { synctest.Test(t, testCompleteFailureKeepsLock) }

func testCompleteFailureKeepsLock(t *testing.T) {
	var ev events
	store := &faultyStore{Store: core.NewMemoryStore(0), failComplete: true}
	store.acquires.Store(-100) // Acquire works
	eng, _ := core.New(core.Config{LockTTL: 300 * time.Millisecond, Store: store, Observer: ev.observe})
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	if w := post(t, h, "k", "{}"); w.Code != http.StatusCreated {
		t.Fatalf("first request: %d", w.Code)
	}
	if ev.count(core.OutcomeStoreError) != 1 {
		t.Errorf("store error reported %d times, want 1", ev.count(core.OutcomeStoreError))
	}
	if w := post(t, h, "k", "{}"); w.Code != http.StatusConflict {
		t.Errorf("retry after a failed Complete got %d, want 409", w.Code)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times before the lock expired, want 1", n)
	}
	advance(300 * time.Millisecond) // LockTTL: the lock expires
	post(t, h, "k", "{}")
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times after the lock expired, want 2", n)
	}
}

// A Storable that panics must not strand the lock.
func TestStorablePanicReleasesLock(t *testing.T) {
	eng, _ := core.New(core.Config{Storable: func(status int) bool {
		if status == http.StatusCreated {
			panic("storable")
		}
		return true
	}})
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the caller")
			}
		}()
		post(t, h, "k", "{}")
	}()
	func() {
		defer func() { recover() }()
		post(t, h, "k", "{}")
	}()
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (the lock was released after the panic)", n)
	}
}

// lostRefresh is a memory store whose Refresh reports the lock lost.
type lostRefresh struct{ *core.MemoryStore }

func (lostRefresh) Refresh(context.Context, string, string, time.Duration) error {
	return core.ErrLockLost
}

// A lock lost while the handler runs (it expired and a duplicate took the
// key) is reported once, by the event of the request's end.
func TestLockLostReportedOnce(t *testing.T) { synctest.Test(t, testLockLostReportedOnce) }

func testLockLostReportedOnce(t *testing.T) {
	var ev events
	eng, _ := core.New(core.Config{LockTTL: 60 * time.Millisecond, Store: lostRefresh{core.NewMemoryStore(0)}, Observer: ev.observe})
	var runs atomic.Int32
	var h http.Handler
	h = eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			advance(100 * time.Millisecond) // refreshes fail, the lock expires
			if got := post(t, h, "k", "{}"); got.Code != http.StatusCreated {
				t.Errorf("duplicate after the lock expired: %d, want 201", got.Code)
			}
		}
		w.WriteHeader(http.StatusCreated)
	}))
	post(t, h, "k", "{}")
	if n := ev.count(core.OutcomeLockLost); n != 1 || ev.count(core.OutcomeStored) != 1 {
		t.Errorf("events %v, want one lock_lost (the first) and one stored (the duplicate)", ev.all)
	}
}

// A lock that expired while the handler ran, with no duplicate taking the
// key, still gets its response stored: the retry is a replay, not a second
// run of the handler.
func TestExpiredLockStoredLate(t *testing.T) {
	for name, store := range map[string]func() core.Store{
		"refresh finds the lock gone": func() core.Store { return lostRefresh{core.NewMemoryStore(0)} },
		"refreshes fail":              func() core.Store { return failingRefresh{core.NewMemoryStore(0)} },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ev events
				eng, _ := core.New(core.Config{LockTTL: 60 * time.Millisecond, Store: store(), Observer: ev.observe})
				var runs atomic.Int32
				h := eng.Middleware(slowCreated(&runs, 150*time.Millisecond))
				post(t, h, "k", "{}")
				if got := post(t, h, "k", "{}"); got.Code != http.StatusCreated || got.Header().Get(core.HeaderReplay) != "true" {
					t.Errorf("retry: %d replay %q, want the 201 replay", got.Code, got.Header().Get(core.HeaderReplay))
				}
				if n := runs.Load(); n != 1 {
					t.Errorf("handler ran %d times, want 1", n)
				}
				if ev.count(core.OutcomeStored) != 1 || ev.count(core.OutcomeReplay) != 1 {
					t.Errorf("events %v, want stored then replay", ev.all)
				}
				// The event says the lock had expired: a duplicate could have run.
				if !errors.Is(ev.all[0].Err, core.ErrLockLost) {
					t.Errorf("stored late with Err %v, want one wrapping ErrLockLost", ev.all[0].Err)
				}
			})
		})
	}
}

// A handler that outlives LockTTL while its refreshes succeed stores its
// response with no hint of an expired lock.
func TestRefreshedLockStoredClean(t *testing.T) { synctest.Test(t, testRefreshedLockStoredClean) }

func testRefreshedLockStoredClean(t *testing.T) {
	var ev events
	eng, _ := core.New(core.Config{LockTTL: 150 * time.Millisecond, Observer: ev.observe})
	h := eng.Middleware(slowCreated(new(atomic.Int32), 400*time.Millisecond))
	post(t, h, "k", "{}")
	if len(ev.all) != 1 || ev.all[0].Outcome != core.OutcomeStored || ev.all[0].Err != nil {
		t.Fatalf("events %v, want one stored without error", ev.all)
	}
}

// failingRefresh is a memory store whose Refresh fails as a store does
// when Redis is unreachable.
type failingRefresh struct{ *core.MemoryStore }

func (failingRefresh) Refresh(context.Context, string, string, time.Duration) error {
	return errors.New("i/o timeout")
}

// panickingRefresh is a memory store whose Refresh panics, as a buggy
// third-party store might.
type panickingRefresh struct {
	*core.MemoryStore
	calls chan struct{} // receives on every call, if there is room
}

func (s panickingRefresh) Refresh(context.Context, string, string, time.Duration) error {
	select {
	case s.calls <- struct{}{}:
	default:
	}
	panic("store bug")
}

// A store's panic in Refresh, which runs on a timer's goroutine, is an
// error like any other there: the process goes on, refreshing is tried
// again, and the response is still stored.
func TestRefreshPanicRecovered(t *testing.T) { synctest.Test(t, testRefreshPanicRecovered) }

func testRefreshPanicRecovered(t *testing.T) {
	calls := make(chan struct{}, 1)
	eng, err := core.New(core.Config{LockTTL: 30 * time.Millisecond, Store: panickingRefresh{core.NewMemoryStore(0), calls}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for i := range 2 { // a refresh panicked, and the next was tried
			select {
			case <-calls:
			case <-time.After(10 * time.Second):
				t.Errorf("refresh %d never came", i+1)
			}
		}
		w.WriteHeader(http.StatusCreated)
	}))
	if w := post(t, h, "refresh-panics", "{}"); w.Code != http.StatusCreated {
		t.Fatalf("status %d, want 201", w.Code)
	}
	if w := post(t, h, "refresh-panics", "{}"); w.Header().Get(core.HeaderReplay) != "true" || runs.Load() != 1 {
		t.Fatalf("retry: %d, replay %q, handler ran %d times; want the replay", w.Code, w.Header().Get(core.HeaderReplay), runs.Load())
	}
}

// A validator's error stays in the chain of the event's error, under
// ErrInvalidKey, for an Observer that branches on it.
func TestValidatorErrorWrapped(t *testing.T) {
	errBadTenant := errors.New("unknown tenant prefix")
	var ev events
	eng, _ := core.New(core.Config{
		ValidateKey: func(string) error { return errBadTenant },
		Observer:    ev.observe,
	})
	h := eng.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler ran") }))
	if w := post(t, h, "k", "{}"); w.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", w.Code)
	}
	if len(ev.all) != 1 || !errors.Is(ev.all[0].Err, core.ErrInvalidKey) || !errors.Is(ev.all[0].Err, errBadTenant) {
		t.Fatalf("events %v, want one whose error is both ErrInvalidKey and the validator's", ev.all)
	}
}

func TestKeyed(t *testing.T) {
	eng, _ := core.New(core.Config{})
	required, _ := core.New(core.Config{Required: true})
	noLegacy, _ := core.New(core.Config{LegacyKeyHeader: "-"})
	again, err := core.New(noLegacy.Config()) // Config goes back to New as it is
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		eng    *core.Engine
		method string
		header http.Header
		want   bool
	}{
		{"key", eng, http.MethodPost, http.Header{"Idempotency-Key": {"k"}}, true},
		{"empty key header", eng, http.MethodPost, http.Header{"Idempotency-Key": {""}}, true},
		{"legacy header", eng, http.MethodPost, http.Header{"X-Idempotency-Key": {"k"}}, true},
		{"legacy header refused", noLegacy, http.MethodPost, http.Header{"X-Idempotency-Key": {"k"}}, false},
		{"legacy header refused by Config", again, http.MethodPost, http.Header{"X-Idempotency-Key": {"k"}}, false},
		{"no key", eng, http.MethodPost, http.Header{}, false},
		{"no key, Required", required, http.MethodPost, http.Header{}, true},
		{"method not covered", eng, http.MethodGet, http.Header{"Idempotency-Key": {"k"}}, false},
		{"method not covered, Required", required, http.MethodGet, http.Header{}, false},
	} {
		if got := tc.eng.Keyed(tc.method, tc.header); got != tc.want {
			t.Errorf("%s: Keyed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// unwrapStore counts the Acquire calls to the store it wraps and says what
// it wraps, as a user's metrics wrapper would.
type unwrapStore struct {
	core.Store
	acquires atomic.Int32
}

func (s *unwrapStore) Acquire(ctx context.Context, key string, ttl time.Duration) ([]byte, string, error) {
	s.acquires.Add(1)
	return s.Store.Acquire(ctx, key, ttl)
}

func (s *unwrapStore) Unwrap() core.Store { return s.Store }

// The Engine finds a Waiter through a store that wraps one: a duplicate
// waits for the lock to go, then acquires once more, instead of polling.
func TestWaitModeFindsWrappedWaiter(t *testing.T) { synctest.Test(t, testWaitModeFindsWrappedWaiter) }

func testWaitModeFindsWrappedWaiter(t *testing.T) {
	store := &unwrapStore{Store: core.NewMemoryStore(0)}
	eng, _ := core.New(core.Config{Wait: 5 * time.Second, Store: store})
	var runs atomic.Int32
	started := make(chan struct{})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
		}
		advance(time.Second)
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, h, "wrapped", "{}")
	}()
	<-started
	w := post(t, h, "wrapped", "{}")
	<-done
	if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != "true" || runs.Load() != 1 {
		t.Fatalf("duplicate: %d replay %q, runs %d", w.Code, w.Header().Get(core.HeaderReplay), runs.Load())
	}
	if n := store.acquires.Load(); n != 3 {
		t.Fatalf("%d Acquire calls, want 3: the first, the duplicate's, and one once the lock went", n)
	}
}

// A store that wraps a TxStore without being one would lose the key's
// transaction: New refuses it.
func TestNewRefusesWrappedTxStore(t *testing.T) {
	_, err := core.New(core.Config{Store: &unwrapStore{Store: idemtest.NewTxStore(t)}})
	if err == nil || !strings.Contains(err.Error(), "TxStore") {
		t.Fatalf("New = %v, want an error naming TxStore", err)
	}
}

// Every event has a Context: a breaker's change, which is no request's,
// gets context.Background().
func TestEventsHaveContext(t *testing.T) {
	var mu sync.Mutex
	var missing, seen []core.Outcome
	eng, _ := core.New(core.Config{Store: failingStore{}, BreakerFailures: 1, Observer: func(ev core.Event) {
		mu.Lock()
		seen = append(seen, ev.Outcome)
		mu.Unlock()
		if ev.Context == nil {
			mu.Lock()
			missing = append(missing, ev.Outcome)
			mu.Unlock()
		}
	}})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	post(t, h, "a", "{}")
	post(t, h, "b", "{}")
	if len(missing) > 0 || !slices.Contains(seen, core.OutcomeBreaker) {
		t.Fatalf("events %v, without a Context: %v", seen, missing)
	}
}

// A request that goes through the middleware of one Engine twice (mounted
// twice on a route, or dispatched again by a handler) meets its own key's
// lock: it gets 500 middleware-twice at once, even with Config.Wait (the
// lock's holder waits for it), and the first pass stores none of it, so
// the key is free for the request once the middleware is mounted once. Do
// called again with its own key inside fn is refused at once the same way.
func TestMiddlewareTwice(t *testing.T) { synctest.Test(t, testMiddlewareTwice) }

// created counts its runs and answers 201.
func created(runs *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
}

func testMiddlewareTwice(t *testing.T) {
	var ev events
	eng, err := core.New(core.Config{Wait: 5 * time.Second, Observer: ev.observe})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	handler := created(&runs)
	start := time.Now()
	twice := eng.Middleware(eng.Middleware(handler))
	for range 2 {
		w := post(t, twice, "twice", `{}`)
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), problemType("middleware-twice")) ||
			w.Header().Get(core.HeaderReplay) != "" {
			t.Fatalf("through the middleware twice: %d %q %s, want 500 %s, not replayed", w.Code, w.Header(), w.Body, problemType("middleware-twice"))
		}
	}
	if d := time.Since(start); d != 0 {
		t.Errorf("refused after %v on the fake clock, want at once", d)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
	if n := ev.count(core.OutcomeConflict); n != 2 {
		t.Errorf("%d conflicts observed, want 2", n)
	}
	if w := post(t, eng.Middleware(handler), "twice", `{}`); w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("mounted once: %d after %d runs, want 201 after 1", w.Code, runs.Load())
	}

	_, _, err = core.Do(t.Context(), eng, "s", "k", func(ctx context.Context) (int, error) {
		_, _, err := core.Do(ctx, eng, "s", "k", func(context.Context) (int, error) { return 2, nil })
		if !errors.Is(err, core.ErrInFlight) {
			t.Errorf("Do inside Do of its key: %v, want ErrInFlight", err)
		}
		_, _, err = core.Do(ctx, eng, "s", "j", func(ctx context.Context) (int, error) {
			_, _, err := core.Do(ctx, eng, "s", "k", func(context.Context) (int, error) { return 3, nil })
			return 0, err
		})
		if !errors.Is(err, core.ErrInFlight) {
			t.Errorf("Do of its key inside Do of another key inside Do of its key: %v, want ErrInFlight", err)
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d != 0 {
		t.Errorf("Do refused after %v on the fake clock, want at once", d)
	}
}

// With a Storable that keeps 5xx responses too, the first pass of a
// request through the middleware twice must not store the second pass's
// 500 middleware-twice: once the middleware is mounted once, the key runs
// its handler, as docs/problems.md says (nothing is stored under the key).
// In the transactional mode too.
func TestMiddlewareTwiceStorableAll(t *testing.T) {
	t.Parallel()
	for _, tx := range []bool{false, true} {
		cfg := core.Config{Storable: func(int) bool { return true }}
		if tx {
			cfg.Store = idemtest.NewTxStore(t)
		}
		eng, err := core.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		handler := created(&runs)
		if w := post(t, eng.Middleware(eng.Middleware(handler)), "twice-all", `{}`); w.Code != http.StatusInternalServerError {
			t.Fatalf("tx %v, through the middleware twice: %d, want 500", tx, w.Code)
		}
		w := post(t, eng.Middleware(handler), "twice-all", `{}`)
		if w.Code != http.StatusCreated || runs.Load() != 1 {
			t.Fatalf("tx %v, mounted once: %d %q %s after %d runs, want 201 after 1 (the 500 middleware-twice was stored)",
				tx, w.Code, w.Header(), w.Body, runs.Load())
		}
	}
}

// failingComplete is a memory store whose Complete fails.
type failingComplete struct{ *core.MemoryStore }

func (failingComplete) Complete(context.Context, string, string, []byte, time.Duration) error {
	return errors.New("store down")
}

// An event's Duration runs from the request's start to its outcome, for the
// Observer and, without one, for the log of a store error.
func TestEventDuration(t *testing.T) { synctest.Test(t, testEventDuration) }

func testEventDuration(t *testing.T) {
	var evs events
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { advance(3 * time.Second) })
	eng, _ := core.New(core.Config{Observer: evs.observe})
	h := eng.Middleware(slow)
	post(t, h, "k1", "{}")
	post(t, h, "k1", "{}")
	if len(evs.all) != 2 || evs.all[0].Outcome != core.OutcomeStored || evs.all[1].Outcome != core.OutcomeReplay {
		t.Fatalf("events %+v, want stored then replay", evs.all)
	}
	if evs.all[0].Duration != 3*time.Second || evs.all[1].Duration != 0 {
		t.Fatalf("durations %v and %v, want 3s and 0 (the fake clock moves only in the handler)", evs.all[0].Duration, evs.all[1].Duration)
	}

	var buf bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	eng, _ = core.New(core.Config{Store: failingComplete{core.NewMemoryStore(0)}})
	post(t, eng.Middleware(slow), "k2", "{}")
	if out := buf.String(); !strings.Contains(out, "outcome=store_error") || !strings.Contains(out, "duration=3s") {
		t.Fatalf("log %q, want a store error of 3s", out)
	}
}
