package idemtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/idemkey"
)

// Serve mounts app behind an adapter's idempotency middleware built on eng,
// serves it on a loopback listener and returns its base URL
// ("http://127.0.0.1:port"). It stops the server in t.Cleanup.
//
// app must be routed for every method at /orders and at /orders/:id (a path
// parameter in the framework's syntax), so that the route template, not the
// path, reaches the Engine (Config.ScopeRoute scopes keys by it). Outside
// the idempotency middleware, as an application would, the harness installs
// the framework's recovery middleware (a panic in app must be recovered) and
// a middleware that sets the response header OuterHeader to the value of
// the request header OuterHeader, as CORS does with Origin.
type Serve func(t *testing.T, eng *core.Engine, app http.Handler) string

// OuterHeader is set on the response, before the idempotency middleware
// runs, to the request's value of the same header (see Serve): a replay
// must carry its own request's value, not the stored one.
const OuterHeader = "X-Outer"

// Request headers that drive the suite's handler.
const (
	hdrStatus = "X-Test-Status" // status to answer with (default 201)
	hdrHold   = "X-Test-Hold"   // wait for the test to release the server's held requests
	hdrPanic  = "X-Test-Panic"  // panic instead of answering
	hdrLate   = "X-Test-Late"   // panic after answering
	hdrSize   = "X-Test-Size"   // answer with a body of this many bytes
	hdrFlush  = "X-Test-Flush"  // flush the response after writing it
	hdrGone   = "X-Test-Gone"   // stream a body of goneSize bytes, waiting for the client to go away after its first part
	hdrUser   = "X-User-ID"     // the scope
)

// TestHTTP runs the HTTP conformance suite, the contract table row by row,
// against the integration that serve builds, on stores from newStore (nil
// means a fresh MemoryStore per subtest).
func TestHTTP(t *testing.T, serve Serve, newStore func(t *testing.T) core.Store) {
	t.Helper()
	if newStore == nil {
		newStore = func(*testing.T) core.Store { return core.NewMemoryStore(0) }
	}
	h := &harness{serve: serve, newStore: newStore}
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"MethodNotCovered", testMethodNotCovered},
		{"NoKeyOptional", testNoKeyOptional},
		{"NoKeyRequired", testNoKeyRequired},
		{"InvalidKeys", testInvalidKeys},
		{"LegacyHeader", testLegacyHeader},
		{"QuotedKey", testQuotedKey},
		{"Replay", testReplay},
		{"FingerprintMismatch", testFingerprintMismatch},
		{"CanonicalJSON", testCanonicalJSON},
		{"RouteTemplate", testRouteTemplate},
		{"QueryString", testQueryString},
		{"OuterHeaderNotStored", testOuterHeaderNotStored},
		{"InFlightConflict", testInFlightConflict},
		{"WaitMode", testWaitMode},
		{"StorePolicy", testStorePolicy},
		{"PanicReleasesLock", testPanicReleasesLock},
		{"BodyTooLarge", testBodyTooLarge},
		{"ExpectContinue", testExpectContinue},
		{"LargeResponseOmitted", testLargeResponseOmitted},
		{"ClientGoneMidResponse", testClientGoneMidResponse},
		{"Scope", testScope},
		{"StoreFailOpen", testStoreFailOpen},
		{"StoreFailClosed", testStoreFailClosed},
		{"ConcurrentDuplicates", testConcurrentDuplicates},
		{"ConcurrentDuplicatesWait", testConcurrentDuplicatesWait},
		{"BufferedCommitFails", testBufferedCommitFails},
		{"BufferedPanic", testBufferedPanic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, h)
		})
	}
}

type harness struct {
	serve    Serve
	newStore func(t *testing.T) core.Store
}

// app is the suite's handler: it counts its runs, tells started of each
// (if there is room), and answers as the request's X-Test-* headers say.
type app struct {
	runs    atomic.Int64
	started chan struct{}
	held    chan struct{} // closed by release: the held requests answer
	once    sync.Once
	tx      bool // the store is a core.TxStore
}

// release lets the held requests answer, and every later one at once.
func (a *app) release() { a.once.Do(func() { close(a.held) }) }

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n := a.runs.Add(1)
	select {
	case a.started <- struct{}{}:
	default:
	}
	if r.Header.Get(hdrHold) != "" {
		<-a.held
	}
	if r.Header.Get(hdrPanic) != "" {
		panic("idemtest: handler panics as asked")
	}
	if _, protected := core.InfoFromContext(r.Context()); protected && a.tx && r.Context().Value(probeTxKey{}) == nil {
		http.Error(w, "idemtest: the handler's context lacks the request's transaction (core.Flight.NewContext)", http.StatusInternalServerError)
		return
	}
	status := http.StatusCreated
	if s, _ := strconv.Atoi(r.Header.Get(hdrStatus)); s != 0 {
		status = s
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Order-Id", strconv.FormatInt(n, 10))
	w.Header().Set("Set-Cookie", "session=secret")
	w.WriteHeader(status)
	if r.Header.Get(hdrGone) != "" {
		streamUntilGone(w, r)
	} else if size, _ := strconv.Atoi(r.Header.Get(hdrSize)); size > 0 {
		w.Write(bytes.Repeat([]byte("x"), size)) //nolint:errcheck
	} else {
		fmt.Fprintf(w, `{"run":%d,"path":%q,"bytes":%d}`, n, r.URL.Path, len(body))
	}
	if r.Header.Get(hdrFlush) != "" {
		http.NewResponseController(w).Flush() //nolint:errcheck // a writer that cannot flush buffers
	}
	if r.Header.Get(hdrLate) != "" {
		panic("idemtest: handler panics after its response as asked")
	}
}

// goneSize is the size of the body streamUntilGone writes.
const goneSize = 256 << 10

// streamUntilGone streams a body of goneSize bytes as io.Copy does, in
// 4 KiB writes that stop at the first failed one: its first 16 KiB, then,
// once the client has gone away (the request's context is done; at
// most a second, for a server that does not tell), the rest.
func streamUntilGone(w http.ResponseWriter, r *http.Request) {
	chunk := bytes.Repeat([]byte("x"), 4<<10)
	for i := 0; i < goneSize; i += len(chunk) {
		if i == 16<<10 { // past net/http's 4 KiB buffer: sent (a flush would make Fiber's a body stream, not stored)
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// server is one integration under test with its own Engine and app.
type server struct {
	t      *testing.T
	url    string
	app    *app
	store  *probe
	client *http.Client
}

func (h *harness) start(t *testing.T, cfg core.Config) *server {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = h.newStore(t)
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = slowStoreTimeout
	}
	p := &probe{Store: cfg.Store, changed: make(chan struct{}), failCommit: make(map[string]bool)}
	cfg.Store = p
	_, waits := p.Store.(core.Waiter)
	_, tx := p.Store.(core.TxStore)
	switch {
	case waits && tx:
		cfg.Store = txWaitingProbe{txProbe{p}}
	case waits:
		cfg.Store = waitingProbe{p}
	case tx:
		cfg.Store = txProbe{p}
	}
	if cfg.Scope == nil {
		cfg.Scope = func(r *core.Request) string { return r.Header.Get(hdrUser) }
	}
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	a := &app{started: make(chan struct{}, 1), held: make(chan struct{}), tx: tx}
	url := h.serve(t, eng, a)
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	// Registered after serve, so they run before the server's own cleanup:
	// a server that waits for its handlers or for idle connections on
	// shutdown (fasthttp) is not left waiting for ours.
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(a.release)
	return &server{t: t, url: url, app: a, store: p, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// probe is a test server's store: it counts the Acquires (and a TxStore's
// Begins) that find their key in flight, so that a test knows its duplicates have arrived.
type probe struct {
	core.Store
	mu         sync.Mutex
	inFlight   int
	changed    chan struct{}   // closed and replaced on every count
	failCommit map[string]bool // store keys whose next transaction fails to commit
}

func (p *probe) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	rec, token, err := p.Store.Acquire(ctx, key, lockTTL)
	p.count(err)
	return rec, token, err
}

// count counts err if it is ErrInFlight.
func (p *probe) count(err error) {
	if errors.Is(err, core.ErrInFlight) {
		p.mu.Lock()
		p.inFlight++
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}

// Unwrap lets the Engine find the store's notifier and Invalidator.
func (p *probe) Unwrap() core.Store { return p.Store }

// waitingProbe is the probe of a store that implements core.Waiter.
type waitingProbe struct{ *probe }

func (p waitingProbe) Wait(ctx context.Context, key string) error {
	return p.Store.(core.Waiter).Wait(ctx, key)
}

// txProbe is the probe of a core.TxStore: the Engine sees a TxStore, and
// the probe counts the Begins that find their key in flight.
type txProbe struct{ *probe }

func (p txProbe) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	rec, tx, err := p.Store.(core.TxStore).Begin(ctx, key, idle)
	p.count(err)
	if tx == nil {
		return rec, nil, err
	}
	p.mu.Lock()
	fail := p.failCommit[key]
	delete(p.failCommit, key)
	p.mu.Unlock()
	return rec, &probeTx{Tx: tx, fail: fail}, err
}

// probeTx is a TxStore's transaction as the probe hands it to the Engine:
// its Context marks the handler's context (probeTxKey), and its Commit
// fails, rolling back, if the test asked for it (probe.failCommit).
type probeTx struct {
	core.Tx
	fail bool
}

type probeTxKey struct{}

func (t *probeTx) Context(ctx context.Context) context.Context {
	return context.WithValue(t.Tx.Context(ctx), probeTxKey{}, t)
}

func (t *probeTx) Commit(ctx context.Context, record []byte, ttl time.Duration, failed bool) error {
	if t.fail {
		t.Tx.Rollback(ctx) //nolint:errcheck // the failure is the point
		return ErrCommit
	}
	return t.Tx.Commit(ctx, record, ttl, failed)
}

// txWaitingProbe is the probe of a TxStore that implements core.Waiter.
type txWaitingProbe struct{ txProbe }

func (p txWaitingProbe) Wait(ctx context.Context, key string) error {
	return p.Store.(core.Waiter).Wait(ctx, key)
}

// failCommitOf makes the next commit of the key in the scope fail.
func (s *server) failCommitOf(scope, k string) {
	s.store.mu.Lock()
	s.store.failCommit[core.ID(scope, k, "")] = true
	s.store.mu.Unlock()
}

// waitInFlight waits until n Acquires have found their key in flight.
func (s *server) waitInFlight(n int) error {
	timeout := time.After(10 * time.Second)
	for {
		s.store.mu.Lock()
		got, changed := s.store.inFlight, s.store.changed
		s.store.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-timeout:
			return fmt.Errorf("%d requests found the key in flight in 10 s, want %d", got, n)
		}
	}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; headers are name/value pairs.
func (s *server) do(method, path, body string, headers ...string) response {
	s.t.Helper()
	r, err := s.try(method, path, body, headers...)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (s *server) try(method, path, body string, headers ...string) (response, error) {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (s *server) wantRuns(want int64) {
	s.t.Helper()
	if got := s.app.runs.Load(); got != want {
		s.t.Fatalf("handler ran %d times, want %d", got, want)
	}
}

func wantStatus(t *testing.T, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d; body %s", r.status, want, short(r.body))
	}
}

// short returns b, cut to 200 bytes, for a failure's message.
func short(b []byte) []byte {
	if len(b) > 200 {
		return append(b[:200:200], "..."...)
	}
	return b
}

// problemType is the type URI of the problem name, as docs/problems.md
// documents it.
func problemType(name string) string {
	return "https://github.com/idem-go/idem/blob/main/docs/problems.md#" + name
}

// contentTypeProblem is the media type of the Engine's refusals (RFC 9457).
const contentTypeProblem = "application/problem+json"

func wantProblem(t *testing.T, r response, status int, typ string) {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, contentTypeProblem) {
		t.Fatalf("Content-Type %q, want %s", ct, contentTypeProblem)
	}
	var p core.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want type %s and status %d", p, typ, status)
	}
}

func wantReplayOf(t *testing.T, got, first response) {
	t.Helper()
	if got.status != first.status || !bytes.Equal(got.body, first.body) {
		t.Fatalf("replay = %d %s, want %d %s", got.status, short(got.body), first.status, short(first.body))
	}
	if got.header.Get(core.HeaderReplay) != "true" {
		t.Fatalf("replay lacks %s: true (headers %v)", core.HeaderReplay, got.header)
	}
}

func wantNotReplay(t *testing.T, r response) {
	t.Helper()
	if v := r.header.Get(core.HeaderReplay); v != "" {
		t.Fatalf("unexpected %s: %s", core.HeaderReplay, v)
	}
}

const (
	key   = "Idempotency-Key"
	order = `{"item":"book","qty":2}`
)

func testMethodNotCovered(t *testing.T, h *harness) {
	s := h.start(t, core.Config{Required: true})
	for range 2 {
		r := s.do(http.MethodGet, "/orders", "", key, "k-get")
		wantStatus(t, r, http.StatusCreated)
		wantNotReplay(t, r)
	}
	s.wantRuns(2)
}

func testNoKeyOptional(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	for range 2 {
		r := s.do(http.MethodPost, "/orders", order)
		wantStatus(t, r, http.StatusCreated)
		wantNotReplay(t, r)
	}
	s.wantRuns(2)
}

func testNoKeyRequired(t *testing.T, h *harness) {
	s := h.start(t, core.Config{Required: true})
	wantProblem(t, s.do(http.MethodPost, "/orders", order), http.StatusBadRequest, problemType("missing-key"))
	s.wantRuns(0)
}

func testInvalidKeys(t *testing.T, h *harness) {
	s := h.start(t, core.Config{ValidateKey: idemkey.UUID})
	uuid := "123e4567-e89b-42d3-a456-426614174000"
	cases := []struct {
		name    string
		headers []string
	}{
		{"empty", []string{key, ""}},
		{"empty quoted", []string{key, `""`}},
		{"too long", []string{key, strings.Repeat("a", 256)}},
		{"non-ASCII", []string{key, "ключ-" + uuid[5:]}},
		{"fails validator", []string{key, "not-a-uuid"}},
		{"two key headers", []string{key, uuid, key, uuid}},
		{"two keys on one line", []string{key, uuid + ", " + uuid}},
		{"unterminated quoted key", []string{key, `"` + uuid}},
		{"junk after a quoted key", []string{key, `"` + uuid + `"x`}},
		{"legacy header differs", []string{key, uuid, "X-Idempotency-Key", "123e4567-e89b-42d3-a456-426614174001"}},
	}
	for _, c := range cases {
		r := s.do(http.MethodPost, "/orders", order, c.headers...)
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400; body %s", c.name, r.status, r.body)
		}
		wantProblem(t, r, http.StatusBadRequest, problemType("invalid-key"))
	}
	// A control character cannot be sent by net/http's client: write it raw.
	// The server's HTTP parser may refuse it first; either way it is a 400.
	if status := rawPost(t, s.url, "abc\x01def"); status != http.StatusBadRequest {
		t.Fatalf("control character in key: status %d, want 400", status)
	}
	s.wantRuns(0)
}

// rawPost sends a POST /orders with the given key over a plain TCP
// connection and returns the status code.
func rawPost(t *testing.T, baseURL, keyValue string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", keyValue, len(order), order)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading raw response: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func testLegacyHeader(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	first := s.do(http.MethodPost, "/orders", order, "X-Idempotency-Key", "legacy-1")
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "legacy-1"), first)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "legacy-1", "X-Idempotency-Key", "legacy-1"), first)
	s.wantRuns(1)
}

func testQuotedKey(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	first := s.do(http.MethodPost, "/orders", order, key, `"quoted-1"`)
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "quoted-1"), first)
	// The parameters of a Structured Field Item are not part of the key.
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, `"quoted-1";p=1`), first)
	s.wantRuns(1)
}

func testReplay(t *testing.T, h *harness) {
	s := h.start(t, core.Config{ReplayTimestamp: true})
	first := s.do(http.MethodPost, "/orders", order, key, "replay-1")
	wantStatus(t, first, http.StatusCreated)
	wantNotReplay(t, first)
	if first.header.Get("Set-Cookie") == "" {
		t.Fatal("the first response lost its Set-Cookie")
	}
	for range 3 {
		r := s.do(http.MethodPost, "/orders", order, key, "replay-1")
		wantReplayOf(t, r, first)
		if got, want := r.header.Get("X-Order-Id"), first.header.Get("X-Order-Id"); got != want {
			t.Fatalf("replayed X-Order-Id %q, want %q", got, want)
		}
		if got := r.header.Get("Content-Type"); got != "application/json" {
			t.Fatalf("replayed Content-Type %q", got)
		}
		if c := r.header.Get("Set-Cookie"); c != "" {
			t.Fatalf("Set-Cookie was stored and replayed: %q", c)
		}
		if ts, err := time.Parse(time.RFC3339, r.header.Get(core.HeaderOriginalTimestamp)); err != nil || time.Since(ts) > time.Hour {
			t.Fatalf("%s = %q (%v)", core.HeaderOriginalTimestamp, r.header.Get(core.HeaderOriginalTimestamp), err)
		}
	}
	s.wantRuns(1)
}

func testFingerprintMismatch(t *testing.T, h *harness) {
	s := h.start(t, core.Config{CriticalHeaders: []string{"X-Account"}})
	wantStatus(t, s.do(http.MethodPost, "/orders", order, key, "mismatch-1", "X-Account", "a"), http.StatusCreated)
	wantProblem(t, s.do(http.MethodPost, "/orders", `{"item":"book","qty":3}`, key, "mismatch-1", "X-Account", "a"),
		http.StatusUnprocessableEntity, problemType("key-reused"))
	wantProblem(t, s.do(http.MethodPut, "/orders", order, key, "mismatch-1", "X-Account", "a"),
		http.StatusUnprocessableEntity, problemType("key-reused"))
	wantProblem(t, s.do(http.MethodPost, "/orders", order, key, "mismatch-1", "X-Account", "b"),
		http.StatusUnprocessableEntity, problemType("key-reused"))
	// A second line of a critical header, which a handler reading every
	// value sees, is another request too.
	wantProblem(t, s.do(http.MethodPost, "/orders", order, key, "mismatch-1", "X-Account", "a", "X-Account", "b"),
		http.StatusUnprocessableEntity, problemType("key-reused"))
	s.wantRuns(1)
}

func testCanonicalJSON(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	first := s.do(http.MethodPost, "/orders", `{"item":"book","qty":2}`, key, "canon-1")
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", "{\n  \"qty\": 2,\n  \"item\": \"book\"\n}\n", key, "canon-1"), first)
	s.wantRuns(1)
}

func testRouteTemplate(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	first := s.do(http.MethodPost, "/orders/1", order, key, "route-1")
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, s.do(http.MethodPost, "/orders/1", order, key, "route-1"), first)
	// Same route, another resource: the key is reused, never a replay of
	// the other resource's response.
	wantProblem(t, s.do(http.MethodPost, "/orders/2", order, key, "route-1"), http.StatusUnprocessableEntity, problemType("key-reused"))
	// Another route: another request.
	wantProblem(t, s.do(http.MethodPost, "/orders", order, key, "route-1"), http.StatusUnprocessableEntity, problemType("key-reused"))
	s.wantRuns(1)

	// With ScopeRoute the same key may be used once per route: the route
	// template, not the path, so /orders/2 meets /orders/1's record.
	s = h.start(t, core.Config{ScopeRoute: true})
	wantStatus(t, s.do(http.MethodPost, "/orders/1", order, key, "route-2"), http.StatusCreated)
	wantStatus(t, s.do(http.MethodPost, "/orders", order, key, "route-2"), http.StatusCreated)
	wantProblem(t, s.do(http.MethodPost, "/orders/2", order, key, "route-2"), http.StatusUnprocessableEntity, problemType("key-reused"))
	s.wantRuns(2)
}

func testQueryString(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	first := s.do(http.MethodPost, "/orders?a=1&b=2", order, key, "query-1")
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, s.do(http.MethodPost, "/orders?b=2&a=1", order, key, "query-1"), first)
	wantProblem(t, s.do(http.MethodPost, "/orders?a=1&b=1000", order, key, "query-1"), http.StatusUnprocessableEntity, problemType("key-reused"))
	s.wantRuns(1)
}

func testOuterHeaderNotStored(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	first := s.do(http.MethodPost, "/orders", order, key, "outer-1", OuterHeader, "first")
	wantStatus(t, first, http.StatusCreated)
	if got := first.header.Get(OuterHeader); got != "first" {
		t.Fatalf("the harness does not set %s: %q", OuterHeader, got)
	}
	r := s.do(http.MethodPost, "/orders", order, key, "outer-1", OuterHeader, "second")
	wantReplayOf(t, r, first)
	if got := r.header.Get(OuterHeader); got != "second" {
		t.Fatalf("replay carries %s %q, want its own request's %q", OuterHeader, got, "second")
	}
	s.wantRuns(1)
}

func testInFlightConflict(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	done := make(chan response, 1)
	go func() {
		r, err := s.try(http.MethodPost, "/orders", order, key, "flight-1", hdrHold, "1")
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitStarted(t, s)
	r := s.do(http.MethodPost, "/orders", order, key, "flight-1")
	wantProblem(t, r, http.StatusConflict, problemType("key-in-flight"))
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q, want a number of seconds", r.header.Get("Retry-After"))
	}
	s.app.release()
	first := <-done
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "flight-1"), first)
	s.wantRuns(1)
}

// waitStarted waits until the handler has started: the server's first
// run, or the first since the last wait.
func waitStarted(t *testing.T, s *server) {
	t.Helper()
	select {
	case <-s.app.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
}

func testWaitMode(t *testing.T, h *harness) {
	s := h.start(t, core.Config{Wait: 10 * time.Second})
	done := make(chan response, 1)
	go func() {
		r, err := s.try(http.MethodPost, "/orders", order, key, "wait-1", hdrHold, "1")
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitStarted(t, s)
	waiter := make(chan response, 1)
	go func() { waiter <- s.do(http.MethodPost, "/orders", order, key, "wait-1") }()
	if err := s.waitInFlight(1); err != nil { // the second request found the key in flight: it waits
		t.Error(err)
	}
	s.app.release()
	first := <-done
	wantStatus(t, first, http.StatusCreated)
	wantReplayOf(t, <-waiter, first)
	s.wantRuns(1)

	// A bound shorter than the handler: 409 after waiting.
	s = h.start(t, core.Config{Wait: 100 * time.Millisecond})
	go func() {
		r, _ := s.try(http.MethodPost, "/orders", order, key, "wait-2", hdrHold, "1")
		done <- r
	}()
	waitStarted(t, s)
	wantProblem(t, s.do(http.MethodPost, "/orders", order, key, "wait-2"), http.StatusConflict, problemType("key-in-flight"))
	s.app.release()
	<-done
	s.wantRuns(1)
}

func testStorePolicy(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	for _, c := range []struct {
		status int
		stored bool
	}{
		{200, true}, {201, true}, {204, true}, {302, true}, {400, true}, {404, true}, {409, true}, {422, true},
		{408, false}, {425, false}, {429, false}, {499, false}, {500, false}, {502, false}, {503, false},
	} {
		k := "policy-" + strconv.Itoa(c.status)
		before := s.app.runs.Load()
		first := s.do(http.MethodPost, "/orders", order, key, k, hdrStatus, strconv.Itoa(c.status))
		wantStatus(t, first, c.status)
		second := s.do(http.MethodPost, "/orders", order, key, k, hdrStatus, strconv.Itoa(c.status))
		runs := s.app.runs.Load() - before
		switch {
		case c.stored && runs != 1:
			t.Fatalf("status %d: handler ran %d times, want once (stored)", c.status, runs)
		case c.stored:
			wantReplayOf(t, second, first)
		case runs != 2:
			t.Fatalf("status %d: handler ran %d times, want twice (not stored)", c.status, runs)
		default:
			wantNotReplay(t, second)
		}
	}
}

func testPanicReleasesLock(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	r, err := s.try(http.MethodPost, "/orders", order, key, "panic-1", hdrPanic, "1")
	if err == nil && r.status < 500 {
		t.Fatalf("a panicking handler answered %d", r.status)
	}
	s.wantRuns(1)
	// The lock was released, nothing stored: the retry runs the handler.
	wantStatus(t, s.do(http.MethodPost, "/orders", order, key, "panic-1"), http.StatusCreated)
	s.wantRuns(2)
}

func testBodyTooLarge(t *testing.T, h *harness) {
	s := h.start(t, core.Config{MaxBodyBytes: 64})
	big := `{"item":"` + strings.Repeat("b", 100) + `"}`
	wantProblem(t, s.do(http.MethodPost, "/orders", big, key, "big-1"), http.StatusRequestEntityTooLarge, problemType("body-too-large"))
	s.wantRuns(0)
	// Without a key the body is not read by the middleware at all.
	wantStatus(t, s.do(http.MethodPost, "/orders", big), http.StatusCreated)
	s.wantRuns(1)
}

// A request sent with "Expect: 100-continue", as curl sends a large body,
// its headers alone until the server asks for the body: one that the
// middleware refuses before reading its body (a bad key, a declared body
// over MaxBodyBytes) gets its answer at once, with "Connection: close" if
// the body is left unread (what follows on the connection would otherwise
// be read as that body); or a 100 Continue, and its answer once the body
// is sent. A server that waits for a body it never asked for leaves the
// client waiting. One that reads the body sends 100 Continue first.
func testExpectContinue(t *testing.T, h *harness) {
	s := h.start(t, core.Config{MaxBodyBytes: 64})
	big := `{"item":"` + strings.Repeat("b", 100) + `"}`
	cases := []struct {
		name, key, body string
		status          int
		replay          bool
	}{
		{"invalid key", strings.Repeat("k", 300), order, http.StatusBadRequest, false},
		{"body over MaxBodyBytes", "expect-big", big, http.StatusRequestEntityTooLarge, false},
		{"first", "expect-1", order, http.StatusCreated, false},
		{"replay", "expect-1", order, http.StatusCreated, true},
		{"key reused", "expect-1", `{"item":"other"}`, http.StatusUnprocessableEntity, false},
	}
	for _, c := range cases {
		resp, err := expectContinue(s.url, c.key, c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.StatusCode != c.status || (resp.Header.Get(core.HeaderReplay) == "true") != c.replay {
			t.Fatalf("%s: %d %v, want %d (replay: %v)", c.name, resp.StatusCode, resp.Header, c.status, c.replay)
		}
	}
	s.wantRuns(1)
}

// expectContinue sends a keyed POST /orders with "Expect: 100-continue"
// on a connection of its own, its body only once the server has answered
// 100 Continue, and returns the final response. It fails if the server
// sends nothing for 10 s after the headers, or answers without asking for
// the body and without closing the connection.
func expectContinue(baseURL, k, body string) (*http.Response, error) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	fmt.Fprintf(conn, "POST /orders HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", k, len(body))
	br := bufio.NewReader(conn)
	req := &http.Request{Method: http.MethodPost}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("no answer to the headers (neither 100 Continue nor a final status): %w", err)
	}
	if resp.StatusCode != http.StatusContinue {
		io.ReadAll(resp.Body) //nolint:errcheck
		if !resp.Close {
			return nil, fmt.Errorf("%d without 100 Continue, the body unread, and the connection kept open", resp.StatusCode)
		}
		return resp, nil
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if _, err := io.WriteString(conn, body); err != nil {
		return nil, err
	}
	resp, err = http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("after 100 Continue and the body: %w", err)
	}
	_, err = io.ReadAll(resp.Body)
	return resp, err
}

func testLargeResponseOmitted(t *testing.T, h *harness) {
	s := h.start(t, core.Config{MaxStoredBodyBytes: 1000})
	first := s.do(http.MethodPost, "/orders", order, key, "omit-1", hdrSize, "5000")
	wantStatus(t, first, http.StatusCreated)
	if len(first.body) != 5000 {
		t.Fatalf("first response has %d bytes, want 5000", len(first.body))
	}
	r := s.do(http.MethodPost, "/orders", order, key, "omit-1", hdrSize, "5000")
	wantStatus(t, r, http.StatusCreated)
	if len(r.body) != 0 {
		t.Fatalf("replay of an omitted body has %d bytes", len(r.body))
	}
	omitted := r.header.Get(core.HeaderBodyOmitted)
	if !strings.Contains(omitted, "size=5000") || !strings.Contains(omitted, "sha256=") {
		t.Fatalf("%s = %q", core.HeaderBodyOmitted, omitted)
	}
	s.wantRuns(1)
}

// A client that goes away while the response is sent: the response is
// stored whole, as the handler meant it, though the handler stops streaming
// at its first failed write; the retry gets it replayed, not cut short.
func testClientGoneMidResponse(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/orders", strings.NewReader(order))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(key, "gone-1")
	req.Header.Set(hdrGone, "1")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		t.Fatalf("reading the first byte: %v", err)
	}
	cancel() // the client goes away, its connection closed
	resp.Body.Close()
	want := response{status: http.StatusCreated, body: bytes.Repeat([]byte("x"), goneSize)}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := s.do(http.MethodPost, "/orders", order, key, "gone-1", hdrGone, "1")
		if r.status != http.StatusConflict {
			if len(r.body) != goneSize {
				t.Fatalf("the retry got %d bytes of body (status %d), want the %d the handler wrote", len(r.body), r.status, goneSize)
			}
			wantReplayOf(t, r, want)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key is still in flight after 10 s")
		}
	}
	s.wantRuns(1)
}

func testScope(t *testing.T, h *harness) {
	s := h.start(t, core.Config{})
	alice := s.do(http.MethodPost, "/orders", order, key, "scope-1", hdrUser, "alice")
	bob := s.do(http.MethodPost, "/orders", order, key, "scope-1", hdrUser, "bob")
	wantNotReplay(t, bob)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "scope-1", hdrUser, "alice"), alice)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "scope-1", hdrUser, "bob"), bob)
	s.wantRuns(2)
}

// downStore fails every call, as a store whose backend is unreachable.
type downStore struct{}

var errDown = errors.New("idemtest: store down")

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

func testStoreFailOpen(t *testing.T, h *harness) {
	var mu sync.Mutex
	var outcomes []core.Outcome
	s := h.start(t, core.Config{Store: downStore{}, Observer: func(e core.Event) {
		mu.Lock()
		outcomes = append(outcomes, e.Outcome)
		mu.Unlock()
	}})
	for range 2 {
		wantStatus(t, s.do(http.MethodPost, "/orders", order, key, "down-1"), http.StatusCreated)
	}
	s.wantRuns(2) // unprotected, as fail-open means
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 2 || outcomes[0] != core.OutcomeStoreError || outcomes[1] != core.OutcomeStoreError {
		t.Fatalf("outcomes %v, want two store errors", outcomes)
	}
}

func testStoreFailClosed(t *testing.T, h *harness) {
	s := h.start(t, core.Config{Store: downStore{}, FailClosed: true})
	wantProblem(t, s.do(http.MethodPost, "/orders", order, key, "down-2"), http.StatusServiceUnavailable, problemType("store-unavailable"))
	s.wantRuns(0)
	// A request without a key does not need the store.
	wantStatus(t, s.do(http.MethodPost, "/orders", order), http.StatusCreated)
}

const duplicates = 200

// burstTimeout is Config.StoreTimeout for the duplicates' burst: a store
// call that a busy machine slows past the default second would run its
// request unprotected (fail-open), which then holds until the test ends.
const burstTimeout = time.Minute

func testConcurrentDuplicates(t *testing.T, h *harness) {
	s := h.start(t, core.Config{StoreTimeout: burstTimeout})
	results := concurrently(t, s, duplicates, "dup-1", func(answered int) {
		if answered == duplicates-1 { // every duplicate got its 409
			s.app.release()
		}
	})
	s.wantRuns(1)
	firsts, conflicts := 0, 0
	var first response
	for _, r := range results {
		if r.status == http.StatusCreated && r.header.Get(core.HeaderReplay) == "" {
			firsts++
			first = r
		}
	}
	if firsts != 1 {
		t.Fatalf("%d first responses among %d duplicates, want 1", firsts, duplicates)
	}
	for _, r := range results {
		switch {
		case r.status == http.StatusConflict:
			wantProblem(t, r, http.StatusConflict, problemType("key-in-flight"))
			conflicts++
		case r.header.Get(core.HeaderReplay) != "":
			wantReplayOf(t, r, first)
		case r.status != http.StatusCreated:
			t.Fatalf("a duplicate got %d %s, want 409 or the replay", r.status, r.body)
		}
	}
	if conflicts != duplicates-1 {
		t.Fatalf("%d conflicts among %d duplicates of a held request, want %d", conflicts, duplicates, duplicates-1)
	}
}

func testConcurrentDuplicatesWait(t *testing.T, h *harness) {
	s := h.start(t, core.Config{Wait: 20 * time.Second, StoreTimeout: burstTimeout})
	go func() {
		if err := s.waitInFlight(duplicates - 1); err != nil { // the duplicates wait
			t.Error(err)
		}
		s.app.release()
	}()
	results := concurrently(t, s, duplicates, "dup-2", nil)
	s.wantRuns(1)
	for _, r := range results {
		if r.status != http.StatusCreated || !bytes.Equal(r.body, results[0].body) {
			t.Fatalf("in wait mode got %d %s, want every response to be 201 %s", r.status, r.body, results[0].body)
		}
	}
}

// concurrently sends n identical requests at once, each held by the handler
// until the server's release; answered, if not nil, is told how many have
// been answered after each answer.
func concurrently(t *testing.T, s *server, n int, k string, answered func(int)) []response {
	t.Helper()
	results := make([]response, n)
	var (
		wg    sync.WaitGroup
		count atomic.Int64
	)
	start := make(chan struct{})
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := s.try(http.MethodPost, "/orders", order, key, k, hdrHold, "1")
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				s.app.release()
			}
			results[i] = r
			if answered != nil {
				answered(int(count.Add(1)))
			}
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return results
}

// testBufferedCommitFails runs on a core.TxStore: newStore's if it is one,
// else NewTxStore's. A flight whose commit fails answers 503 instead of the
// handler's response, none of which reached the client, even flushed and
// larger than any write buffer; the headers set before the handler stay.
// Nothing was kept: the retry runs the handler, and its response, sent
// after its commit, replays.
func testBufferedCommitFails(t *testing.T, h *harness) {
	store := h.newStore(t)
	if _, ok := store.(core.TxStore); !ok {
		store = NewTxStore(t)
	}
	s := h.start(t, core.Config{Store: store})
	s.failCommitOf("u1", "commit-1")
	const size = "200000"
	r := s.do(http.MethodPost, "/orders", order, key, "commit-1", hdrUser, "u1", hdrSize, size, hdrFlush, "1", OuterHeader, "o1")
	wantProblem(t, r, http.StatusServiceUnavailable, problemType("store-unavailable"))
	if r.header.Get("Retry-After") == "" || r.header.Get("X-Order-Id") != "" || r.header.Get(OuterHeader) != "o1" {
		t.Fatalf("503 headers %v: want Retry-After, %s: o1 and none of the handler's", r.header, OuterHeader)
	}
	s.wantRuns(1)

	first := s.do(http.MethodPost, "/orders", order, key, "commit-1", hdrUser, "u1", hdrSize, size, hdrFlush, "1")
	wantStatus(t, first, http.StatusCreated)
	wantNotReplay(t, first)
	if n, _ := strconv.Atoi(size); len(first.body) != n || first.header.Get("X-Order-Id") != "2" {
		t.Fatalf("retry answered %d bytes, X-Order-Id %q: want %s bytes of run 2", len(first.body), first.header.Get("X-Order-Id"), size)
	}
	s.wantRuns(2)
	wantReplayOf(t, s.do(http.MethodPost, "/orders", order, key, "commit-1", hdrUser, "u1", hdrSize, size), first)
	s.wantRuns(2)
}

// testBufferedPanic runs on a core.TxStore, as testBufferedCommitFails: a
// handler that panics after writing its response (past any write buffer)
// rolls back, and none of that response reaches the client, who gets the
// recovery's 500 (or a broken connection); the retry runs the handler. (Not
// after a flush: Fiber's adaptor of net/http handlers swallows a panic once
// the handler flushed, and sends what it wrote as a whole response.)
func testBufferedPanic(t *testing.T, h *harness) {
	store := h.newStore(t)
	if _, ok := store.(core.TxStore); !ok {
		store = NewTxStore(t)
	}
	s := h.start(t, core.Config{Store: store})
	r, err := s.try(http.MethodPost, "/orders", order, key, "late-1", hdrSize, "200000", hdrLate, "1")
	if err == nil && (r.status < 500 || r.header.Get("X-Order-Id") != "" || r.header.Get("Set-Cookie") != "") {
		t.Fatalf("a handler that panicked after its response: %d %v %s, want a 5xx without its headers", r.status, r.header, short(r.body))
	}
	s.wantRuns(1)
	first := s.do(http.MethodPost, "/orders", order, key, "late-1")
	wantStatus(t, first, http.StatusCreated)
	wantNotReplay(t, first)
	s.wantRuns(2)
}
