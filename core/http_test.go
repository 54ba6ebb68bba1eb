package core_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
)

// serveMux is the net/http harness of the conformance suite: a Go 1.22+
// ServeMux, whose patterns give the route template to the middleware
// inside it.
func serveMux(t *testing.T, eng *core.Engine, app http.Handler) string {
	mux := http.NewServeMux()
	mux.Handle("/orders", eng.Middleware(app))
	mux.Handle("/orders/{id}", eng.Middleware(app))
	srv := httptest.NewUnstartedServer(recoverer(mux))
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// recoverer turns a panic into a 500, as an application's recovery
// middleware would, and sets the suite's outer header.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idemtest.OuterHeader, r.Header.Get(idemtest.OuterHeader))
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func TestHTTPConformance(t *testing.T) {
	idemtest.TestHTTP(t, serveMux, nil)
}

// TestMiddlewareOutsideMux: around the mux, no request has a route
// template, and Event.Route is "unmatched" whatever the path, so that
// clients cannot grow a metric's label values; Config.ScopeRoute then joins
// the path, so a key is still once per endpoint.
func TestMiddlewareOutsideMux(t *testing.T) {
	for _, scopeRoute := range []bool{false, true} {
		var routes []string
		eng, err := core.New(core.Config{ScopeRoute: scopeRoute, Observer: func(ev core.Event) { routes = append(routes, ev.Route) }})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /items/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
		h := eng.Middleware(mux)
		post := func(path, key string) int {
			r := httptest.NewRequest(http.MethodPost, path, nil)
			r.Header.Set("Idempotency-Key", key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		for i := range 5 {
			post("/nowhere/"+strconv.Itoa(i), "k"+strconv.Itoa(i))
		}
		post("/items/1", "same")
		code := post("/items/2", "same")
		if want := map[bool]int{false: http.StatusUnprocessableEntity, true: http.StatusCreated}[scopeRoute]; code != want {
			t.Errorf("ScopeRoute %v: one key sent to /items/1, then /items/2: %d, want %d", scopeRoute, code, want)
		}
		if len(routes) != 7 || slices.ContainsFunc(routes, func(r string) bool { return r != "unmatched" }) {
			t.Errorf("ScopeRoute %v: event routes %q, want 7 times \"unmatched\"", scopeRoute, routes)
		}
	}
}

// serveOrders serves POST /orders through an Engine of cfg's middleware to
// a handler that calls run and answers 201, for the idemtest HTTP kits.
func serveOrders(t *testing.T, cfg core.Config, run func()) string {
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run()
		w.WriteHeader(http.StatusCreated)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestMiddlewareBodySmuggling verifies that net/http leaves no refused body
// on the connection: the middleware answers 413 or 400 without reading the
// body, and the server discards what is left (up to 256 KiB) or closes the
// connection, so the request inside the body never runs.
func TestMiddlewareBodySmuggling(t *testing.T) {
	t.Parallel()
	idemtest.TestSmuggling(t, 0, serveOrders)
}

// TestMiddlewareRefusedLargeBody: a client still sending a large body that
// the middleware refuses unread reads the answer (net/http waits for it
// before it closes the connection).
func TestMiddlewareRefusedLargeBody(t *testing.T) {
	t.Parallel()
	idemtest.TestRefusedLargeBody(t, serveOrders)
}

// TestMiddlewareTruncatedBody: a body cut short by the client is refused
// (net/http reports it as io.ErrUnexpectedEOF), nothing stored.
func TestMiddlewareTruncatedBody(t *testing.T) {
	t.Parallel()
	idemtest.TestTruncatedBody(t, serveOrders)
}

// The headers a replay adds (the replay mark, Content-Length, the original
// timestamp) share one allocation, but each is a slice of its own: a
// middleware that adds a value to one leaves the others as they are.
func TestReplayHeadersDoNotAlias(t *testing.T) {
	eng, _ := core.New(core.Config{ReplayTimestamp: true})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("hello")) //nolint:errcheck
	}))
	post(t, h, "alias", "{}")
	hdr := post(t, h, "alias", "{}").Header() // the map the replay was written to
	hdr.Add("X-Idempotency-Replay", "again")
	hdr.Add("Content-Length", "7")
	if got := hdr.Values("Content-Length"); !slices.Equal(got, []string{"5", "7"}) {
		t.Errorf("Content-Length = %q after the Adds, want [5 7]", got)
	}
	if got := hdr.Values(core.HeaderOriginalTimestamp); len(got) != 1 || got[0] == "7" {
		t.Errorf("original timestamp = %q after the Adds", got)
	}
}

// A replay of an omitted body adds four headers, each its own slice.
func TestReplayHeadersOfAnOmittedBody(t *testing.T) {
	eng, _ := core.New(core.Config{ReplayTimestamp: true, MaxStoredBodyBytes: 2})
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("hello")) //nolint:errcheck
	}))
	post(t, h, "omitted", "{}")
	hdr := post(t, h, "omitted", "{}").Header()
	names := []string{"X-Idempotency-Replay", "Content-Length", core.HeaderOriginalTimestamp, core.HeaderBodyOmitted}
	for _, name := range names {
		if len(hdr[name]) != 1 || hdr[name][0] == "" {
			t.Fatalf("%s = %q, want one value", name, hdr[name])
		}
		hdr.Add(name, "again")
	}
	for _, name := range names {
		if got := hdr[name]; len(got) != 2 || got[0] == "again" || got[1] != "again" {
			t.Errorf("%s = %q after an Add to each", name, got)
		}
	}
	if got := hdr.Get(core.HeaderBodyOmitted); !strings.HasSuffix(got, "; size=5") {
		t.Errorf("%s = %q", core.HeaderBodyOmitted, got)
	}
}

// Flight.Complete leaves the header map it is given as it is: an adapter
// may pass the framework's live headers, which the client still gets, and
// the record leaves out the denied ones and those set before the handler.
func TestFlightCompleteLeavesHeaderAlone(t *testing.T) {
	eng, _ := core.New(core.Config{})
	preset := http.Header{"Access-Control-Allow-Origin": {"*"}}
	f, resp := eng.Begin(&core.Request{Method: http.MethodPost, Path: "/orders",
		Header: http.Header{"Idempotency-Key": {"complete-1"}}, ResponseHeader: preset})
	if f == nil {
		t.Fatalf("Begin: %+v", resp)
	}
	live := http.Header{"Access-Control-Allow-Origin": {"*"}, "Set-Cookie": {"s=1"}, "Location": {"/orders/1"}}
	want := live.Clone()
	if failed := f.Complete(http.StatusCreated, live); failed != nil {
		t.Fatalf("Complete: %+v", failed)
	}
	if !maps.EqualFunc(live, want, slices.Equal) {
		t.Errorf("Complete changed the headers it was given: %v, want %v", live, want)
	}
	_, replay := eng.Begin(&core.Request{Method: http.MethodPost, Path: "/orders",
		Header: http.Header{"Idempotency-Key": {"complete-1"}}})
	if replay == nil || replay.Header.Get("Location") != "/orders/1" ||
		replay.Header.Get("Set-Cookie") != "" || replay.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("replay headers %v: want Location only of the handler's", replay)
	}
}

// Config.CriticalHeaders and KeyHeader may be given in any case: the
// Engine reads them in canonical form, as http.Header stores them.
func TestHeaderNamesAnyCase(t *testing.T) {
	eng, err := core.New(core.Config{KeyHeader: "x-request-key", CriticalHeaders: []string{"x-account"}})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(account string) int {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Header.Set("X-Request-Key", "any-case")
		r.Header.Set("X-Account", account)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if got := []int{send("a"), send("a"), send("b")}; !slices.Equal(got, []int{201, 201, 422}) || runs != 1 {
		t.Errorf("codes %v with %d runs, want [201 201 422] with 1 run (the second a replay, the third another account)", got, runs)
	}
}

// A middleware before idem that decompresses the body (gin-contrib/gzip)
// drops Content-Encoding but leaves ContentLength as sent: a body shorter
// once decompressed is the whole body, run and replayed as any other.
func TestMiddlewareDecompressedBody(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	var got string
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	gunzip := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Header.Del("Content-Encoding")
		r.Header.Del("Content-Length")
		r.Body = zr
		h.ServeHTTP(w, r)
	})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte(`{"qty":1}`)) //nolint:errcheck // a bytes.Buffer
	zw.Close()                    //nolint:errcheck
	for i, want := range []string{"", "true"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(zipped.Bytes()))
		r.Header.Set("Idempotency-Key", "gzipped")
		r.Header.Set("Content-Encoding", "gzip")
		w := httptest.NewRecorder()
		gunzip.ServeHTTP(w, r)
		if w.Code != http.StatusCreated || w.Header().Get(core.HeaderReplay) != want {
			t.Fatalf("request %d of a %d-byte gzip body of 9 bytes: %d %s, replay %q", i, zipped.Len(), w.Code, w.Body, w.Header().Get(core.HeaderReplay))
		}
	}
	if runs.Load() != 1 || got != `{"qty":1}` {
		t.Fatalf("%d runs on %q; want 1 on the decompressed body", runs.Load(), got)
	}
}

// TestMiddlewareHostPatterns: a ServeMux that routes on the host sends one
// path of two hosts to two handlers, so one key sent to both is a key
// reused (422), never the first host's answer replayed for the second; a
// host's port, which the mux ignores, changes nothing.
func TestMiddlewareHostPatterns(t *testing.T) {
	created, runs := namedHandlers(t)
	mux := http.NewServeMux()
	for _, host := range []string{"a.example", "b.example"} {
		mux.Handle("POST "+host+"/orders", created(host))
	}
	onHost := func(host string) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/orders", nil)
			r.Host = host
			return r
		}
	}
	wantOneRunThenReused(t, mux, runs, "a.example", onHost("a.example"), onHost("a.example:8080"), onHost("b.example"))
}

// Two sub-routers mounted with http.StripPrefix see one path: the path as
// sent joins the fingerprint, so one key sent to both is a key reused
// (422), never the first mount's answer replayed by the second.
func TestMiddlewareStripPrefixMounts(t *testing.T) {
	created, runs := namedHandlers(t)
	root := http.NewServeMux()
	for _, tenant := range []string{"a", "b"} {
		sub := http.NewServeMux()
		sub.Handle("POST /orders", created(tenant))
		root.Handle("/"+tenant+"/", http.StripPrefix("/"+tenant, sub))
	}
	to := func(path string) func() *http.Request {
		return func() *http.Request { return httptest.NewRequest(http.MethodPost, path+"?x=1", nil) }
	}
	wantOneRunThenReused(t, root, runs, "a", to("/a/orders"), to("/a/orders"), to("/b/orders"))
}

// A handler before idem that routes on something else than the path sent
// (here a header, by rewriting r.URL) sends one RequestURI to two
// handlers: the path routed on joins the fingerprint too, so one key sent
// to both is a key reused (422), never v1's answer replayed for v2.
func TestMiddlewareRewrittenPath(t *testing.T) {
	created, runs := namedHandlers(t)
	mux := http.NewServeMux()
	for _, v := range []string{"v1", "v2"} {
		mux.Handle("POST /"+v+"/orders", created(v))
	}
	versioned := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + r.Header.Get("Api-Version") + r.URL.Path
		mux.ServeHTTP(w, r2)
	})
	version := func(v string) func() *http.Request {
		return func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/orders", nil)
			r.Header.Set("Api-Version", v)
			return r
		}
	}
	wantOneRunThenReused(t, versioned, runs, "v1", version("v1"), version("v1"), version("v2"))
}

// namedHandlers returns a function that makes handlers behind one Engine's
// Middleware, each answering 201 and adding its name to *runs.
func namedHandlers(t *testing.T) (created func(name string) http.Handler, runs *[]string) {
	t.Helper()
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runs = new([]string)
	return func(name string) http.Handler {
		return eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			*runs = append(*runs, name)
			w.WriteHeader(http.StatusCreated)
		}))
	}, runs
}

// wantOneRunThenReused sends first, again and other, each with one key, to
// h: first runs its handler, named name (201), again is its replay (201, no
// run), other, which reaches another handler, is a key reused (422).
func wantOneRunThenReused(t *testing.T, h http.Handler, runs *[]string, name string, first, again, other func() *http.Request) {
	t.Helper()
	var got []int
	for _, r := range []*http.Request{first(), again(), other()} {
		r.Header.Set("Idempotency-Key", "one-key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got = append(got, w.Code)
	}
	if !slices.Equal(got, []int{201, 201, 422}) || !slices.Equal(*runs, []string{name}) {
		t.Errorf("codes %v, handlers run %q; want [201 201 422] and %s's once", got, *runs, name)
	}
}

// A path sent with a character that url.URL.EscapedPath escapes (/a{b}) is
// fingerprinted in EscapedPath's form (/a%7Bb%7D), the one path routers
// see in both: one key sent with either form replays one record.
func TestMiddlewareSentPathEscaped(t *testing.T) {
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	var got []string
	for _, target := range []string{"/a%7Bb%7D", "/a{b}"} {
		r := httptest.NewRequest(http.MethodPost, target, nil)
		r.Header.Set("Idempotency-Key", "one-key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got = append(got, strconv.Itoa(w.Code)+" "+w.Header().Get(core.HeaderReplay))
	}
	if !slices.Equal(got, []string{"201 ", "201 true"}) || runs != 1 {
		t.Errorf("got %q, %d runs; want [201, 201 replayed] and one run", got, runs)
	}
}

// A timeout that waits for the handler and answers for it (chi's
// middleware.Timeout) goes inside the middleware: its 504 is the response,
// not stored, so a retry runs the handler again. What the handlers inside
// answer is stored, a handler that writes nothing (net/http's 200)
// included, whatever a deadline set before the middleware says.
func TestMiddlewareTimeoutInside(t *testing.T) {
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	expired := func(r *http.Request) (*http.Request, context.CancelFunc) {
		ctx, cancel := context.WithDeadline(r.Context(), time.Now())
		return r.WithContext(ctx), cancel
	}
	timeout := func(next http.Handler) http.Handler { // chi's middleware.Timeout, at its deadline at once
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r, cancel := expired(r)
			defer cancel()
			next.ServeHTTP(w, r)
			if r.Context().Err() == context.DeadlineExceeded {
				w.WriteHeader(http.StatusGatewayTimeout)
			}
		})
	}
	var runs atomic.Int32
	gaveUp := eng.Middleware(timeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-r.Context().Done() // as chi's documentation shows: the timeout answers
	})))
	for want := range int32(2) {
		if w := post(t, gaveUp, "gave-up", `{}`); w.Code != http.StatusGatewayTimeout || w.Header().Get(core.HeaderReplay) != "" ||
			runs.Load() != want+1 {
			t.Fatalf("timeout inside, request %d: %d %q after %d runs, want 504, not replayed, after %d", want+1, w.Code, w.Header(), runs.Load(), want+1)
		}
	}

	runs.Store(0)
	silent := eng.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) }))
	for i, replay := range []string{"", "true"} {
		r, cancel := expired(httptest.NewRequest(http.MethodPost, "/orders", nil))
		r.Header.Set("Idempotency-Key", "silent")
		w := httptest.NewRecorder()
		silent.ServeHTTP(w, r)
		cancel()
		if w.Code != http.StatusOK || w.Header().Get(core.HeaderReplay) != replay || runs.Load() != 1 {
			t.Fatalf("a handler that writes nothing, request %d: %d %q after %d runs, want 200 (replay %q) after 1",
				i+1, w.Code, w.Header(), runs.Load(), replay)
		}
	}
}

// goneWriter is a client that goes away after its first write.
type goneWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (w *goneWriter) Write(p []byte) (int, error) {
	if w.writes++; w.writes > 1 {
		return 0, io.ErrClosedPipe
	}
	return w.ResponseRecorder.Write(p)
}

// Once a write to the client fails, a handler's writes report success while
// its body is still stored whole, and fail again past MaxStoredBodyBytes,
// so that a handler that writes until its client goes away still ends.
func TestClientGoneWritesEnd(t *testing.T) {
	eng, err := core.New(core.Config{MaxStoredBodyBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	var accepted int
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for accepted < 100 {
			if _, err := w.Write([]byte("abcd")); err != nil {
				return
			}
			accepted++
		}
	}))
	r := httptest.NewRequest(http.MethodPost, "/orders", nil)
	r.Header.Set("Idempotency-Key", "gone")
	h.ServeHTTP(&goneWriter{ResponseRecorder: httptest.NewRecorder()}, r)
	if accepted != 2 { // 4 sent, 4 more stored; the third goes past 10 bytes
		t.Errorf("%d writes reported done, want 2: the third passes MaxStoredBodyBytes after the client went away", accepted)
	}
}
