package ginidem_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/ginidem"
)

// BenchmarkGin drives Gin in-process (ServeHTTP, a reusable request and a
// discarding ResponseWriter), so it measures the middleware, not the
// network. "bare" is the handler without idem, the baseline of the others
// (make bench prints each as a ratio to it); the others use the memory
// store.
func BenchmarkGin(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		run(b, benchGin(), nil)
	})
	b.Run("no-key", func(b *testing.B) { // the middleware lets a request without a key pass
		run(b, benchGin(ginidem.New(idemtest.BenchEngine(b))), nil)
	})
	b.Run("replay", func(b *testing.B) { // one stored key, replayed
		key := []string{"bench-replay"}
		run(b, benchGin(ginidem.New(idemtest.BenchEngine(b))), func(h http.Header, _ int) { h["Idempotency-Key"] = key })
	})
	b.Run("first-run", func(b *testing.B) { // a fresh key every time: lock, run, capture, store
		key := []string{""}
		buf := make([]byte, 0, 32)
		run(b, benchGin(ginidem.New(idemtest.BenchEngine(b))), func(h http.Header, i int) {
			key[0] = string(strconv.AppendInt(append(buf[:0], "bench-"...), int64(i), 10))
			h["Idempotency-Key"] = key
		})
	})
}

var benchResponse = []byte(`{"id":"ord_1","item":"book","qty":2}`)

func benchGin(mw ...gin.HandlerFunc) *gin.Engine {
	r := gin.New()
	r.Use(mw...)
	r.POST("/orders/:id", func(c *gin.Context) {
		io.Copy(io.Discard, c.Request.Body) //nolint:errcheck
		c.Header("Location", "/orders/ord_1")
		c.Data(http.StatusCreated, "application/json", benchResponse)
	})
	return r
}

// benchBody is a request body that rewinds without allocating.
type benchBody struct{ bytes.Reader }

func (*benchBody) Close() error { return nil }

type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

// run serves b.N requests; setKey, if not nil, sets the key of request i.
func run(b *testing.B, h http.Handler, setKey func(h http.Header, i int)) {
	payload := []byte(`{"item":"book","qty":2}`)
	body := &benchBody{}
	req, _ := http.NewRequest(http.MethodPost, "/orders/42", body)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(payload))
	w := &discardWriter{h: make(http.Header)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body.Reset(payload)
		req.Body = body
		clear(w.h)
		if setKey != nil {
			setKey(req.Header, i)
		}
		h.ServeHTTP(w, req)
		if w.status != http.StatusCreated {
			b.Fatalf("status %d", w.status)
		}
	}
}
