package echoidem_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/echoidem"
)

const order = `{"item":"book","qty":2}`

// send serves one request in-process; headers are name/value pairs.
func send(e *echo.Echo, method, path, key string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(order))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func newEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func wantResponse(t *testing.T, what string, rec *httptest.ResponseRecorder, status int, body string, replay bool) {
	t.Helper()
	if rec.Code != status || rec.Body.String() != body {
		t.Fatalf("%s: %d %q, want %d %q", what, rec.Code, rec.Body.String(), status, body)
	}
	if got := rec.Header().Get(core.HeaderReplay) == "true"; got != replay {
		t.Fatalf("%s: replayed = %v, want %v", what, got, replay)
	}
}

func wantRuns(t *testing.T, runs *atomic.Int64, want int64) {
	t.Helper()
	if got := runs.Load(); got != want {
		t.Fatalf("handler ran %d times, want %d", got, want)
	}
}

// Echo routes on the escaped path: /docs/x%2Fversions is the document
// "x/versions" and /docs/x/versions the versions of "x". One key sent to
// both is a key reused, not a replay of the first one's response.
func TestEchoEscapedPathFingerprinted(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.Use(echoidem.New(newEngine(t, core.Config{})))
	e.POST("/docs/:name", func(c echo.Context) error { return c.String(http.StatusCreated, "doc") })
	e.POST("/docs/:name/versions", func(c echo.Context) error { return c.String(http.StatusCreated, "version") })
	wantResponse(t, "document", send(e, http.MethodPost, "/docs/x%2Fversions", "escaped"), http.StatusCreated, "doc", false)
	if rec := send(e, http.MethodPost, "/docs/x/versions", "escaped"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("the same key on /docs/x/versions: %d %s, want 422", rec.Code, rec.Body)
	}
	wantResponse(t, "retry", send(e, http.MethodPost, "/docs/x%2Fversions", "escaped"), http.StatusCreated, "doc", true)
}

// A handler's error is rendered by Echo's HTTPErrorHandler while the
// middleware captures: a 400 is stored and replayed byte for byte, a 500
// is not stored.
func TestEchoHandlerErrorRenderedAndStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echoidem.New(newEngine(t, core.Config{})))
	e.POST("/bad", func(c echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusBadRequest, "qty must be positive")
	})
	e.POST("/fail", func(c echo.Context) error {
		runs.Add(1)
		return errors.New("database down")
	})

	first := send(e, http.MethodPost, "/bad", "k-400")
	wantResponse(t, "first 400", first, http.StatusBadRequest, `{"message":"qty must be positive"}`+"\n", false)
	wantResponse(t, "replayed 400", send(e, http.MethodPost, "/bad", "k-400"), http.StatusBadRequest, first.Body.String(), true)
	wantRuns(t, &runs, 1)

	const internal = `{"message":"Internal Server Error"}` + "\n"
	wantResponse(t, "first 500", send(e, http.MethodPost, "/fail", "k-500"), http.StatusInternalServerError, internal, false)
	wantResponse(t, "retried 500", send(e, http.MethodPost, "/fail", "k-500"), http.StatusInternalServerError, internal, false)
	wantRuns(t, &runs, 3)
}

var errOutOfStock = errors.New("out of stock")

// The app's own HTTPErrorHandler decides the status, the headers and the
// body; those are what is stored and replayed.
func TestEchoCustomHTTPErrorHandler(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status := http.StatusInternalServerError
		if errors.Is(err, errOutOfStock) {
			status = http.StatusConflict
		}
		c.Response().Header().Set("X-Error-Code", "E"+http.StatusText(status)[:3])
		c.JSON(status, map[string]string{"error": err.Error()}) //nolint:errcheck
	}
	e.Use(echoidem.New(newEngine(t, core.Config{})))
	e.POST("/orders", func(c echo.Context) error {
		runs.Add(1)
		return errOutOfStock
	})

	first := send(e, http.MethodPost, "/orders", "k-custom")
	wantResponse(t, "first", first, http.StatusConflict, `{"error":"out of stock"}`+"\n", false)
	if first.Header().Get("X-Error-Code") != "ECon" {
		t.Fatalf("first response headers %v", first.Header())
	}
	replay := send(e, http.MethodPost, "/orders", "k-custom")
	wantResponse(t, "replay", replay, http.StatusConflict, first.Body.String(), true)
	if got := replay.Header().Get("X-Error-Code"); got != "ECon" {
		t.Fatalf("replayed X-Error-Code %q, want ECon", got)
	}
	wantRuns(t, &runs, 1)
}

// middleware.Recover outside the idem middleware: after a panic the lock
// is released and nothing is stored, so the retry runs the handler. With
// Recover inside, the 500 it renders is not stored either.
func TestEchoRecoverReleasesLock(t *testing.T) {
	t.Parallel()
	for _, recoverInside := range []bool{false, true} {
		var runs atomic.Int64
		e := newEcho()
		mws := []echo.MiddlewareFunc{middleware.Recover(), echoidem.New(newEngine(t, core.Config{}))}
		if recoverInside {
			mws[0], mws[1] = mws[1], mws[0]
		}
		e.Use(mws...)
		e.POST("/orders", func(c echo.Context) error {
			if runs.Add(1) == 1 {
				panic("first run fails")
			}
			return c.String(http.StatusCreated, "created")
		})
		if rec := send(e, http.MethodPost, "/orders", "k-panic"); rec.Code != http.StatusInternalServerError {
			t.Fatalf("recover inside %v: the panic answered %d", recoverInside, rec.Code)
		}
		wantResponse(t, "retry", send(e, http.MethodPost, "/orders", "k-panic"), http.StatusCreated, "created", false)
		wantResponse(t, "replay", send(e, http.MethodPost, "/orders", "k-panic"), http.StatusCreated, "created", true)
		wantRuns(t, &runs, 2)
	}
}

// A request the Skipper skips is untouched: no key check, no replay.
func TestEchoSkipper(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echoidem.NewWithConfig(echoidem.Config{
		Engine:  newEngine(t, core.Config{Required: true}),
		Skipper: func(c echo.Context) bool { return c.Path() == "/webhooks" },
	}))
	h := func(c echo.Context) error {
		runs.Add(1)
		return c.String(http.StatusCreated, "ok")
	}
	e.POST("/webhooks", h)
	e.POST("/orders", h)
	for _, key := range []string{"k-skip", "k-skip", "", strings.Repeat("k", 300)} {
		wantResponse(t, "skipped key "+key, send(e, http.MethodPost, "/webhooks", key), http.StatusCreated, "ok", false)
	}
	wantRuns(t, &runs, 4)
	// Not skipped: the required key is enforced.
	if rec := send(e, http.MethodPost, "/orders", ""); rec.Code != http.StatusBadRequest {
		t.Fatalf("missing key on a covered route: %d", rec.Code)
	}
	wantRuns(t, &runs, 4)
}

// Config.ErrorHandler routes the Engine's refusals through the app's
// HTTPErrorHandler; headers such as Retry-After survive.
func TestEchoErrorHandlerHTTPError(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	e := newEcho()
	e.Use(echoidem.NewWithConfig(echoidem.Config{
		Engine: newEngine(t, core.Config{}),
		ErrorHandler: func(c echo.Context, p *core.Problem) error {
			return echo.NewHTTPError(p.Status, p.Title).SetInternal(p)
		},
	}))
	e.POST("/orders", func(c echo.Context) error {
		close(started)
		<-release
		return c.String(http.StatusCreated, "created")
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		send(e, http.MethodPost, "/orders", "k-flight")
	}()
	<-started
	rec := send(e, http.MethodPost, "/orders", "k-flight")
	close(release)
	wg.Wait()
	wantResponse(t, "in flight", rec, http.StatusConflict, `{"message":"Request in flight"}`+"\n", false)
	if got := rec.Header().Get(echo.HeaderContentType); got != echo.MIMEApplicationJSON {
		t.Fatalf("Content-Type %q, want the app's %q", got, echo.MIMEApplicationJSON)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q, want 1", got)
	}
}

// A flushed response is passed through and stored when the handler
// returns: the retry is its replay.
func TestEchoFlushedStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echoidem.New(newEngine(t, core.Config{})))
	e.POST("/events", func(c echo.Context) error {
		runs.Add(1)
		c.Response().WriteHeader(http.StatusOK)
		c.Response().Write([]byte("data: 1\n\n")) //nolint:errcheck
		c.Response().Flush()
		return nil
	})
	wantResponse(t, "stream", send(e, http.MethodPost, "/events", "k-stream"), http.StatusOK, "data: 1\n\n", false)
	wantResponse(t, "retry", send(e, http.MethodPost, "/events", "k-stream"), http.StatusOK, "data: 1\n\n", true)
	wantRuns(t, &runs, 1)
}

// A Scope function reads, through the request's context, what an earlier
// middleware stored with c.Set.
func TestEchoScopeFromContextSet(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // a stand-in for auth
		return func(c echo.Context) error {
			c.Set("user", c.Request().Header.Get("X-Token"))
			return next(c)
		}
	})
	e.Use(echoidem.New(newEngine(t, core.Config{
		Scope: func(r *core.Request) string { s, _ := r.Context.Value("user").(string); return s },
	})))
	e.POST("/orders", func(c echo.Context) error {
		return c.String(http.StatusCreated, strings.Repeat("+", int(runs.Add(1))))
	})
	wantResponse(t, "alice", send(e, http.MethodPost, "/orders", "k-scope", "X-Token", "alice"), http.StatusCreated, "+", false)
	wantResponse(t, "bob", send(e, http.MethodPost, "/orders", "k-scope", "X-Token", "bob"), http.StatusCreated, "++", false)
	wantResponse(t, "alice again", send(e, http.MethodPost, "/orders", "k-scope", "X-Token", "alice"), http.StatusCreated, "+", true)
	wantRuns(t, &runs, 2)
}

func TestNewWithConfigPanicsWithoutEngine(t *testing.T) {
	t.Parallel()
	defer func() {
		if r := recover(); r != "echoidem: Config.Engine is required" {
			t.Fatalf("recovered %v", r)
		}
	}()
	echoidem.NewWithConfig(echoidem.Config{})
	t.Fatal("no panic")
}

// A request that matched no route passes through untouched: nothing stored,
// and its key stays free for the route the client meant.
func TestEchoUnmatchedRouteNotStored(t *testing.T) {
	t.Parallel()
	created := func(c echo.Context) error { return c.String(http.StatusCreated, "created") }
	auth := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	global := newEcho()
	global.Use(echoidem.New(newEngine(t, core.Config{})))
	global.POST("/orders", created)
	global.Group("/api", auth).POST("/orders", created) // a group with middleware has a catch-all
	grouped := newEcho()
	grouped.Group("/api", echoidem.New(newEngine(t, core.Config{}))).POST("/orders", created)
	for name, tc := range map[string]struct {
		e      *echo.Echo
		strays []string // method and path of requests that match no route
		orders string
	}{
		"global": {global, []string{"POST /nowhere", "PUT /orders", "POST /api/nowhere", "PUT /api/orders"}, "/orders"},
		"group":  {grouped, []string{"POST /api/nowhere", "PUT /api/orders"}, "/api/orders"},
	} {
		for _, stray := range tc.strays {
			method, path, _ := strings.Cut(stray, " ")
			for range 2 {
				rec := send(tc.e, method, path, "stray-"+name)
				if rec.Code/100 != 4 || rec.Header().Get(core.HeaderReplay) != "" {
					t.Fatalf("%s: %s: %d, replay %q; want a 404 or 405, not a replay", name, stray, rec.Code, rec.Header().Get(core.HeaderReplay))
				}
			}
		}
		wantResponse(t, name+": the right URL", send(tc.e, http.MethodPost, tc.orders, "stray-"+name), http.StatusCreated, "created", false)
	}

	// Under e.Use, a request the router found no route for never meets the
	// Engine: it gets Echo's own 404 or 405 even with a key already used
	// (not 422) or an invalid key (not 400).
	wantResponse(t, "the key's first use", send(global, http.MethodPost, "/orders", "used"), http.StatusCreated, "created", false)
	for stray, code := range map[string]int{"POST /nowhere": http.StatusNotFound, "PUT /orders": http.StatusMethodNotAllowed} {
		method, path, _ := strings.Cut(stray, " ")
		for _, key := range []string{"used", strings.Repeat("k", 300)} {
			if rec := send(global, method, path, key); rec.Code != code {
				t.Errorf("%s with key %.10s…: %d %s, want %d", stray, key, rec.Code, rec.Body, code)
			}
		}
	}
}

// A context that has not been routed holds echo.NotFoundHandler too: under
// e.Pre (which the docs advise against) or driven directly on a context
// from e.NewContext, as handlers are unit-tested, a routable request is
// still protected, never taken for a 404.
func TestEchoUnroutedContextStillProtected(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := func(c echo.Context) error {
		runs.Add(1)
		return c.String(http.StatusCreated, "created")
	}

	pre := newEcho()
	pre.Pre(echoidem.New(newEngine(t, core.Config{})))
	pre.POST("/orders", h)
	wantResponse(t, "e.Pre, first", send(pre, http.MethodPost, "/orders", "pre-1"), http.StatusCreated, "created", false)
	wantResponse(t, "e.Pre, retry", send(pre, http.MethodPost, "/orders", "pre-1"), http.StatusCreated, "created", true)
	wantRuns(t, &runs, 1)

	e := newEcho()
	e.POST("/orders", h)
	mw := echoidem.New(newEngine(t, core.Config{}))
	for i := range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(order))
		req.Header.Set("Idempotency-Key", "direct-1")
		rec := httptest.NewRecorder()
		if err := mw(h)(e.NewContext(req, rec)); err != nil {
			t.Fatal(err)
		}
		wantResponse(t, "a context from e.NewContext", rec, http.StatusCreated, "created", i == 1)
	}
	wantRuns(t, &runs, 2)
}

// Routes added after a context was made do not break the check: Echo sizes
// a context's path parameters by the routes there were when it was made.
// (Against a check on a pooled context this fails most of the time, not
// always: the race detector makes sync.Pool drop objects at random.)
func TestEchoRoutesAddedAfterContexts(t *testing.T) {
	t.Parallel()
	e := newEcho()
	mw := echoidem.New(newEngine(t, core.Config{}))
	h := func(c echo.Context) error { return c.String(http.StatusCreated, "created") }
	serve := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(order))
		req.Header.Set("Idempotency-Key", "late-routes-1")
		rec := httptest.NewRecorder()
		if err := mw(h)(e.NewContext(req, rec)); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	serve("/x") // a context, and a probe, made before any route with a parameter
	e.POST("/orders/:id", h)
	wantResponse(t, "first", serve("/orders/1"), http.StatusCreated, "created", false)
	wantResponse(t, "retry", serve("/orders/1"), http.StatusCreated, "created", true)
}

// In the transactional mode (a core.TxStore: the Flight is Buffered) the
// handler runs with the transaction in its context, and nothing of its
// response reaches the client before the commit: a handler that wrote and
// then panicked gets Recover's 500 without its headers (Echo took its
// response as sent), and the 404 of a group's catch-all route is sent,
// not stored.
func TestEchoBuffered(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(middleware.Recover(), echoidem.New(newEngine(t, core.Config{Store: idemtest.NewTxStore(t)})))
	handler := func(c echo.Context) error {
		runs.Add(1)
		if !idemtest.InTx(c.Request().Context()) {
			return errors.New("no transaction in the handler's context")
		}
		c.Response().Header().Set("X-Order-Id", "42")
		if err := c.String(http.StatusCreated, "created"); err != nil {
			return err
		}
		if c.Request().Header.Get("X-Panic") != "" {
			panic("after the response")
		}
		return nil
	}
	e.POST("/orders", handler)
	e.Group("/api", func(next echo.HandlerFunc) echo.HandlerFunc { return next }).POST("/orders", handler)

	rec := send(e, http.MethodPost, "/orders", "buffered-1", "X-Panic", "1")
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("X-Order-Id") != "" {
		t.Fatalf("a panic after the response: %d %v %q, want Recover's 500 alone", rec.Code, rec.Header(), rec.Body)
	}
	wantResponse(t, "retry", send(e, http.MethodPost, "/orders", "buffered-1"), http.StatusCreated, "created", false)
	wantResponse(t, "replay", send(e, http.MethodPost, "/orders", "buffered-1"), http.StatusCreated, "created", true)
	wantRuns(t, &runs, 2)
	for range 2 {
		wantResponse(t, "a group's catch-all", send(e, http.MethodPost, "/api/nowhere", "buffered-2"), http.StatusNotFound, `{"message":"Not Found"}`+"\n", false)
	}
}

// TestEchoHostRoutes: Echo routes e.Host's requests on a router of that
// host, so one path of two hosts goes to two handlers: one key sent to both
// is a key reused (422), never the first host's answer replayed.
func TestEchoHostRoutes(t *testing.T) {
	t.Parallel()
	e := echo.New()
	mw := echoidem.New(newEngine(t, core.Config{}))
	var runs atomic.Int64
	for _, host := range []string{"a.example", "b.example"} {
		e.Host(host, mw).POST("/orders", func(c echo.Context) error {
			runs.Add(1)
			return c.String(http.StatusCreated, host)
		})
	}
	wantResponse(t, "host a", send(e, http.MethodPost, "http://a.example/orders", "hosts"), http.StatusCreated, "a.example", false)
	wantResponse(t, "host a again", send(e, http.MethodPost, "http://a.example/orders", "hosts"), http.StatusCreated, "a.example", true)
	if rec := send(e, http.MethodPost, "http://b.example/orders", "hosts"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("host b with host a's key: %d %q, want 422", rec.Code, rec.Body.String())
	}
	wantRuns(t, &runs, 1)
}

// A Buffered flight whose commit fails answers 503 store-unavailable,
// none of the handler's response: as problem+json, or through
// Config.ErrorHandler as the other refusals, Retry-After kept and Echo's
// Response taking the 503 as the status sent.
func TestEchoBufferedFailedCommit(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	eng := newEngine(t, core.Config{Store: store})
	for name, cfg := range map[string]echoidem.Config{
		"problem": {Engine: eng},
		"error handler": {Engine: eng, ErrorHandler: func(c echo.Context, p *core.Problem) error {
			return echo.NewHTTPError(p.Status, p.Title).SetInternal(p)
		}},
	} {
		var logged int
		e := newEcho()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error { // as Echo's Logger reads the status
				if err := next(c); err != nil {
					c.Error(err)
				}
				logged = c.Response().Status
				return nil
			}
		}, echoidem.NewWithConfig(cfg))
		e.POST("/orders", func(c echo.Context) error {
			c.Response().Header().Set("X-Order-Id", "42")
			return c.String(http.StatusCreated, "created")
		})
		rec := send(e, http.MethodPost, "/orders", "failed-commit-"+name)
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("X-Order-Id") != "" || rec.Header().Get("Retry-After") == "" ||
			logged != http.StatusServiceUnavailable {
			t.Fatalf("%s: %d %v %q (Echo's Response says %d), want 503 with Retry-After and none of the handler's", name, rec.Code, rec.Header(), body, logged)
		}
		if want := `{"message":"Idempotency store unavailable"}` + "\n"; cfg.ErrorHandler != nil && body != want {
			t.Fatalf("%s: body %q, want the app's %q", name, body, want)
		} else if cfg.ErrorHandler == nil && !strings.Contains(body, "store-unavailable") {
			t.Fatalf("%s: body %q, want the store-unavailable problem", name, body)
		}
	}
}

// A panic while a Buffered flight finishes (here Config.Storable's) gets
// Recover's 500, not the handler's 201 that Echo's Response took as sent
// while nothing was; the key is released, and its retry runs.
func TestEchoBufferedPanicInFinish(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	eng := newEngine(t, core.Config{Store: idemtest.NewTxStore(t), Storable: func(code int) bool {
		if runs.Load() == 1 {
			panic("storable")
		}
		return core.DefaultStorable(code)
	}})
	e := newEcho()
	e.Use(middleware.Recover(), echoidem.New(eng))
	e.POST("/orders", func(c echo.Context) error {
		runs.Add(1)
		return c.String(http.StatusCreated, "created")
	})
	if rec := send(e, http.MethodPost, "/orders", "panic-in-finish"); rec.Code != http.StatusInternalServerError || rec.Body.String() == "created" {
		t.Fatalf("a panic in Finish: %d %q, want Recover's 500", rec.Code, rec.Body)
	}
	wantResponse(t, "retry", send(e, http.MethodPost, "/orders", "panic-in-finish"), http.StatusCreated, "created", false)
	wantRuns(t, &runs, 2)
}

// A body of unknown length over the limit of Echo's BodyLimit fails as it
// is read: the client gets Echo's 413, as without idem, not a 400.
func TestEchoBodyLimitUnknownLength(t *testing.T) {
	t.Parallel()
	e := echo.New()
	var runs atomic.Int64
	var outcomes []string // the Observer's, as the client sees them
	observe := func(ev core.Event) { outcomes = append(outcomes, fmt.Sprint(ev.Outcome, " ", ev.Code)) }
	e.Use(middleware.BodyLimit("10B"), echoidem.New(newEngine(t, core.Config{Observer: observe})))
	e.POST("/orders", func(c echo.Context) error {
		if _, err := io.ReadAll(c.Request().Body); err != nil {
			return err // without a key: BodyLimit's 413
		}
		runs.Add(1)
		return c.NoContent(http.StatusCreated)
	})
	for _, key := range []string{"limit-1", "limit-1", ""} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(strings.Repeat("x", 100)))
		req.ContentLength = -1 // chunked: BodyLimit cannot refuse it before it is read
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		wantResponse(t, "key "+key, rec, http.StatusRequestEntityTooLarge, `{"message":"Request Entity Too Large"}`+"\n", false)
	}
	wantRuns(t, &runs, 0)
	if got, want := strings.Join(outcomes, ", "), "too_large 413, too_large 413"; got != want {
		t.Errorf("observed %s, want %s", got, want)
	}
}

// Echo's Rewrite routes on the query here: one path sent, two handlers.
// The path routed on joins the fingerprint, so one key sent to both is a
// key reused (422), never the refund's answer replayed for the charge.
func TestEchoRewriteQuery(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.Pre(middleware.Rewrite(map[string]string{"/orders?kind=*": "/orders/$1"}))
	e.Use(echoidem.New(newEngine(t, core.Config{})))
	var runs atomic.Int64
	for _, kind := range []string{"refund", "charge"} {
		e.POST("/orders/"+kind, func(c echo.Context) error {
			runs.Add(1)
			return c.String(http.StatusCreated, kind)
		})
	}
	wantResponse(t, "refund", send(e, http.MethodPost, "/orders?kind=refund", "rewrite"), http.StatusCreated, "refund", false)
	if rec := send(e, http.MethodPost, "/orders?kind=charge", "rewrite"); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("charge with the refund's key: %d %q, want 422", rec.Code, rec.Body)
	}
	wantRuns(t, &runs, 1)
}

// With middleware.Gzip before the middleware, as the docs advise, a replay
// of a response without a body (a 204, a redirect, a handler that wrote
// nothing) is sent as the handler's was: no gzip stream, Content-Encoding
// or sniffed Content-Type of its own. In the transactional mode, the held
// response too.
func TestEchoGzipEmptyBodyReplay(t *testing.T) {
	t.Parallel()
	for _, store := range []func(*testing.T) core.Store{nil, idemtest.NewTxStore} {
		cfg := core.Config{}
		if store != nil {
			cfg.Store = store(t)
		}
		e := newEcho()
		e.Use(middleware.Gzip(), echoidem.New(newEngine(t, cfg)))
		e.POST("/204", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
		e.POST("/303", func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, "/orders/1") })
		e.POST("/nothing", func(echo.Context) error { return nil })
		for _, path := range []string{"/204", "/303", "/nothing"} {
			first := send(e, http.MethodPost, path, "gzip"+path, "Accept-Encoding", "gzip")
			replay := send(e, http.MethodPost, path, "gzip"+path, "Accept-Encoding", "gzip")
			for _, rec := range []*httptest.ResponseRecorder{first, replay} {
				ce, ct := rec.Header().Get(echo.HeaderContentEncoding), rec.Header().Get(echo.HeaderContentType)
				if rec.Code != first.Code || rec.Body.Len() != 0 || ce != "" || ct != "" {
					t.Errorf("tx %v, %s: %d, body %q, Content-Encoding %q, Content-Type %q; want %d without a body, either header",
						store != nil, path, rec.Code, rec.Body, ce, ct, first.Code)
				}
			}
			if replay.Header().Get(core.HeaderReplay) != "true" {
				t.Errorf("tx %v, %s: not replayed", store != nil, path)
			}
		}
	}
}

// Mounted twice on a route, under e.Use and on the route, the middleware
// meets its own key's lock on the second pass: 500 middleware-twice, which
// the first pass does not store, and the handler does not run.
func TestMountedTwice(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, core.Config{})
	e := newEcho()
	e.Use(echoidem.New(eng))
	var runs atomic.Int64
	e.POST("/orders", func(c echo.Context) error {
		runs.Add(1)
		return c.NoContent(http.StatusCreated)
	}, echoidem.New(eng))
	for range 2 {
		rec := send(e, http.MethodPost, "/orders", "twice")
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "#middleware-twice") ||
			rec.Header().Get(core.HeaderReplay) != "" {
			t.Fatalf("got %d %v %s, want 500 middleware-twice, not replayed", rec.Code, rec.Header(), rec.Body)
		}
	}
	wantRuns(t, &runs, 0)
}
