package echov5idem_test

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

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/echov5idem"
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
// "x/versions", /docs/x/versions the versions of "x". One key sent to both
// is a key reused, not a replay of the first one's response.
func TestEscapedPathFingerprinted(t *testing.T) {
	t.Parallel()
	e := newEcho()
	e.Use(echov5idem.New(newEngine(t, core.Config{})))
	e.POST("/docs/:name", func(c *echo.Context) error { return c.String(http.StatusCreated, "doc") })
	e.POST("/docs/:name/versions", func(c *echo.Context) error { return c.String(http.StatusCreated, "version") })
	wantResponse(t, "document", send(e, http.MethodPost, "/docs/x%2Fversions", "escaped"), http.StatusCreated, "doc", false)
	if rec := send(e, http.MethodPost, "/docs/x/versions", "escaped"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("the same key on /docs/x/versions: %d %s, want 422", rec.Code, rec.Body)
	}
	wantResponse(t, "retry", send(e, http.MethodPost, "/docs/x%2Fversions", "escaped"), http.StatusCreated, "doc", true)
}

// A handler's error is rendered by Echo's HTTPErrorHandler while the
// middleware captures: a 400 is stored and replayed byte for byte, a 500
// is not stored.
func TestHandlerErrorRenderedAndStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echov5idem.New(newEngine(t, core.Config{})))
	e.POST("/bad", func(c *echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusBadRequest, "qty must be positive")
	})
	e.POST("/fail", func(c *echo.Context) error {
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
// body; those are what is stored and replayed. Echo v5's RFC 9457 handler
// renders a 409 of the app's own here.
func TestCustomHTTPErrorHandler(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	problems := echo.ProblemDetailsHTTPErrorHandler(false)
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		if errors.Is(err, errOutOfStock) {
			c.Response().Header().Set("X-Error-Code", "stock")
			err = &echo.ProblemError{Status: http.StatusConflict, Title: "Out of stock"}
		}
		problems(c, err)
	}
	e.Use(echov5idem.New(newEngine(t, core.Config{})))
	e.POST("/orders", func(c *echo.Context) error {
		runs.Add(1)
		return errOutOfStock
	})
	first := send(e, http.MethodPost, "/orders", "k-custom")
	if first.Code != http.StatusConflict || !strings.Contains(first.Body.String(), `"title":"Out of stock"`) ||
		first.Header().Get("X-Error-Code") != "stock" || first.Header().Get(echo.HeaderContentType) != "application/problem+json" {
		t.Fatalf("first: %d %s %v", first.Code, first.Body, first.Header())
	}
	replay := send(e, http.MethodPost, "/orders", "k-custom")
	wantResponse(t, "replay", replay, http.StatusConflict, first.Body.String(), true)
	if got := replay.Header().Get("X-Error-Code"); got != "stock" {
		t.Fatalf("replayed X-Error-Code %q, want stock", got)
	}
	wantRuns(t, &runs, 1)
}

// middleware.Recover outside the idem middleware: after a panic the lock
// is released and nothing is stored, so the retry runs the handler. With
// Recover inside, the 500 it hands on is not stored either.
func TestRecoverReleasesLock(t *testing.T) {
	t.Parallel()
	for _, recoverInside := range []bool{false, true} {
		var runs atomic.Int64
		e := newEcho()
		mws := []echo.MiddlewareFunc{middleware.Recover(), echov5idem.New(newEngine(t, core.Config{}))}
		if recoverInside {
			mws[0], mws[1] = mws[1], mws[0]
		}
		e.Use(mws...)
		e.POST("/orders", func(c *echo.Context) error {
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
func TestSkipper(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echov5idem.NewWithConfig(echov5idem.Config{
		Engine:  newEngine(t, core.Config{Required: true}),
		Skipper: func(c *echo.Context) bool { return c.Path() == "/webhooks" },
	}))
	h := func(c *echo.Context) error {
		runs.Add(1)
		return c.String(http.StatusCreated, "ok")
	}
	e.POST("/webhooks", h)
	e.POST("/orders", h)
	for _, key := range []string{"k-skip", "k-skip", "", strings.Repeat("k", 300)} {
		wantResponse(t, "skipped key "+key, send(e, http.MethodPost, "/webhooks", key), http.StatusCreated, "ok", false)
	}
	wantRuns(t, &runs, 4)
	if rec := send(e, http.MethodPost, "/orders", ""); rec.Code != http.StatusBadRequest {
		t.Fatalf("missing key on a covered route: %d", rec.Code)
	}
	wantRuns(t, &runs, 4)
}

// Config.ErrorHandler routes the Engine's refusals through the app's
// HTTPErrorHandler; headers such as Retry-After survive.
func TestConfigErrorHandler(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	e := newEcho()
	e.Use(echov5idem.NewWithConfig(echov5idem.Config{
		Engine: newEngine(t, core.Config{}),
		ErrorHandler: func(c *echo.Context, p *core.Problem) error {
			return echo.NewHTTPError(p.Status, p.Title).Wrap(p)
		},
	}))
	e.POST("/orders", func(c *echo.Context) error {
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
func TestFlushedStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echov5idem.New(newEngine(t, core.Config{})))
	e.POST("/events", func(c *echo.Context) error {
		runs.Add(1)
		w := c.Response()
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("data: 1\n\n")) //nolint:errcheck
		return http.NewResponseController(w).Flush()
	})
	wantResponse(t, "stream", send(e, http.MethodPost, "/events", "k-stream"), http.StatusOK, "data: 1\n\n", false)
	wantResponse(t, "retry", send(e, http.MethodPost, "/events", "k-stream"), http.StatusOK, "data: 1\n\n", true)
	wantRuns(t, &runs, 1)
}

// A Scope function reads, through the request's context, what an earlier
// middleware stored with c.Set.
func TestScopeFromContextSet(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // a stand-in for auth
		return func(c *echo.Context) error {
			c.Set("user", c.Request().Header.Get("X-Token"))
			return next(c)
		}
	})
	e.Use(echov5idem.New(newEngine(t, core.Config{
		Scope: func(r *core.Request) string { s, _ := r.Context.Value("user").(string); return s },
	})))
	e.POST("/orders", func(c *echo.Context) error {
		return c.String(http.StatusCreated, strings.Repeat("+", int(runs.Add(1))))
	})
	wantResponse(t, "alice", send(e, http.MethodPost, "/orders", "k-scope", "X-Token", "alice"), http.StatusCreated, "+", false)
	wantResponse(t, "bob", send(e, http.MethodPost, "/orders", "k-scope", "X-Token", "bob"), http.StatusCreated, "++", false)
	wantResponse(t, "alice again", send(e, http.MethodPost, "/orders", "k-scope", "X-Token", "alice"), http.StatusCreated, "+", true)
	wantRuns(t, &runs, 2)
}

func TestConfigWithoutEngine(t *testing.T) {
	t.Parallel()
	if mw, err := (echov5idem.Config{}).ToMiddleware(); mw != nil || !errors.Is(err, echov5idem.ErrNoEngine) {
		t.Fatalf("ToMiddleware = %v, %v; want ErrNoEngine", mw, err)
	}
	defer func() {
		if r := recover(); r != echov5idem.ErrNoEngine {
			t.Fatalf("recovered %v, want ErrNoEngine", r)
		}
	}()
	echov5idem.New(nil)
	t.Fatal("no panic")
}

// A request that matched no route passes through untouched: nothing
// stored, and its key stays free for the route the client meant. Under
// e.Use it never meets the Engine: Echo's 404 or 405 even with a key
// already used (not 422) or an invalid key (not 400).
func TestUnmatchedRouteUntouched(t *testing.T) {
	t.Parallel()
	created := func(c *echo.Context) error { return c.String(http.StatusCreated, "created") }
	auth := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	global := newEcho()
	global.Use(echov5idem.New(newEngine(t, core.Config{})))
	global.POST("/orders", created)
	global.Group("/api", auth).POST("/orders", created) // a group with middleware has catch-all routes (a 404 for a 405)
	global.RouteNotFound("/pages/*", func(c *echo.Context) error { return c.String(http.StatusNotFound, "no such page") })
	grouped := newEcho()
	grouped.Group("/api", echov5idem.New(newEngine(t, core.Config{}))).POST("/orders", created)
	for name, tc := range map[string]struct {
		e      *echo.Echo
		strays map[string]int // method and path of requests that match no route, and their status
		orders string
	}{
		"global": {global, map[string]int{
			"POST /nowhere": 404, "PUT /orders": 405, "POST /api/nowhere": 404, "PUT /api/orders": 404, "POST /pages/1": 404,
		}, "/orders"},
		"group": {grouped, map[string]int{"POST /api/nowhere": 404, "PUT /api/orders": 404}, "/api/orders"},
	} {
		wantResponse(t, name+": the key's first use", send(tc.e, http.MethodPost, tc.orders, "used-"+name), http.StatusCreated, "created", false)
		for stray, status := range tc.strays {
			method, path, _ := strings.Cut(stray, " ")
			for _, key := range []string{"stray-" + name, "stray-" + name, "used-" + name, strings.Repeat("k", 300)} {
				if rec := send(tc.e, method, path, key); rec.Code != status || rec.Header().Get(core.HeaderReplay) != "" {
					t.Fatalf("%s: %s with key %.10s…: %d replay %q, want %d", name, stray, key, rec.Code, rec.Header().Get(core.HeaderReplay), status)
				}
			}
		}
		wantResponse(t, name+": the right URL", send(tc.e, http.MethodPost, tc.orders, "stray-"+name), http.StatusCreated, "created", false)
	}
}

// A handler that returns Echo's not-found error itself is not stored: the
// retry runs it again.
func TestHandlerNotFoundNotStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(echov5idem.New(newEngine(t, core.Config{})))
	e.POST("/orders/:id/refunds", func(c *echo.Context) error {
		if runs.Add(1) == 1 {
			return echo.ErrNotFound // the order is not there yet
		}
		return c.String(http.StatusCreated, "refunded")
	})
	if rec := send(e, http.MethodPost, "/orders/1/refunds", "k-404"); rec.Code != http.StatusNotFound {
		t.Fatalf("first: %d", rec.Code)
	}
	wantResponse(t, "retry", send(e, http.MethodPost, "/orders/1/refunds", "k-404"), http.StatusCreated, "refunded", false)
	wantRuns(t, &runs, 2)
}

// A context that has not been routed, under e.Pre (which the docs advise
// against) or from e.NewContext, as handlers are unit-tested, is routed on
// a probe: a routable request is still protected, never taken for a 404.
func TestUnroutedContextStillProtected(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := func(c *echo.Context) error {
		runs.Add(1)
		return c.String(http.StatusCreated, "created")
	}
	pre := newEcho()
	pre.Pre(echov5idem.New(newEngine(t, core.Config{})))
	pre.POST("/orders", h)
	wantResponse(t, "e.Pre, first", send(pre, http.MethodPost, "/orders", "pre-1"), http.StatusCreated, "created", false)
	wantResponse(t, "e.Pre, retry", send(pre, http.MethodPost, "/orders", "pre-1"), http.StatusCreated, "created", true)
	if rec := send(pre, http.MethodPost, "/nowhere", "pre-1"); rec.Code != http.StatusNotFound {
		t.Fatalf("e.Pre, a URL no route matches: %d, want 404", rec.Code)
	}
	wantRuns(t, &runs, 1)

	e := newEcho()
	e.POST("/orders/:id", h)
	mw := echov5idem.New(newEngine(t, core.Config{}))
	for i := range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders/1", strings.NewReader(order))
		req.Header.Set("Idempotency-Key", "direct-1")
		rec := httptest.NewRecorder()
		if err := mw(h)(e.NewContext(req, rec)); err != nil {
			t.Fatal(err)
		}
		wantResponse(t, "a context from e.NewContext", rec, http.StatusCreated, "created", i == 1)
	}
	wantRuns(t, &runs, 2)
}

// TestRouteTemplate pins the route template that reaches the Engine for
// each way of registering the middleware, from Echo v5's public
// c.RouteInfo() and c.Path(): if a release changes them, this test fails.
func TestRouteTemplate(t *testing.T) {
	t.Parallel()
	h := func(c *echo.Context) error { return c.String(http.StatusCreated, "created") }
	for _, tc := range []struct {
		name     string
		register func(e *echo.Echo, idem echo.MiddlewareFunc)
		path     string
		want     string
	}{
		{"e.Use", func(e *echo.Echo, idem echo.MiddlewareFunc) {
			e.Use(idem)
			e.POST("/orders/:id", h)
		}, "/orders/7", "/orders/:id"},
		{"e.Any", func(e *echo.Echo, idem echo.MiddlewareFunc) {
			e.Use(idem)
			e.Any("/orders/:id", h)
		}, "/orders/7", "/orders/:id"},
		{"a group", func(e *echo.Echo, idem echo.MiddlewareFunc) {
			e.Group("/api", idem).POST("/orders/:id", h)
		}, "/api/orders/7", "/api/orders/:id"},
		{"a route", func(e *echo.Echo, idem echo.MiddlewareFunc) {
			e.POST("/orders/:id", h, idem)
		}, "/orders/7", "/orders/:id"},
		{"e.Pre: the path", func(e *echo.Echo, idem echo.MiddlewareFunc) {
			e.Pre(idem)
			e.POST("/orders/:id", h)
		}, "/orders/7", "/orders/:id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var routes []string
			eng := newEngine(t, core.Config{Observer: func(ev core.Event) {
				mu.Lock()
				routes = append(routes, ev.Route)
				mu.Unlock()
			}})
			e := newEcho()
			tc.register(e, echov5idem.New(eng))
			rec := send(e, http.MethodPost, tc.path, "route-1")
			mu.Lock()
			defer mu.Unlock()
			if rec.Code != http.StatusCreated || len(routes) != 1 || routes[0] != tc.want {
				t.Fatalf("%d, routes %q; want 201 and %q", rec.Code, routes, tc.want)
			}
		})
	}
}

// countingRouter counts the requests it routes.
type countingRouter struct {
	echo.Router
	routed atomic.Int64
}

func (r *countingRouter) Route(c *echo.Context) echo.HandlerFunc {
	r.routed.Add(1)
	return r.Router.Route(c)
}

// The middleware reads the route from the context Echo routed; it routes a
// request again only when the context was not routed (e.Pre).
func TestRoutesOnlyUnroutedContexts(t *testing.T) {
	t.Parallel()
	for _, pre := range []bool{false, true} {
		router := &countingRouter{Router: echo.NewRouter(echo.RouterConfig{})}
		e := echo.NewWithConfig(echo.Config{Router: router})
		if pre {
			e.Pre(echov5idem.New(newEngine(t, core.Config{})))
		} else {
			e.Use(echov5idem.New(newEngine(t, core.Config{})))
		}
		e.POST("/orders/:id", func(c *echo.Context) error { return c.String(http.StatusCreated, "created") })
		wantResponse(t, "first", send(e, http.MethodPost, "/orders/1", "k-routed"), http.StatusCreated, "created", false)
		wantResponse(t, "retry", send(e, http.MethodPost, "/orders/1", "k-routed"), http.StatusCreated, "created", true)
		want := int64(2) // once per request, by Echo
		if pre {
			want = 3 // by the middleware, which runs first, each time; by Echo for the first only (the retry is answered before)
		}
		if n := router.routed.Load(); n != want {
			t.Fatalf("pre %v: 2 requests routed %d times, want %d", pre, n, want)
		}
	}
}

// In the transactional mode (a core.TxStore: the Flight is Buffered) the
// handler runs with the transaction in its context, and nothing of its
// response reaches the client before the commit: a handler that wrote and
// then panicked gets Recover's 500 without its headers, and a handler's
// echo.ErrNotFound is sent, not stored.
func TestBuffered(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	e := newEcho()
	e.Use(middleware.Recover(), echov5idem.New(newEngine(t, core.Config{Store: idemtest.NewTxStore(t)})))
	e.POST("/orders/:id", func(c *echo.Context) error {
		runs.Add(1)
		if !idemtest.InTx(c.Request().Context()) {
			return errors.New("no transaction in the handler's context")
		}
		if c.Param("id") == "missing" {
			return echo.ErrNotFound
		}
		c.Response().Header().Set("X-Order-Id", "42")
		if err := c.String(http.StatusCreated, "created"); err != nil {
			return err
		}
		if c.Request().Header.Get("X-Panic") != "" {
			panic("after the response")
		}
		return nil
	})

	rec := send(e, http.MethodPost, "/orders/1", "buffered-1", "X-Panic", "1")
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("X-Order-Id") != "" {
		t.Fatalf("a panic after the response: %d %v %q, want Recover's 500 alone", rec.Code, rec.Header(), rec.Body)
	}
	wantResponse(t, "retry", send(e, http.MethodPost, "/orders/1", "buffered-1"), http.StatusCreated, "created", false)
	wantResponse(t, "replay", send(e, http.MethodPost, "/orders/1", "buffered-1"), http.StatusCreated, "created", true)
	wantRuns(t, &runs, 2)
	for range 2 {
		wantResponse(t, "the handler's 404", send(e, http.MethodPost, "/orders/missing", "buffered-2"), http.StatusNotFound, `{"message":"Not Found"}`+"\n", false)
	}
	wantRuns(t, &runs, 4)
}

// A handler that wrote its response and then returned an error (for the
// logs) has that response stored whole, in the transactional mode too: the
// HTTPErrorHandler sees the response committed, though the Buffered flight
// holds it back, and appends nothing to it.
func TestBufferedWrittenThenError(t *testing.T) {
	t.Parallel()
	for _, tx := range []bool{false, true} {
		cfg := core.Config{}
		if tx {
			cfg.Store = idemtest.NewTxStore(t)
		}
		var runs atomic.Int64
		e := newEcho()
		e.Use(echov5idem.New(newEngine(t, cfg)))
		e.POST("/orders", func(c *echo.Context) error {
			runs.Add(1)
			if err := c.String(http.StatusCreated, "created"); err != nil {
				return err
			}
			return errors.New("audit log unavailable")
		})
		wantResponse(t, "first", send(e, http.MethodPost, "/orders", "written-then-error"), http.StatusCreated, "created", false)
		wantResponse(t, "replay", send(e, http.MethodPost, "/orders", "written-then-error"), http.StatusCreated, "created", true)
		wantRuns(t, &runs, 1)
	}
}

// A Buffered flight whose commit fails answers 503 store-unavailable,
// none of the handler's response: as problem+json, or through
// Config.ErrorHandler as the other refusals, Retry-After kept.
func TestBufferedFailedCommit(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	eng := newEngine(t, core.Config{Store: store})
	for name, cfg := range map[string]echov5idem.Config{
		"problem": {Engine: eng},
		"error handler": {Engine: eng, ErrorHandler: func(c *echo.Context, p *core.Problem) error {
			return c.JSON(p.Status, map[string]string{"error": p.Title})
		}},
	} {
		e := newEcho()
		e.Use(echov5idem.NewWithConfig(cfg))
		e.POST("/orders", func(c *echo.Context) error {
			c.Response().Header().Set("X-Order-Id", "42")
			return c.String(http.StatusCreated, "created")
		})
		rec := send(e, http.MethodPost, "/orders", "failed-commit-"+name)
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("X-Order-Id") != "" || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%s: %d %v %q, want 503 with Retry-After and none of the handler's", name, rec.Code, rec.Header(), body)
		}
		if want := `{"error":"Idempotency store unavailable"}` + "\n"; cfg.ErrorHandler != nil && body != want {
			t.Fatalf("%s: body %q, want the app's %q", name, body, want)
		} else if cfg.ErrorHandler == nil && !strings.Contains(body, "store-unavailable") {
			t.Fatalf("%s: body %q, want the store-unavailable problem", name, body)
		}
	}
}

// A body of unknown length over the limit of Echo's BodyLimit fails as it
// is read: the client gets Echo's 413, as without idem, not a 400.
func TestBodyLimitUnknownLength(t *testing.T) {
	t.Parallel()
	e := echo.New()
	var runs atomic.Int64
	var outcomes []string // the Observer's, as the client sees them
	observe := func(ev core.Event) { outcomes = append(outcomes, fmt.Sprint(ev.Outcome, " ", ev.Code)) }
	e.Use(middleware.BodyLimit(10), echov5idem.New(newEngine(t, core.Config{Observer: observe})))
	e.POST("/orders", func(c *echo.Context) error {
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

// With middleware.Gzip before the middleware, as the docs advise, a replay
// of a response without a body (a 204, a redirect, a handler that wrote
// nothing) is sent as the handler's was: no gzip stream, Content-Encoding
// or sniffed Content-Type of its own. In the transactional mode, the held
// response too.
func TestGzipEmptyBodyReplay(t *testing.T) {
	t.Parallel()
	for _, store := range []func(*testing.T) core.Store{nil, idemtest.NewTxStore} {
		cfg := core.Config{}
		if store != nil {
			cfg.Store = store(t)
		}
		e := newEcho()
		e.Use(middleware.Gzip(), echov5idem.New(newEngine(t, cfg)))
		e.POST("/204", func(c *echo.Context) error { return c.NoContent(http.StatusNoContent) })
		e.POST("/303", func(c *echo.Context) error { return c.Redirect(http.StatusSeeOther, "/orders/1") })
		e.POST("/nothing", func(*echo.Context) error { return nil })
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
	e.Use(echov5idem.New(eng))
	var runs atomic.Int64
	e.POST("/orders", func(c *echo.Context) error {
		runs.Add(1)
		return c.NoContent(http.StatusCreated)
	}, echov5idem.New(eng))
	for range 2 {
		rec := send(e, http.MethodPost, "/orders", "twice")
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "#middleware-twice") ||
			rec.Header().Get(core.HeaderReplay) != "" {
			t.Fatalf("got %d %v %s, want 500 middleware-twice, not replayed", rec.Code, rec.Header(), rec.Body)
		}
	}
	wantRuns(t, &runs, 0)
}
