package ginidem_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/ginidem"
)

// dispatcher re-dispatches the request to path (an internal redirect).
func dispatcher(r *gin.Engine, path string) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Request.URL.Path = path
		r.HandleContext(c)
	}
}

// A Buffered (transactional) flight dispatched again: Gin's
// handleHTTPRequest sends c.writermem's status after the inner chain, before
// the first pass commits. A failed commit must answer the 503 alone.
func TestGinDispatchBufferedFailedCommit(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{Store: store})))
	r.POST("/orders", func(c *gin.Context) {
		c.Header("X-Order-Id", "42")
		c.String(http.StatusCreated, "created")
	})
	r.POST("/legacy/orders", dispatcher(r, "/orders"))
	rec := post(r, "/legacy/orders", "dispatch-buffered-fail")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("X-Order-Id") != "" ||
		!strings.Contains(rec.Body.String(), "store-unavailable") {
		t.Fatalf("failed commit after a dispatch: got %d %v %q, want the 503 problem alone", rec.Code, rec.Header(), rec.Body)
	}
}

// A Buffered flight: nothing is sent before the commit.
func TestGinDispatchBufferedHeldBack(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	var sentBeforeCommit atomic.Bool
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{Store: store})))
	r.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "created") })
	r.POST("/legacy/orders", func(c *gin.Context) {
		c.Request.URL.Path = "/orders"
		r.HandleContext(c)
		// Still inside the first pass: the transaction is not committed.
		sentBeforeCommit.Store(c.Writer.Written() && c.Writer.Status() == http.StatusCreated && underlyingWritten(c))
	})
	rec := post(r, "/legacy/orders", "dispatch-buffered-held")
	if rec.Code != http.StatusCreated || rec.Body.String() != "created" {
		t.Fatalf("got %d %q", rec.Code, rec.Body)
	}
	if sentBeforeCommit.Load() {
		t.Fatal("the status went to the client before the transaction committed")
	}
}

// underlyingWritten reports whether Gin's own writer has sent the headers.
func underlyingWritten(c *gin.Context) bool {
	type unwrapper interface{ Unwrap() http.ResponseWriter }
	w, ok := c.Writer.(unwrapper)
	if !ok {
		return false
	}
	gw, ok := w.Unwrap().(gin.ResponseWriter)
	return ok && gw.Written()
}

// An in-process sub-request served with the handler's context as its
// parent (a batch endpoint) is a new request with its own key and writer:
// it must neither pass through unprotected nor write into the parent's
// response.
func TestGinSubrequestWithParentContext(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var runs atomic.Int64
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", created(&runs))
	r.POST("/batch", func(c *gin.Context) {
		for range 2 { // the same sub-request twice: the second is a replay
			sub := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(order)).WithContext(c.Request.Context())
			sub.Header.Set("Idempotency-Key", "sub-key")
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, sub)
		}
		c.String(http.StatusOK, "batch done")
	})
	wantResponse(t, post(r, "/batch", "dispatch-batch"), http.StatusOK, "batch done", false)
	wantRuns(t, "the sub-request's handler", &runs, 1)
}

// A panic in the second pass under gin.Default (Recovery under r.Use,
// so it recovers in the second pass too) on a Buffered flight: the
// handler's headers must not reach the client with Recovery's 500.
func TestGinDispatchPanicBufferedHeaders(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }),
		ginidem.New(newEngine(t, core.Config{Store: store})))
	var runs atomic.Int64
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		c.Header("X-Order-Id", "42")
		panic("boom")
	})
	r.POST("/legacy/orders", dispatcher(r, "/orders"))
	for range 2 {
		rec := post(r, "/legacy/orders", "dispatch-panic")
		if rec.Code != http.StatusInternalServerError || rec.Header().Get("X-Order-Id") != "" {
			t.Fatalf("got %d %v, want 500 without the panicked handler's headers", rec.Code, rec.Header())
		}
	}
	wantRuns(t, "the handler", &runs, 2)
}

// A goroutine of the handler serves a sub-request with the handler's
// context, as the pass ends: the mark is read there while the pass voids it.
func TestGinSubrequestAfterPass(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var runs atomic.Int64
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", created(&runs))
	var wg sync.WaitGroup
	r.POST("/async", func(c *gin.Context) {
		ctx := c.Request.Context()
		wg.Go(func() { // unordered with the pass's end: go test -race sees a racy mark
			sub := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(order)).WithContext(ctx)
			sub.Header.Set("Idempotency-Key", "async-sub")
			r.ServeHTTP(httptest.NewRecorder(), sub)
		})
		c.Status(http.StatusAccepted)
	})
	wantResponse(t, post(r, "/async", "dispatch-async"), http.StatusAccepted, "", false)
	wg.Wait()
	wantRuns(t, "the sub-request's handler", &runs, 1)
}

// gzipMW mirrors gin-contrib/gzip: it wraps c.Writer in a gzip writer and
// closes it after the chain.
func gzipMW(c *gin.Context) {
	gz := gzip.NewWriter(c.Writer)
	c.Header("Content-Encoding", "gzip")
	c.Writer = &gzWriter{ResponseWriter: c.Writer, gz: gz}
	defer func() {
		if c.Writer.Size() < 0 {
			gz.Reset(io.Discard)
		}
		gz.Close()
	}()
	c.Next()
}

type gzWriter struct {
	gin.ResponseWriter
	gz *gzip.Writer
}

// WriteHeader drops Content-Length, which is the uncompressed body's.
func (w *gzWriter) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *gzWriter) Write(p []byte) (int, error)       { return w.gz.Write(p) }
func (w *gzWriter) WriteString(s string) (int, error) { return w.gz.Write([]byte(s)) }

// gzip before ginidem, as the package doc asks, and a dispatch: the client
// gets a gzip stream that decodes, as without a key, and the replay too.
func TestGinDispatchGzipBefore(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.Use(gzipMW)
	g := r.Group("/", ginidem.New(newEngine(t, core.Config{})))
	g.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "created") })
	g.POST("/legacy/orders", dispatcher(r, "/orders"))
	for _, key := range []string{"", "dispatch-gzip", "dispatch-gzip"} { // without a key (Gin alone), then a first request and its replay
		rec := post(r, "/legacy/orders", key)
		zr, err := gzip.NewReader(bytes.NewReader(rec.Body.Bytes()))
		var got []byte
		if err == nil {
			got, err = io.ReadAll(zr)
		}
		if err != nil || string(got) != "created" {
			t.Errorf("key %q: %d, decoded %q, %v; want created", key, rec.Code, got, err)
		}
	}
}

// The Engine's middleware twice in one chain (under r.Use and on the
// route, with a gzip between or not): the second lets the request through
// to the first's capture.
func TestGinSameEngineTwice(t *testing.T) {
	t.Parallel()
	ownHeader := func(c *gin.Context) { // a writer with headers of its own, as gin-contrib/timeout's
		c.Writer = &ownHeaderWriter{ResponseWriter: c.Writer, h: http.Header{}}
		c.Next()
	}
	for name, between := range map[string][]gin.HandlerFunc{"adjacent": nil, "gzip between": {gzipMW}, "own headers between": {ownHeader}} {
		eng := newEngine(t, core.Config{})
		r := gin.New()
		r.Use(append([]gin.HandlerFunc{ginidem.New(eng)}, between...)...)
		var runs atomic.Int64
		r.POST("/orders", ginidem.New(eng), func(c *gin.Context) {
			runs.Add(1)
			c.String(http.StatusCreated, "created")
		})
		for range 2 {
			if rec := post(r, "/orders", "twice"); rec.Code != http.StatusCreated {
				t.Fatalf("%s: %d %q, want 201", name, rec.Code, rec.Body)
			}
		}
		wantRuns(t, name, &runs, 1)
	}
}

// ownHeaderWriter keeps a header map of its own.
type ownHeaderWriter struct {
	gin.ResponseWriter
	h http.Header
}

func (w *ownHeaderWriter) Header() http.Header { return w.h }

// A status the dispatching handler set is dropped by Gin's reset: the
// target's c.Error with nothing written is rendered by an error middleware,
// with a key as without one, and nothing is stored.
func TestGinDispatchStatusNotCarried(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var runs atomic.Int64
	r.Use(func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 && !c.Writer.Written() {
			c.String(http.StatusTeapot, "rendered")
		}
	}, ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		c.Error(errors.New("later")) //nolint:errcheck // for the error middleware
	})
	r.POST("/legacy/orders", func(c *gin.Context) {
		c.Status(http.StatusAccepted)
		c.Request.URL.Path = "/orders"
		r.HandleContext(c)
	})
	for _, key := range []string{"", "status-not-carried", "status-not-carried"} {
		wantResponse(t, post(r, "/legacy/orders", key), http.StatusTeapot, "rendered", false)
	}
	wantRuns(t, "the handler", &runs, 3)
}

// A transactional flight dispatched to a route without the middleware: the
// response goes past the capture, before the commit; a failed commit
// cannot take it back, and nothing is written after it.
func TestGinDispatchBufferedPastCapture(t *testing.T) {
	t.Parallel()
	store := idemtest.NewTxStore(t).(*idemtest.TxStore)
	store.FailCommits(true)
	r := gin.New()
	r.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "created") })
	r.POST("/legacy/orders", ginidem.New(newEngine(t, core.Config{Store: store})), dispatcher(r, "/orders"))
	wantResponse(t, post(r, "/legacy/orders", "past-capture"), http.StatusCreated, "created", false)
}

// The Engine's middleware twice in the chain of the route dispatched to
// (r.Use and the route): the second lets the request through to the
// capture, which the dispatch pointed at its writers (it wrote into itself
// until the stack overflowed).
func TestGinDispatchSameEngineTwice(t *testing.T) {
	t.Parallel()
	ownHeader := func(c *gin.Context) {
		c.Writer = &ownHeaderWriter{ResponseWriter: c.Writer, h: http.Header{}}
		c.Next()
	}
	for name, between := range map[string][]gin.HandlerFunc{"adjacent": nil, "gzip between": {gzipMW}, "own headers between": {ownHeader}} {
		for _, tx := range []bool{false, true} {
			cfg := core.Config{}
			if tx {
				cfg.Store = idemtest.NewTxStore(t)
			}
			eng := newEngine(t, cfg)
			r := gin.New()
			r.Use(append([]gin.HandlerFunc{ginidem.New(eng)}, between...)...)
			var runs atomic.Int64
			r.POST("/orders", ginidem.New(eng), func(c *gin.Context) {
				runs.Add(1)
				c.String(http.StatusCreated, "created")
			})
			r.POST("/legacy/orders", dispatcher(r, "/orders"))
			for range 2 {
				if rec := post(r, "/legacy/orders", "dispatch-twice"); rec.Code != http.StatusCreated {
					t.Fatalf("%s, tx %v: %d %q, want 201", name, tx, rec.Code, rec.Body)
				}
			}
			wantRuns(t, name, &runs, 1)
		}
	}
}

// Dispatched again to a URL no route matches: the router's 404, not
// stored, so the key stays free for the right URL.
func TestGinDispatchNoRoute(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	var runs atomic.Int64
	r.POST("/orders", created(&runs))
	r.POST("/legacy/orders", func(c *gin.Context) {
		c.Request.URL.Path = "/ordrs" // a typo in the rewrite
		if c.Request.Header.Get("X-Fixed") != "" {
			c.Request.URL.Path = "/orders"
		}
		r.HandleContext(c)
	})
	if rec := post(r, "/legacy/orders", "no-route"); rec.Code != http.StatusNotFound {
		t.Fatalf("got %d %q, want the router's 404", rec.Code, rec.Body)
	}
	wantResponse(t, post(r, "/legacy/orders", "no-route", "X-Fixed", "1"), http.StatusCreated, order, false)
	wantRuns(t, "the handler", &runs, 1)
}
