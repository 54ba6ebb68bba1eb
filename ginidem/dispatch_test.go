package ginidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// R1. A Buffered (transactional) flight dispatched again: Gin's
// handleHTTPRequest sends c.writermem's status after the inner chain, before
// the first pass commits. A failed commit must answer the 503 alone.
func TestReviewDispatchBufferedFailedCommit(t *testing.T) {
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
	rec := post(r, "/legacy/orders", "review-buffered-fail")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("X-Order-Id") != "" ||
		!strings.Contains(rec.Body.String(), "store-unavailable") {
		t.Fatalf("failed commit after a dispatch: got %d %v %q, want the 503 problem alone", rec.Code, rec.Header(), rec.Body)
	}
}

// R1b. A Buffered flight: nothing is sent before the commit.
func TestReviewDispatchBufferedHeldBack(t *testing.T) {
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
	rec := post(r, "/legacy/orders", "review-buffered-held")
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

// R2. Two Engines (the test the commit adds, plus a retry): the outer
// Engine's replay must carry the body the client got.
func TestReviewDispatchTwoEnginesReplay(t *testing.T) {
	t.Parallel()
	r := gin.New()
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	inner := newEngine(t, core.Config{Scope: func(*core.Request) string { return "inner" }})
	r.POST("/orders", ginidem.New(inner), func(c *gin.Context) { c.String(http.StatusCreated, "created") })
	r.POST("/legacy/orders", dispatcher(r, "/orders"))
	wantResponse(t, post(r, "/legacy/orders", "review-two-engines"), http.StatusCreated, "created", false)
	wantResponse(t, post(r, "/legacy/orders", "review-two-engines"), http.StatusCreated, "created", true)
}

// R4. An in-process sub-request served with the handler's context as its
// parent (a batch endpoint) is a new request with its own key and writer:
// it must neither pass through unprotected nor write into the parent's
// response.
func TestReviewSubrequestWithParentContext(t *testing.T) {
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
	wantResponse(t, post(r, "/batch", "review-batch"), http.StatusOK, "batch done", false)
	wantRuns(t, "the sub-request's handler", &runs, 1)
}

// R6. A panic in the second pass under gin.Default (Recovery under r.Use,
// so it recovers in the second pass too) on a Buffered flight: the
// handler's headers must not reach the client with Recovery's 500.
func TestReviewDispatchPanicBufferedHeaders(t *testing.T) {
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
		rec := post(r, "/legacy/orders", "review-panic")
		if rec.Code != http.StatusInternalServerError || rec.Header().Get("X-Order-Id") != "" {
			t.Fatalf("got %d %v, want 500 without the panicked handler's headers", rec.Code, rec.Header())
		}
	}
	wantRuns(t, "the handler", &runs, 2)
}

// R4b. A goroutine of the handler serves a sub-request with the handler's
// context after the pass ended: the mark is read there while the pass voids
// it (go test -race).
func TestReviewSubrequestAfterPass(t *testing.T) {
	t.Parallel()
	r := gin.New()
	var runs atomic.Int64
	r.Use(ginidem.New(newEngine(t, core.Config{})))
	r.POST("/orders", created(&runs))
	var wg sync.WaitGroup
	r.POST("/async", func(c *gin.Context) {
		ctx := c.Request.Context()
		wg.Go(func() {
			time.Sleep(20 * time.Millisecond) // after the pass, with no synchronization
			sub := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(order)).WithContext(ctx)
			sub.Header.Set("Idempotency-Key", "async-sub")
			r.ServeHTTP(httptest.NewRecorder(), sub)
		})
		c.Status(http.StatusAccepted)
	})
	wantResponse(t, post(r, "/async", "review-async"), http.StatusAccepted, "", false)
	wg.Wait()
	wantRuns(t, "the sub-request's handler", &runs, 1)
}
