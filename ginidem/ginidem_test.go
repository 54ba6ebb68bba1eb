package ginidem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/ginidem"
)

const order = `{"item":"book","qty":2}`

func newEngine(t *testing.T, cfg core.Config) *core.Engine {
	t.Helper()
	eng, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// post sends POST path with the key (none if "") and extra header pairs
// through h in-process.
func post(h http.Handler, path, key string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(order))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func wantResponse(t *testing.T, rec *httptest.ResponseRecorder, status int, body string, replay bool) {
	t.Helper()
	if rec.Code != status || rec.Body.String() != body {
		t.Fatalf("got %d %s, want %d %s", rec.Code, rec.Body, status, body)
	}
	if got := rec.Header().Get(core.HeaderReplay) == "true"; got != replay {
		t.Fatalf("replay header %q, want replay=%v", rec.Header().Get(core.HeaderReplay), replay)
	}
}

func wantRuns(t *testing.T, name string, n *atomic.Int64, want int64) {
	t.Helper()
	if got := n.Load(); got != want {
		t.Fatalf("%s ran %d times, want %d", name, got, want)
	}
}

// created is a handler that counts its runs and answers 201 with the body
// it read.
func created(runs *atomic.Int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		b, err := io.ReadAll(c.Request.Body)
		if err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		runs.Add(1)
		c.Data(http.StatusCreated, "application/json", b)
	}
}

func TestNewNilEnginePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic: every covered request would")
		}
	}()
	ginidem.New(nil)
}

// A middleware after ginidem that aborts with AbortWithStatusJSON answers
// for the request: its response is the one stored and replayed, and the
// handler behind it never runs.
func TestGinAbortWithStatusJSONStored(t *testing.T) {
	t.Parallel()
	var guards, runs atomic.Int64
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})), func(c *gin.Context) {
		guards.Add(1)
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "forbidden"})
	})
	r.POST("/orders", created(&runs))

	const want = `{"error":"forbidden"}`
	wantResponse(t, post(r, "/orders", "abort-1"), http.StatusForbidden, want, false)
	rec := post(r, "/orders", "abort-1")
	wantResponse(t, rec, http.StatusForbidden, want, true)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("replayed Content-Type %q", ct)
	}
	wantRuns(t, "the aborting middleware", &guards, 1)
	wantRuns(t, "the handler", &runs, 0)
}

// Headers set after c.AbortWithStatus never reach the client (the headers
// went out with the status): they are not stored either.
func TestGinAbortWithStatusHeadersAsSent(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		c.Header("X-Early", "sent")
		c.AbortWithStatus(http.StatusAccepted)
		c.Header("X-Late", "never sent")
	})
	for i := range 2 {
		rec := post(r, "/orders", "abort-status-1")
		got := rec.Result().Header // as on the wire: at WriteHeader
		if rec.Code != http.StatusAccepted || got.Get("X-Early") != "sent" || got.Get("X-Late") != "" {
			t.Fatalf("response %d: %d, X-Early %q, X-Late %q", i+1, rec.Code, got.Get("X-Early"), got.Get("X-Late"))
		}
		if replay := got.Get(core.HeaderReplay) == "true"; replay != (i == 1) {
			t.Fatalf("response %d: replay %v", i+1, replay)
		}
	}
}

// A handler that records c.Error and writes nothing leaves its response to
// an error middleware before ginidem, after ginidem has returned: nothing is
// stored, the lock is released, and the retry runs the handler again. A
// response the handler wrote or chose is stored.
func TestGinErrorWithoutResponseNotStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.Use(func(c *gin.Context) { // renders c.Errors, as error middlewares do
		c.Next()
		if len(c.Errors) > 0 && !c.Writer.Written() {
			c.JSON(http.StatusConflict, gin.H{"error": c.Errors.Last().Error()})
		}
	}, ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		c.Error(errors.New("out of stock")) //nolint:errcheck // the *gin.Error is not needed
	})

	for range 2 {
		wantResponse(t, post(r, "/orders", "error-1"), http.StatusConflict, `{"error":"out of stock"}`, false)
	}
	wantRuns(t, "the handler", &runs, 2)

	// An error that the handler writes itself is its response: stored.
	r.POST("/written", func(c *gin.Context) {
		runs.Add(1)
		c.AbortWithError(http.StatusConflict, errors.New("out of stock")) //nolint:errcheck
	})
	wantResponse(t, post(r, "/written", "error-2"), http.StatusConflict, "", false)
	wantResponse(t, post(r, "/written", "error-2"), http.StatusConflict, "", true)
	wantRuns(t, "the handlers", &runs, 3)

	// So is a success status that the handler sets beside an error meant
	// for the logs: ginidem sends it, so the error middleware leaves it
	// alone, and stores it.
	r.POST("/logged", func(c *gin.Context) {
		runs.Add(1)
		c.Error(errors.New("audit log unavailable")) //nolint:errcheck // for the logs
		c.Status(http.StatusNoContent)
	})
	wantResponse(t, post(r, "/logged", "error-3"), http.StatusNoContent, "", false)
	wantResponse(t, post(r, "/logged", "error-3"), http.StatusNoContent, "", true)
	wantRuns(t, "the handlers", &runs, 4)
}

// An error that a middleware before ginidem recorded is not the handlers':
// a handler that writes nothing after it has its response (Gin's 200)
// stored, so a retry is a replay, not a second run.
func TestGinEarlierErrorNotTheHandlers(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var runs atomic.Int64
	r.Use(func(c *gin.Context) {
		c.Error(errors.New("deprecated client")) //nolint:errcheck // for the logs
		c.Next()
	}, ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(*gin.Context) { runs.Add(1) })

	wantResponse(t, post(r, "/orders", "earlier-error"), http.StatusOK, "", false)
	wantResponse(t, post(r, "/orders", "earlier-error"), http.StatusOK, "", true)
	wantRuns(t, "the handler", &runs, 1)
}

// A middleware before ginidem that binds the body with ShouldBindBodyWith
// leaves r.Body drained and the bytes in the context: ginidem fingerprints
// those, so another body under the same key is a key reused, not a replay.
func TestGinBodyBoundBefore(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.Use(func(c *gin.Context) {
		var v map[string]any
		if err := c.ShouldBindBodyWith(&v, binding.JSON); err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
		}
	}, ginidem.New(newEngine(t, core.Config{})))
	r.POST("/charges", func(c *gin.Context) {
		var v struct{ Amount int }
		if err := c.ShouldBindBodyWith(&v, binding.JSON); err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		runs.Add(1)
		c.String(http.StatusCreated, "charged %d", v.Amount)
	})
	charge := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "bound")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}
	wantResponse(t, charge(`{"amount":100}`), http.StatusCreated, "charged 100", false)
	wantResponse(t, charge(`{ "amount": 100 }`), http.StatusCreated, "charged 100", true)
	if rec := charge(`{"amount":999}`); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("another body under the same key: %d %s, want 422", rec.Code, rec.Body)
	}
	wantRuns(t, "the handler", &runs, 1)
}

// With UseRawPath, Gin routes on the escaped path: /docs/x%2Fversions is
// the document "x/versions" and /docs/x/versions the versions of "x". One
// key sent to both is a key reused, not a replay.
func TestGinEscapedPathFingerprinted(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.UseRawPath = true
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/docs/:name", func(c *gin.Context) { c.String(http.StatusCreated, "doc") })
	r.POST("/docs/:name/versions", func(c *gin.Context) { c.String(http.StatusCreated, "version") })
	wantResponse(t, post(r, "/docs/x%2Fversions", "escaped"), http.StatusCreated, "doc", false)
	if rec := post(r, "/docs/x/versions", "escaped"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("the same key on /docs/x/versions: %d %s, want 422", rec.Code, rec.Body)
	}
	wantResponse(t, post(r, "/docs/x%2Fversions", "escaped"), http.StatusCreated, "doc", true)
}

// gin.Recovery before ginidem turns a panic into a 500: the lock was
// released and nothing stored, so the retry runs the handler, and that
// response is stored.
func TestGinRecoveryReleasesLock(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		if runs.Add(1) == 1 {
			panic("first run fails")
		}
		c.String(http.StatusCreated, "run %d", runs.Load())
	})

	wantResponse(t, post(r, "/orders", "panic-1"), http.StatusInternalServerError, "", false)
	wantResponse(t, post(r, "/orders", "panic-1"), http.StatusCreated, "run 2", false)
	wantResponse(t, post(r, "/orders", "panic-1"), http.StatusCreated, "run 2", true)
	wantRuns(t, "the handler", &runs, 2)
}

// A streamed response (c.Stream flushes) is passed through and stored when
// the handler returns: the retry is its replay.
func TestGinStreamedStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusCreated)
		c.Stream(func(w io.Writer) bool {
			io.WriteString(w, "chunk") //nolint:errcheck
			return false
		})
	})
	srv := httptest.NewServer(r) // c.Stream needs a real connection (CloseNotify)
	t.Cleanup(srv.Close)
	for i, replay := range []string{"", "true"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(order))
		req.Header.Set("Idempotency-Key", "stream-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusCreated || string(b) != "chunk" || resp.Header.Get(core.HeaderReplay) != replay {
			t.Fatalf("request %d: got %d %q %v (%v), want 201 chunk, replay %q", i, resp.StatusCode, b, resp.Header, err, replay)
		}
	}
	wantRuns(t, "the handler", &runs, 1)
}

// A request that matched no route passes through untouched: nothing stored,
// and its key stays free for the route the client meant.
func TestGinUnmatchedRouteUntouched(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.NoRoute(func(c *gin.Context) {
		runs.Add(1)
		c.String(http.StatusNotFound, "no such page")
	})
	r.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "created") })
	wantResponse(t, post(r, "/nowhere/1", "noroute-1"), http.StatusNotFound, "no such page", false)
	wantResponse(t, post(r, "/nowhere/1", "noroute-1"), http.StatusNotFound, "no such page", false)
	wantRuns(t, "NoRoute", &runs, 2)
	req := httptest.NewRequest(http.MethodPut, "/orders", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "noroute-1")
	for range 2 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req.Clone(req.Context()))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get(core.HeaderReplay) != "" {
			t.Fatalf("PUT /orders: %d, replay %q; want 405, not a replay", rec.Code, rec.Header().Get(core.HeaderReplay))
		}
	}
	wantResponse(t, post(r, "/orders", "noroute-1"), http.StatusCreated, "created", false)
}

type ctxKey struct{}

// The Scope function reads what the authentication middleware put in the
// gin.Context (c.Set) and in the request's context, whose cancellation it
// carries although the gin.Engine has no ContextWithFallback.
func TestGinScopeFromContext(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	eng := newEngine(t, core.Config{Scope: func(r *core.Request) string {
		user, _ := r.Context.Value("user").(string)
		tenant, _ := r.Context.Value(ctxKey{}).(string)
		if c, _ := r.Context.Value(gin.ContextKey).(*gin.Context); c == nil {
			t.Error("no *gin.Context under gin.ContextKey")
		}
		if r.Context.Done() == nil {
			t.Error("the request's cancellation is lost")
		}
		return tenant + "/" + user
	}})
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Set("user", c.GetHeader("X-User-ID"))
		ctx, cancel := context.WithCancel(context.WithValue(c.Request.Context(), ctxKey{}, "acme"))
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}, ginidem.New(eng))
	r.POST("/orders", created(&runs))

	alice := post(r, "/orders", "scope-1", "X-User-ID", "alice")
	wantResponse(t, alice, http.StatusCreated, order, false)
	wantResponse(t, post(r, "/orders", "scope-1", "X-User-ID", "bob"), http.StatusCreated, order, false)
	wantResponse(t, post(r, "/orders", "scope-1", "X-User-ID", "alice"), http.StatusCreated, order, true)
	wantRuns(t, "the handler", &runs, 2)
}

// Routes outside the group that uses ginidem, and methods it does not
// cover, are untouched.
func TestGinRouteOutsideGroupUntouched(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	r := gin.New()
	api := r.Group("/api", ginidem.New(newEngine(t, core.Config{Required: true})))
	api.POST("/orders", created(&runs))
	api.GET("/orders", created(&runs))
	r.POST("/public", created(&runs))

	for range 2 {
		wantResponse(t, post(r, "/public", "outside-1"), http.StatusCreated, order, false)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/orders", nil))
		wantResponse(t, rec, http.StatusCreated, "", false)
	}
	wantRuns(t, "the handlers", &runs, 4)
	if rec := post(r, "/api/orders", ""); rec.Code != http.StatusBadRequest {
		t.Fatalf("POST /api/orders without a key: %d, want 400", rec.Code)
	}
	wantRuns(t, "the handlers", &runs, 4)
}

// The response is captured whichever way it is written (Write, WriteString,
// io.Copy) and the status and size that Gin reports stay right, for the
// middlewares before ginidem.
func TestGinCaptureKeepsStatusAndSize(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	var status, size []int
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		status, size = append(status, c.Writer.Status()), append(size, c.Writer.Size())
	}, ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		c.Header("X-Order-Id", "42")
		c.Status(http.StatusAccepted)
		c.Writer.WriteString("ab")                 //nolint:errcheck
		c.Writer.Write([]byte("cd"))               //nolint:errcheck
		io.Copy(c.Writer, strings.NewReader("ef")) //nolint:errcheck
	})
	first := post(r, "/orders", "capture-1")
	wantResponse(t, first, http.StatusAccepted, "abcdef", false)
	replay := post(r, "/orders", "capture-1")
	wantResponse(t, replay, http.StatusAccepted, "abcdef", true)
	if replay.Header().Get("X-Order-Id") != "42" {
		t.Fatalf("replay headers %v", replay.Header())
	}
	wantRuns(t, "the handler", &runs, 1)
	if len(status) != 2 || status[0] != 202 || status[1] != 202 || size[0] != 6 || size[1] != 6 {
		t.Fatalf("outer middleware saw statuses %v and sizes %v, want 202 and 6 twice", status, size)
	}
}

// WithErrorHandler renders idem's refusals the app's way; the problem's
// headers (Retry-After) are kept and nothing after ginidem runs.
func TestGinWithErrorHandler(t *testing.T) {
	eng := newEngine(t, core.Config{FailClosed: true, Store: failingStore{}})
	var runs atomic.Int64
	r := gin.New()
	r.Use(ginidem.New(eng, ginidem.WithErrorHandler(func(c *gin.Context, p *core.Problem) {
		c.JSON(p.Status, gin.H{"error": p.Title})
	})))
	r.POST("/orders", created(&runs))
	rec := post(r, "/orders", "eh-1")
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != `{"error":"Idempotency store unavailable"}` {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("Retry-After") == "" || strings.Contains(rec.Header().Get("Content-Type"), "problem") {
		t.Fatalf("headers %v: want Retry-After kept and the app's Content-Type", rec.Header())
	}
	wantRuns(t, "handler", &runs, 0)
	// Bad keys go through the hook too.
	if rec := post(r, "/orders", strings.Repeat("k", 300)); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "Invalid idempotency key") {
		t.Fatalf("bad key: %d %s", rec.Code, rec.Body)
	}
}

// failingStore is a store whose backend is down.
type failingStore struct{}

func (failingStore) Acquire(context.Context, string, time.Duration) ([]byte, string, error) {
	return nil, "", errors.New("down")
}
func (failingStore) Complete(context.Context, string, string, []byte, time.Duration) error {
	return errors.New("down")
}
func (failingStore) Release(context.Context, string, string) error { return errors.New("down") }
func (failingStore) Refresh(context.Context, string, string, time.Duration) error {
	return errors.New("down")
}

// In the transactional mode (a core.TxStore: the Flight is Buffered) the
// handlers run with the transaction in their context, and their response
// is held back until it commits with their writes:
// middleware after ginidem sees it begun (Status, Size, Written), a flush
// sends nothing, and the middleware before ginidem sees what was sent: the
// handler's response, or the 503 that replaces it when the commit fails.
func TestGinBuffered(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	var runs atomic.Int64
	var outer, inner []string
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		outer = append(outer, fmt.Sprint(c.Writer.Status(), c.Writer.Size(), c.Writer.Written()))
	}, ginidem.New(newEngine(t, core.Config{Store: store})), func(c *gin.Context) {
		c.Next()
		inner = append(inner, fmt.Sprint(c.Writer.Status(), c.Writer.Size(), c.Writer.Written()))
	})
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		if !idemtest.InTx(c.Request.Context()) {
			c.AbortWithStatus(http.StatusInternalServerError)
			return
		}
		c.Header("X-Order-Id", "42")
		c.Status(http.StatusCreated)
		c.Stream(func(w io.Writer) bool {
			io.WriteString(w, "chunk") //nolint:errcheck
			return false
		})
		c.Status(http.StatusAccepted) // too late: the response has begun
	})
	srv := httptest.NewServer(r) // c.Stream needs a real connection (CloseNotify)
	t.Cleanup(srv.Close)
	send := func() (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(order))
		req.Header.Set("Idempotency-Key", "buffered-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	store.FailCommits(true)
	resp, failed := send()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Order-Id") != "" || !strings.Contains(failed, "problems.md#store-unavailable") {
		t.Fatalf("failed commit: got %d %v %s, want the 503 problem alone", resp.StatusCode, resp.Header, failed)
	}
	store.FailCommits(false)
	for i, replay := range []string{"", "true"} {
		resp, body := send()
		if resp.StatusCode != http.StatusCreated || body != "chunk" || resp.Header.Get("X-Order-Id") != "42" || resp.Header.Get(core.HeaderReplay) != replay {
			t.Fatalf("request %d: got %d %q %v, want 201 chunk, replay %q", i, resp.StatusCode, body, resp.Header, replay)
		}
	}
	wantRuns(t, "the handler", &runs, 2)
	if len(outer) != 3 || outer[0] != fmt.Sprint(503, " ", len(failed), " true") || outer[1] != "201 5 true" || outer[2] != "201 5 true" {
		t.Fatalf("middleware before ginidem saw %q, want the 503, then 201 5 true twice", outer)
	}
	if len(inner) != 2 || inner[0] != "201 5 true" || inner[1] != "201 5 true" {
		t.Fatalf("middleware after ginidem saw %q, want 201 5 true twice", inner)
	}
}

// A Buffered flight whose commit fails answers 503 store-unavailable: with
// WithErrorHandler, the hook renders it, as it renders the other 503s.
func TestGinBufferedFailedCommitErrorHandler(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{Store: store}), ginidem.WithErrorHandler(func(c *gin.Context, p *core.Problem) {
		c.JSON(p.Status, gin.H{"error": p.Title})
	})))
	r.POST("/orders", func(c *gin.Context) {
		c.Header("X-Order-Id", "42")
		c.String(http.StatusCreated, "created")
	})
	rec := post(r, "/orders", "buffered-eh-1")
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != `{"error":"Idempotency store unavailable"}` ||
		rec.Header().Get("X-Order-Id") != "" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("failed commit: got %d %v %s, want the 503 rendered by the error handler", rec.Code, rec.Header(), rec.Body)
	}
}

// A handler that dispatches the request again (r.HandleContext) through a
// ginidem under r.Use gets the second pass's 500 middleware-twice, which
// the first does not store: the documented misconfiguration fails loudly,
// the target never runs, and the key stays free.
func TestGinHandleContextUnderUse(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var runs atomic.Int64
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", created(&runs))
	r.POST("/legacy/orders", func(c *gin.Context) {
		c.Request.URL.Path = "/orders"
		r.HandleContext(c)
	})
	for range 2 {
		rec := post(r, "/legacy/orders", "dispatched")
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "#middleware-twice") ||
			rec.Header().Get(core.HeaderReplay) != "" {
			t.Fatalf("got %d %v %s, want 500 middleware-twice, not replayed", rec.Code, rec.Header(), rec.Body)
		}
	}
	wantRuns(t, "the handler", &runs, 0)
	if rec := post(r, "/orders", "dispatched"); rec.Code != http.StatusCreated {
		t.Fatalf("the key on its route: got %d %s, want 201 (nothing stored under it)", rec.Code, rec.Body)
	}
	wantRuns(t, "the handler", &runs, 1)
}

// A replay of a response without a body is sent by ginidem, as one with a
// body: a middleware before it sees it written, not a status Gin has yet to
// send.
func TestGinEmptyReplayWritten(t *testing.T) {
	t.Parallel()
	var written []bool
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		written = append(written, c.Writer.Written())
	}, ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	wantResponse(t, post(r, "/orders", "empty-1"), http.StatusNoContent, "", false)
	wantResponse(t, post(r, "/orders", "empty-1"), http.StatusNoContent, "", true)
	if len(written) != 2 || !written[1] {
		t.Fatalf("the middleware before ginidem saw written = %v, want the replay written", written)
	}
}

// notingWriter is the writer of a middleware before ginidem that keeps the
// last status it was given, -1 included, as gin-contrib/gzip's does.
type notingWriter struct {
	gin.ResponseWriter
	status int
}

func (w *notingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *notingWriter) Status() int {
	if w.status != 0 {
		return w.status
	}
	return w.ResponseWriter.Status()
}

// c.SSEvent renders with the status -1 (keep the status): Gin ignores it,
// and so does ginidem, so that a writer below that keeps it does not turn
// the 200 sent into a status that is not stored (the handler ran again).
func TestGinRenderKeepStatusStored(t *testing.T) {
	t.Parallel()
	wantStoredBelow(t, func(w gin.ResponseWriter) gin.ResponseWriter { return &notingWriter{ResponseWriter: w} },
		func(c *gin.Context) { c.SSEvent("order", "created") }, http.StatusOK, "event:order\ndata:created\n\n")
}

// wantStoredBelow runs h once behind ginidem with a middleware before it
// that wraps Gin's writer with wrap: h's answer, status and body, is
// stored and replayed, and h runs once.
func wantStoredBelow(t *testing.T, wrap func(gin.ResponseWriter) gin.ResponseWriter, h gin.HandlerFunc, status int, body string) {
	t.Helper()
	var runs atomic.Int64
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Writer = wrap(c.Writer); c.Next() })
	r.POST("/orders", ginidem.New(newEngine(t, core.Config{})), func(c *gin.Context) {
		runs.Add(1)
		h(c)
	})
	wantResponse(t, post(r, "/orders", "below-1"), status, body, false)
	wantResponse(t, post(r, "/orders", "below-1"), status, body, true)
	wantRuns(t, "the handler", &runs, 1)
}

// A compressing middleware before ginidem (gin-contrib/gzip) sets
// Content-Encoding for a body and drops it after the chain when none came.
// A replay without a body is sent before that: it has no Content-Encoding
// either, as the first response had none.
func TestGinEmptyReplayNoContentEncoding(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Header("Content-Encoding", "gzip")
		c.Next()
		if c.Writer.Size() <= 0 {
			c.Writer.Header().Del("Content-Encoding")
		}
	})
	r.POST("/orders", ginidem.New(newEngine(t, core.Config{})), func(c *gin.Context) {
		c.Header("Location", "/orders/1")
		c.Status(http.StatusCreated)
	})
	for i, replay := range []bool{false, true} {
		rec := post(r, "/orders", "empty-gzip-1")
		wantResponse(t, rec, http.StatusCreated, "", replay)
		sent := rec.Result().Header // as sent: rec.Header() is the map, changed after
		if ce, loc := sent.Get("Content-Encoding"), sent.Get("Location"); ce != "" || loc != "/orders/1" {
			t.Fatalf("response %d: Content-Encoding %q, Location %q; want none and /orders/1", i, ce, loc)
		}
	}
}

// heldWriter is the writer of a middleware before ginidem that holds the
// response and sends it after the chain, as gin-contrib/timeout's does: its
// WriteHeaderNow only notes the status, so Gin's writer is not Written yet.
type heldWriter struct {
	gin.ResponseWriter
}

func (w *heldWriter) WriteHeaderNow() {}

// c.AbortWithError(400, err) writes its status (WriteHeaderNow) beside the
// error: it is the handlers' response, stored, whether or not a writer
// below has sent it yet.
func TestGinAbortWithErrorHeldBelowStored(t *testing.T) {
	t.Parallel()
	wantStoredBelow(t, func(w gin.ResponseWriter) gin.ResponseWriter { return &heldWriter{ResponseWriter: w} },
		func(c *gin.Context) {
			c.AbortWithError(http.StatusBadRequest, errors.New("no such item")) //nolint:errcheck // the status is the response
		}, http.StatusBadRequest, "")
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

// Once a write to the client fails, the handlers' writes report success
// while the body is still stored whole, and fail again past
// MaxStoredBodyBytes, so that a handler that writes until its client goes
// away still ends (as core's TestClientGoneWritesEnd).
func TestGinClientGoneWritesEnd(t *testing.T) {
	t.Parallel()
	var accepted int
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{MaxStoredBodyBytes: 10})))
	r.POST("/orders", func(c *gin.Context) {
		for accepted < 100 {
			if _, err := c.Writer.Write([]byte("abcd")); err != nil {
				return
			}
			accepted++
		}
	})
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(order))
	req.Header.Set("Idempotency-Key", "gone")
	r.ServeHTTP(&goneWriter{ResponseRecorder: httptest.NewRecorder()}, req)
	if accepted != 2 { // 4 sent, 4 more stored; the third goes past 10 bytes
		t.Errorf("%d writes reported done, want 2: the third passes MaxStoredBodyBytes after the client went away", accepted)
	}
}

// A reverse proxy whose client goes away mid-response, run as
// docs/design.md advises (a context that the client's going does not
// cancel, with a deadline of its own): the upstream's whole response is
// stored and replayed to the retry, and the upstream is called once. With
// context.WithoutCancel alone, httputil.ReverseProxy watches Gin's
// c.Writer.CloseNotify instead (a context without a Done channel), cancels
// the upstream call, and panics: the key is released, and the retry calls
// the upstream again.
func TestGinReverseProxyClientGone(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	gone := make(chan struct{}) // the first client went away
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(strings.Repeat("a", 64<<10))) //nolint:errcheck
		w.(http.Flusher).Flush()
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
		}
		w.Write([]byte(strings.Repeat("b", 64<<10))) //nolint:errcheck
	}))
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var first atomic.Bool
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		if first.CompareAndSwap(false, true) {
			go func() { <-c.Request.Context().Done(); close(gone) }()
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 30*time.Second)
		defer cancel()
		proxy.ServeHTTP(c.Writer, c.Request.WithContext(ctx))
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	send := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(order))
		req.Header.Set("Idempotency-Key", "proxy-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := send()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client goes away mid-response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp := send()
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusConflict && time.Now().Before(deadline) {
			continue
		}
		if err != nil || resp.StatusCode != http.StatusCreated || len(body) != 128<<10 || resp.Header.Get(core.HeaderReplay) != "true" {
			t.Fatalf("retry: %d, %d bytes, replay %q, %v; want the upstream's 201 of 128 KiB replayed",
				resp.StatusCode, len(body), resp.Header.Get(core.HeaderReplay), err)
		}
		break
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the upstream was called %d times, want once", n)
	}
}
