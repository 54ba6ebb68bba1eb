package fiberidem_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/fiberidem"
)

const order = `{"item":"book","qty":2}`

// client sends requests to a test server over loopback, one header map per
// request.
type client struct {
	t    *testing.T
	url  string
	http *http.Client
}

func newClient(t *testing.T, url string) *client {
	tr := &http.Transport{MaxConnsPerHost: 1} // one keep-alive connection
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, url: url, http: &http.Client{Transport: tr}}
}

type result struct {
	status int
	header http.Header
	body   string
}

func (c *client) post(path, body string, headers ...string) result {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func newEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func want(t *testing.T, r result, status int, body string, replay bool) {
	t.Helper()
	if r.status != status || (body != "" && r.body != body) {
		t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, body)
	}
	if got := r.header.Get(core.HeaderReplay) == "true"; got != replay {
		t.Fatalf("replayed = %v, want %v (headers %v)", got, replay, r.header)
	}
}

func wantRuns(t *testing.T, runs *atomic.Int64, n int64) {
	t.Helper()
	if got := runs.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// errorApp is a Fiber app with a custom ErrorHandler, which renders
// {"error": msg} with the status of a *fiber.Error (500 otherwise) and
// counts its calls.
func errorApp(calls *atomic.Int64) *fiber.App {
	return fiber.New(fiber.Config{
		DisableStartupMessage: true,
		ErrorHandler: func(c *fiber.Ctx, err error) error {
			calls.Add(1)
			status := fiber.StatusInternalServerError
			var fe *fiber.Error
			if errors.As(err, &fe) {
				status = fe.Code
			}
			c.Set("X-Rendered-By", "custom")
			return c.Status(status).JSON(fiber.Map{"error": err.Error()})
		},
	})
}

func TestFiberHandlerErrorRenderedAndStored(t *testing.T) {
	t.Parallel()
	var calls, runs atomic.Int64
	app := errorApp(&calls)
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}), func(c *fiber.Ctx) error {
		runs.Add(1)
		return fiber.NewError(fiber.StatusBadRequest, "qty must be positive")
	})
	c := newClient(t, listen(t, app))

	first := c.post("/orders", order, "Idempotency-Key", "err-400")
	want(t, first, 400, `{"error":"qty must be positive"}`, false)
	if first.header.Get("X-Rendered-By") != "custom" {
		t.Fatalf("the app's ErrorHandler did not render the error: %v", first.header)
	}
	replay := c.post("/orders", order, "Idempotency-Key", "err-400")
	want(t, replay, 400, first.body, true)
	if replay.header.Get("X-Rendered-By") != "custom" {
		t.Fatalf("the replay lost the rendered headers: %v", replay.header)
	}
	wantRuns(t, &runs, 1)
	if n := calls.Load(); n != 1 {
		t.Fatalf("ErrorHandler called %d times, want once (the replay does not call it)", n)
	}
}

func TestFiberPlainErrorRendered500NotStored(t *testing.T) {
	t.Parallel()
	var calls, runs atomic.Int64
	app := errorApp(&calls)
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}), func(c *fiber.Ctx) error {
		runs.Add(1)
		return errors.New("database down")
	})
	c := newClient(t, listen(t, app))
	for range 2 {
		want(t, c.post("/orders", order, "Idempotency-Key", "err-500"), 500, `{"error":"database down"}`, false)
	}
	wantRuns(t, &runs, 2) // 500 is not stored: the retry runs again
	if n := calls.Load(); n != 2 {
		t.Fatalf("ErrorHandler called %d times, want once per request", n)
	}
}

func TestFiberRecoverAfterPanic(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recover.New())
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}), func(c *fiber.Ctx) error {
		if runs.Add(1) == 1 {
			panic("first run fails")
		}
		return c.Status(fiber.StatusCreated).SendString("created")
	})
	c := newClient(t, listen(t, app))

	want(t, c.post("/orders", order, "Idempotency-Key", "panic-1"), 500, "", false)
	// The lock was released and nothing stored: the retry runs the handler.
	want(t, c.post("/orders", order, "Idempotency-Key", "panic-1"), 201, "created", false)
	want(t, c.post("/orders", order, "Idempotency-Key", "panic-1"), 201, "created", true)
	wantRuns(t, &runs, 2)
}

func TestFiberStreamedBodyNotStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}), func(c *fiber.Ctx) error {
		n := runs.Add(1)
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprintf(w, "chunk 1 of run %d\n", n)
			w.Flush() //nolint:errcheck
			fmt.Fprintf(w, "chunk 2 of run %d\n", n)
		})
		return nil
	})
	c := newClient(t, listen(t, app))
	for i := 1; i <= 2; i++ {
		want(t, c.post("/orders", order, "Idempotency-Key", "stream-1"), 200,
			fmt.Sprintf("chunk 1 of run %d\nchunk 2 of run %d\n", i, i), false)
	}
	wantRuns(t, &runs, 2)
}

// Fiber routes on the path as sent: /docs/x%2Fversions is the document
// "x/versions" and /docs/x/versions the versions of "x". One key sent to
// both is a key reused, not a replay of the first one's response.
func TestFiberEscapedPathFingerprinted(t *testing.T) {
	t.Parallel()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}))
	app.Post("/docs/:name", func(c *fiber.Ctx) error { return c.Status(fiber.StatusCreated).SendString("doc") })
	app.Post("/docs/:name/versions", func(c *fiber.Ctx) error { return c.Status(fiber.StatusCreated).SendString("version") })
	c := newClient(t, listen(t, app))
	want(t, c.post("/docs/x%2Fversions", order, "Idempotency-Key", "escaped"), http.StatusCreated, "doc", false)
	if r := c.post("/docs/x/versions", order, "Idempotency-Key", "escaped"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("the same key on /docs/x/versions: %d %s, want 422", r.status, r.body)
	}
	want(t, c.post("/docs/x%2Fversions", order, "Idempotency-Key", "escaped"), http.StatusCreated, "doc", true)
}

// TestFiberBufferReuse stores a response built from fasthttp's reused
// buffers (the body is the request body, a header echoes a request header,
// with no copy in the handler), sends thousands of other requests through
// the same connection, and replays the key: the replay must hold the
// original bytes. The Observer's events keep their strings too.
func TestFiberBufferReuse(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []core.Event
	eng := newEngine(t, core.Config{
		Scope: func(r *core.Request) string { return r.Header.Get("X-User-ID") },
		Observer: func(e core.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		},
	})
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/orders/:id", fiberidem.New(fiberidem.Config{Engine: eng}), func(c *fiber.Ctx) error {
		runs.Add(1)
		c.Set("X-Echo", c.Get("X-Client"))  // unsafe string into fasthttp's buffers
		c.Set("X-Order", c.Params("id"))    // same
		return c.Status(201).Send(c.Body()) // SetBodyRaw: aliases the request body
	})
	c := newClient(t, listen(t, app))

	const original = `{"item":"the original order","qty":1}`
	first := c.post("/orders/1", original, "Idempotency-Key", "keep-me", "X-User-ID", "alice", "X-Client", "original-client")
	want(t, first, 201, original, false)

	const others = 5000
	for i := range others {
		body := fmt.Sprintf(`{"item":"OTHER%030d","qty":%d}`, i, i+2)
		headers := []string{"X-User-ID", "mallory" + strconv.Itoa(i), "X-Client", "client-" + strings.Repeat("z", i%40)}
		if i%2 == 0 { // half with keys, half unprotected
			headers = append(headers, "Idempotency-Key", "other-"+strconv.Itoa(i))
		}
		if r := c.post("/orders/"+strconv.Itoa(i+2), body, headers...); r.status != 201 || r.body != body {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}

	replay := c.post("/orders/1", original, "Idempotency-Key", "keep-me", "X-User-ID", "alice", "X-Client", "another-client")
	want(t, replay, 201, original, true)
	for _, h := range []string{"X-Echo", "X-Order", "Content-Type"} {
		if got, w := replay.header.Get(h), first.header.Get(h); got != w {
			t.Fatalf("replayed %s = %q, want %q", h, got, w)
		}
	}
	wantRuns(t, &runs, 1+others)

	mu.Lock()
	defer mu.Unlock()
	e := events[0]
	if e.Key != "keep-me" || e.Scope != "alice" || e.Route != "/orders/:id" || e.Method != "POST" || e.Outcome != core.OutcomeStored {
		t.Fatalf("first event changed after %d requests: %+v", others, e)
	}
}

func TestFiberNextSkips(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	mw := fiberidem.New(fiberidem.Config{
		Engine: newEngine(t, core.Config{}),
		Next:   func(c *fiber.Ctx) bool { return c.Get("X-Skip") != "" },
	})
	app.Post("/orders", mw, func(c *fiber.Ctx) error {
		return c.Status(201).SendString("run " + strconv.FormatInt(runs.Add(1), 10))
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders", order, "Idempotency-Key", "skip-1", "X-Skip", "1"), 201, "run 1", false)
	want(t, c.post("/orders", order, "Idempotency-Key", "skip-1", "X-Skip", "1"), 201, "run 2", false)
	// Not skipped: the key was never seen, it runs, then replays.
	want(t, c.post("/orders", order, "Idempotency-Key", "skip-1"), 201, "run 3", false)
	want(t, c.post("/orders", order, "Idempotency-Key", "skip-1"), 201, "run 3", true)
	wantRuns(t, &runs, 3)
}

// TestFiberDisableHeaderNormalizing checks that the key header is found in
// any case when the app has fasthttp match header names byte for byte, as
// HTTP/2 clients and proxies such as Envoy send them in lower case.
func TestFiberDisableHeaderNormalizing(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		var runs atomic.Int64
		app := fiber.New(fiber.Config{DisableStartupMessage: true, DisableHeaderNormalizing: disable})
		app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}), func(c *fiber.Ctx) error {
			return c.Status(201).SendString("run " + strconv.FormatInt(runs.Add(1), 10))
		})
		send := func(body string, header ...string) (int, string, bool) {
			t.Helper()
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
			req.Header["Content-Type"] = []string{"application/json"}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header[header[i]] = append(req.Header[header[i]], header[i+1]) // as written, not canonicalised
			}
			resp, err := app.Test(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b), resp.Header.Get(core.HeaderReplay) == "true"
		}
		key := "fold-" + strconv.FormatBool(disable)
		if status, body, replay := send(order, "idempotency-key", key); status != 201 || body != "run 1" || replay {
			t.Fatalf("disable %v: first: %d %q replay %v", disable, status, body, replay)
		}
		if status, body, replay := send(order, "IDEMPOTENCY-KEY", key); status != 201 || body != "run 1" || !replay {
			t.Fatalf("disable %v: retry in upper case: %d %q replay %v, want the replay of run 1", disable, status, body, replay)
		}
		if status, _, _ := send(`{"item":"pen"}`, "Idempotency-Key", key); status != http.StatusUnprocessableEntity {
			t.Fatalf("disable %v: another body: %d, want 422", disable, status)
		}
		if status, _, _ := send(order, "idempotency-key", "a-1", "Idempotency-Key", "b-2"); status != http.StatusBadRequest {
			t.Fatalf("disable %v: two key headers in two cases: %d, want 400", disable, status)
		}
		wantRuns(t, &runs, 1)
	}
}

// TestFiberUseFallsBackToPath pins the documented behaviour of
// app.Use(fiberidem.New(…)): c.Route() is the Use route there, so the route
// template is unknown: Event.Route is "unmatched" for every path, routed or
// not, and ScopeRoute would join the path.
func TestFiberUseFallsBackToPath(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var routes []string
	eng := newEngine(t, core.Config{Observer: func(e core.Event) {
		mu.Lock()
		routes = append(routes, e.Route)
		mu.Unlock()
	}})
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberidem.New(fiberidem.Config{Engine: eng}))
	app.Post("/orders/:id", func(c *fiber.Ctx) error {
		runs.Add(1)
		return c.Status(201).SendString("created")
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders/1", order, "Idempotency-Key", "use-1"), 201, "created", false)
	want(t, c.post("/orders/1", order, "Idempotency-Key", "use-1"), 201, "created", true)
	if r := c.post("/orders/2", order, "Idempotency-Key", "use-1"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("another path with app.Use: %d %s, want 422 (the path is the route)", r.status, r.body)
	}
	wantRuns(t, &runs, 1)
	// A wrong URL gets Fiber's 404, not stored: the key stays free for the
	// right URL.
	for range 2 {
		if r := c.post("/orderz", order, "Idempotency-Key", "use-2"); r.status != http.StatusNotFound || r.header.Get(core.HeaderReplay) != "" {
			t.Fatalf("a URL no route matches: %d replay %q %s, want Fiber's 404", r.status, r.header.Get(core.HeaderReplay), r.body)
		}
	}
	want(t, c.post("/orders/3", order, "Idempotency-Key", "use-2"), 201, "created", false)
	wantRuns(t, &runs, 2)
	mu.Lock()
	defer mu.Unlock()
	for _, r := range routes {
		if r != "unmatched" {
			t.Fatalf("routes %q, want \"unmatched\" for every request", routes)
		}
	}
}

func TestFiberScopeFromLocals(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, core.Config{Scope: func(r *core.Request) string {
		user, _ := r.Context.Value("user").(string)
		return user
	}})
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error { // an authentication middleware
		c.Locals("user", strings.TrimPrefix(c.Get("Authorization"), "Bearer "))
		return c.Next()
	})
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: eng}), func(c *fiber.Ctx) error {
		return c.Status(201).SendString("order " + strconv.FormatInt(runs.Add(1), 10))
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders", order, "Idempotency-Key", "scope-1", "Authorization", "Bearer alice"), 201, "order 1", false)
	want(t, c.post("/orders", order, "Idempotency-Key", "scope-1", "Authorization", "Bearer bob"), 201, "order 2", false)
	want(t, c.post("/orders", order, "Idempotency-Key", "scope-1", "Authorization", "Bearer alice"), 201, "order 1", true)
	wantRuns(t, &runs, 2)
}

// TestFiberStreamRequestBody: with Fiber's StreamRequestBody the request
// body is a stream that the Engine reads once; the handler still sees it.
func TestFiberStreamRequestBody(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true, StreamRequestBody: true})
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}), func(c *fiber.Ctx) error {
		runs.Add(1)
		return c.Status(201).Send(c.Body())
	})
	c := newClient(t, listen(t, app))
	body := `{"item":"` + strings.Repeat("s", 100_000) + `","qty":1}`
	want(t, c.post("/orders", body, "Idempotency-Key", "stream-in"), 201, body, false)
	want(t, c.post("/orders", body, "Idempotency-Key", "stream-in"), 201, body, true)
	if r := c.post("/orders", order, "Idempotency-Key", "stream-in"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("changed body: %d, want 422", r.status)
	}
	wantRuns(t, &runs, 1)
}

// Config.ErrorHandler routes idem's own refusals through the app's
// ErrorHandler, keeping headers such as Retry-After.
func TestFiberConfigErrorHandler(t *testing.T) {
	t.Parallel()
	var calls, runs atomic.Int64
	app := errorApp(&calls)
	idem := fiberidem.New(fiberidem.Config{
		Engine: newEngine(t, core.Config{}),
		ErrorHandler: func(c *fiber.Ctx, p *core.Problem) error {
			return fiber.NewError(p.Status, p.Title)
		},
	})
	started, release := make(chan struct{}), make(chan struct{})
	app.Post("/orders", idem, func(c *fiber.Ctx) error {
		if runs.Add(1) == 1 {
			close(started)
		}
		<-release
		return c.SendStatus(fiber.StatusCreated)
	})
	url := listen(t, app)
	c, first := newClient(t, url), newClient(t, url) // one connection each
	done := make(chan result)
	go func() { done <- first.post("/orders", order, "Idempotency-Key", "eh-1") }()
	<-started
	r := c.post("/orders", order, "Idempotency-Key", "eh-1")
	close(release)
	<-done
	want(t, r, fiber.StatusConflict, `{"error":"Request in flight"}`, false)
	if r.header.Get("X-Rendered-By") != "custom" || r.header.Get("Retry-After") == "" {
		t.Fatalf("the 409 was not rendered by the app with its Retry-After: %v", r.header)
	}
	if ct := r.header.Get("Content-Type"); strings.Contains(ct, "problem") {
		t.Fatalf("Content-Type %q: the app's rendering is not a problem document", ct)
	}
}

// TestFiberStreamBodySmuggling: with StreamRequestBody, a body refused
// unread (over MaxBodyBytes, or with a bad key) is not left on the
// connection, where fasthttp would read it as the next request: the
// connection is drained or closed, and the request inside the body never
// runs. fasthttp reads 8 KiB of a streamed body before the handlers.
func TestFiberStreamBodySmuggling(t *testing.T) {
	t.Parallel()
	idemtest.TestSmuggling(t, 8<<10, serveOrders(true))
}

// TestFiberStreamTruncatedBody: with StreamRequestBody the handlers read the body after
// fasthttp, which takes a body cut short of its Content-Length for a
// whole one: it is refused, nothing stored, and the whole body's retry runs.
func TestFiberStreamTruncatedBody(t *testing.T) {
	t.Parallel()
	idemtest.TestTruncatedBody(t, serveOrders(true))
}

// TestFiberReplayHeadersExact: a replay carries the headers the first
// response went out with, no more: fasthttp sends its default Content-Type
// only with a body, so a 204 or an empty 200 has none, and neither has its
// replay; one the handler set is kept.
func TestFiberReplayHeadersExact(t *testing.T) {
	t.Parallel()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	idem := fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})})
	app.Post("/204", idem, func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusNoContent) })
	app.Post("/empty", idem, func(c *fiber.Ctx) error { c.Status(fiber.StatusOK); return nil })
	app.Post("/typed", idem, func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
		return c.SendStatus(fiber.StatusAccepted)
	})
	app.Post("/body", idem, func(c *fiber.Ctx) error { return c.Status(fiber.StatusCreated).SendString("made") })
	c := newClient(t, listen(t, app))
	for path, wantType := range map[string]string{"/204": "", "/empty": "", "/typed": "text/plain; charset=utf-8", "/body": "text/plain; charset=utf-8"} {
		first := c.post(path, order, "Idempotency-Key", "exact"+path)
		replay := c.post(path, order, "Idempotency-Key", "exact"+path)
		if replay.header.Get(core.HeaderReplay) != "true" {
			t.Fatalf("%s: not replayed", path)
		}
		for _, r := range []result{first, replay} {
			if got, ok := r.header["Content-Type"]; wantType == "" && ok || wantType != "" && (len(got) != 1 || got[0] != wantType) {
				t.Errorf("%s: Content-Type %q, want %q", path, got, wantType)
			}
		}
		replay.header.Del(core.HeaderReplay)
		for _, h := range []http.Header{first.header, replay.header} {
			h.Del("Date")
		}
		if fmt.Sprint(first.header) != fmt.Sprint(replay.header) {
			t.Errorf("%s: replay headers %v, first %v", path, replay.header, first.header)
		}
	}
}

// In the transactional mode (a core.TxStore: the Flight is Buffered) the
// handler runs with the transaction in its context, and a streamed body is
// read whole and committed with the record before it is sent. A commit that
// fails answers 503 instead, and a panic after the response recover's 500,
// with the headers set before the middleware and none of the handler's,
// its cookies included.
func TestFiberBuffered(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recover.New(), func(c *fiber.Ctx) error {
		c.Set("X-Outer", "o")
		return c.Next()
	})
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{Store: store})}), func(c *fiber.Ctx) error {
		n := runs.Add(1)
		if !idemtest.InTx(c.UserContext()) {
			return errors.New("no transaction in the handler's context")
		}
		c.Set("X-Order-Id", strconv.FormatInt(n, 10))
		c.Cookie(&fiber.Cookie{Name: "session", Value: "secret"})
		if c.Get("X-Panic") != "" {
			c.Status(fiber.StatusCreated).SendString("created") //nolint:errcheck
			panic("after the response")
		}
		c.Status(fiber.StatusCreated).Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprintf(w, "chunk 1 of run %d\n", n)
			w.Flush() //nolint:errcheck
			fmt.Fprintf(w, "chunk 2 of run %d\n", n)
		})
		return nil
	})
	c := newClient(t, listen(t, app))

	store.FailCommits(true)
	r := c.post("/orders", order, "Idempotency-Key", "buffered-1")
	want(t, r, fiber.StatusServiceUnavailable, "", false)
	if !strings.Contains(r.body, "problems.md#store-unavailable") || r.header.Get("Retry-After") == "" || r.header.Get("X-Outer") != "o" ||
		r.header.Get("X-Order-Id") != "" || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("failed commit: got %v %s, want the 503 problem, X-Outer and none of the handler's headers", r.header, r.body)
	}
	store.FailCommits(false)
	r = c.post("/orders", order, "Idempotency-Key", "buffered-1", "X-Panic", "1")
	want(t, r, fiber.StatusInternalServerError, "", false)
	if r.header.Get("X-Outer") != "o" || r.header.Get("X-Order-Id") != "" || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("a panic after the response: got %v, want X-Outer and none of the handler's headers", r.header)
	}
	first := c.post("/orders", order, "Idempotency-Key", "buffered-1")
	want(t, first, fiber.StatusCreated, "chunk 1 of run 3\nchunk 2 of run 3\n", false)
	if first.header.Get("X-Order-Id") != "3" || first.header.Get("Set-Cookie") == "" || first.header.Get("Content-Length") == "" {
		t.Fatalf("first response headers %v, want X-Order-Id 3, the cookie and a Content-Length", first.header)
	}
	want(t, c.post("/orders", order, "Idempotency-Key", "buffered-1"), fiber.StatusCreated, first.body, true)
	wantRuns(t, &runs, 3)
}

// TestFiberRefusedLargeBody: a client still sending a large body that
// idem refuses unread reads the answer, with and without StreamRequestBody.
func TestFiberRefusedLargeBody(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			t.Parallel()
			idemtest.TestRefusedLargeBody(t, serveOrders(stream))
		})
	}
}

// TestFiberRefusedLargeBodyAppTest: app.Test's connection cannot be
// half-closed, so the adapter leaves it to fasthttp rather than answer
// after app.Test has read the response: it gets the 413.
func TestFiberRefusedLargeBodyAppTest(t *testing.T) {
	t.Parallel()
	app := fiber.New(fiber.Config{StreamRequestBody: true})
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{MaxBodyBytes: 64 << 10})}), func(c *fiber.Ctx) error {
		return c.SendStatus(fiber.StatusCreated)
	})
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(strings.Repeat("x", 1<<20)))
	req.Header.Set("Idempotency-Key", "app-test-large")
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d, want 413", resp.StatusCode)
	}
}

// serveOrders returns a server for the idemtest HTTP kits: POST /orders
// through the middleware on an Engine of cfg to a handler that calls run
// and answers 201, with StreamRequestBody if stream.
func serveOrders(stream bool) func(t *testing.T, cfg core.Config, run func()) string {
	return func(t *testing.T, cfg core.Config, run func()) string {
		app := fiber.New(fiber.Config{DisableStartupMessage: true, StreamRequestBody: stream})
		app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: newEngine(t, cfg)}), func(c *fiber.Ctx) error {
			run()
			return c.Status(201).SendString("created")
		})
		return listen(t, app)
	}
}

// A Buffered flight whose commit fails answers 503 store-unavailable: with
// Config.ErrorHandler, the hook renders it, as it renders the other 503s.
func TestFiberBufferedFailedCommitErrorHandler(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/orders", fiberidem.New(fiberidem.Config{
		Engine: newEngine(t, core.Config{Store: store}),
		ErrorHandler: func(c *fiber.Ctx, p *core.Problem) error {
			return c.Status(p.Status).JSON(fiber.Map{"error": p.Title})
		},
	}), func(c *fiber.Ctx) error {
		c.Set("X-Order-Id", "42")
		return c.Status(fiber.StatusCreated).SendString("created")
	})
	req := httptest.NewRequest(fiber.MethodPost, "/orders", strings.NewReader(order))
	req.Header.Set("Idempotency-Key", "buffered-eh-1")
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != fiber.StatusServiceUnavailable || string(body) != `{"error":"Idempotency store unavailable"}` ||
		resp.Header.Get("X-Order-Id") != "" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("failed commit: got %d %v %s, want the 503 rendered by the error handler", resp.StatusCode, resp.Header, body)
	}
}

// A handler that routes the request again (c.RestartRouting) sends it
// through the middleware under app.Use a second time: that pass lets it
// through, and the first stores the answer, replayed on a retry. (It found
// the first pass's lock and answered 409, which the first stored.)
func TestFiberRestartRouting(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}))
	app.Post("/orders/legacy", func(c *fiber.Ctx) error {
		c.Path("/orders")
		return c.RestartRouting()
	})
	app.Post("/orders", func(c *fiber.Ctx) error {
		return c.Status(201).SendString("order " + strconv.FormatInt(runs.Add(1), 10))
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders/legacy", order, "Idempotency-Key", "restart-1"), 201, "order 1", false)
	want(t, c.post("/orders/legacy", order, "Idempotency-Key", "restart-1"), 201, "order 1", true)
	wantRuns(t, &runs, 1)
}

// A route whose own middleware has an Engine of its own, under app.Use's
// of another, is protected by both: the route's Engine holds the key too,
// and its handler runs under it (its Scope, a TxStore's transaction).
func TestFiberTwoEngines(t *testing.T) {
	t.Parallel()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberidem.New(fiberidem.Config{Engine: newEngine(t, core.Config{})}))
	inner := newEngine(t, core.Config{Scope: func(*core.Request) string { return "inner" }})
	app.Post("/orders", fiberidem.New(fiberidem.Config{Engine: inner}), func(c *fiber.Ctx) error {
		info, _ := core.InfoFromContext(c.UserContext())
		return c.Status(201).SendString("scope " + info.Scope)
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders", order, "Idempotency-Key", "two-1"), 201, "scope inner", false)
}

// A request whose context the app set from one that carries a key of its
// own (here core.Do's, on the same Engine) is protected all the same.
func TestFiberLeasedUserContext(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	eng := newEngine(t, core.Config{})
	var leased context.Context
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		c.SetUserContext(leased)
		return c.Next()
	}, fiberidem.New(fiberidem.Config{Engine: eng}))
	app.Post("/orders", func(c *fiber.Ctx) error {
		return c.Status(201).SendString("order " + strconv.FormatInt(runs.Add(1), 10))
	})
	c := newClient(t, listen(t, app))
	_, _, err := core.Do(context.Background(), eng, "", "job-1", func(ctx context.Context) (int, error) {
		leased = ctx
		want(t, c.post("/orders", order, "Idempotency-Key", "leased-1"), 201, "order 1", false)
		want(t, c.post("/orders", order, "Idempotency-Key", "leased-1"), 201, "order 1", true)
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRuns(t, &runs, 1)
}
