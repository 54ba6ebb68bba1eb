package echov5idem_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/echov5idem"
)

// The benchmarks drive Echo in-process (ServeHTTP, a reusable request and
// a discarding ResponseWriter), so they measure the middleware, not the
// network: the bare handler, and the middleware on the memory store for a
// request without a key, the replay of a stored key and a first run.

var benchResponse = []byte(`{"id":"ord_1","item":"book","qty":2}`)

func benchEcho(mw ...echo.MiddlewareFunc) *echo.Echo {
	e := newEcho()
	e.Use(mw...)
	e.POST("/orders/:id", func(c *echo.Context) error {
		io.Copy(io.Discard, c.Request().Body) //nolint:errcheck
		c.Response().Header().Set("Location", "/orders/ord_1")
		return c.JSONBlob(http.StatusCreated, benchResponse)
	})
	return e
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
func run(b *testing.B, e *echo.Echo, setKey func(h http.Header, i int)) {
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
		e.ServeHTTP(w, req)
		if w.status != http.StatusCreated {
			b.Fatalf("status %d", w.status)
		}
	}
}

func BenchmarkEcho(b *testing.B) {
	b.Run("bare", func(b *testing.B) { run(b, benchEcho(), nil) })
	b.Run("no-key", func(b *testing.B) { run(b, benchEcho(echov5idem.New(idemtest.BenchEngine(b))), nil) })
	b.Run("replay", func(b *testing.B) {
		key := []string{"bench-replay"}
		run(b, benchEcho(echov5idem.New(idemtest.BenchEngine(b))), func(h http.Header, _ int) { h["Idempotency-Key"] = key })
	})
	b.Run("first-run", func(b *testing.B) {
		key := []string{""}
		buf := make([]byte, 0, 32)
		run(b, benchEcho(echov5idem.New(idemtest.BenchEngine(b))), func(h http.Header, i int) {
			key[0] = string(strconv.AppendInt(append(buf[:0], "bench-"...), int64(i), 10))
			h["Idempotency-Key"] = key
		})
	})
}
