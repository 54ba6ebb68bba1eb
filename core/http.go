package core

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
)

// Middleware protects next with e, for net/http routers: the Go 1.22+
// http.ServeMux, chi, or any router that takes func(http.Handler) http.Handler.
//
// The route template that joins the fingerprint is r.Pattern, which the
// ServeMux sets when it routes a request: wrap the handlers inside the mux,
// mux.Handle("POST /orders/{id}", eng.Middleware(h)), not the mux itself.
// Without a pattern (the middleware outside the router) the route is the URL
// path, so /orders/1 and /orders/2 count as different requests.
//
// A handler that panics, flushes (streams) or hijacks the connection has
// its lock released without storing; the panic goes on up the stack to
// whatever recovers it.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Pattern
		if route != "" {
			route = patternRoute(route)
		}
		f, resp := e.Begin(&Request{
			Context:       r.Context(),
			Method:        r.Method,
			Route:         route,
			Path:          r.URL.Path,
			Header:        r.Header,
			Body:          r.Body,
			ContentLength: r.ContentLength,
		})
		switch {
		case resp != nil:
			resp.Write(w)
			return
		case f == nil:
			next.ServeHTTP(w, r)
			return
		}
		defer f.Abort()
		r.Body = io.NopCloser(bytes.NewReader(f.Body()))
		cw := &captureWriter{ResponseWriter: w, f: f}
		next.ServeHTTP(cw, r)
		if cw.streamed {
			return // the deferred Abort releases the lock
		}
		if cw.status == 0 {
			cw.status = http.StatusOK
		}
		f.Complete(cw.status, w.Header())
	})
}

// patternRoute drops the method and host of a ServeMux pattern
// ("POST example.com/orders/{id}" → "/orders/{id}"): the method is
// fingerprinted on its own.
func patternRoute(p string) string {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case ' ', '\t':
			p = p[i+1:]
			i = -1
		case '/':
			return p[i:]
		}
	}
	return p
}

// captureWriter passes the response through to the client and copies it
// into the Flight.
type captureWriter struct {
	http.ResponseWriter
	f        *Flight
	status   int
	streamed bool
}

func (w *captureWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *captureWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.f.Write(p) //nolint:errcheck // never fails
	return w.ResponseWriter.Write(p)
}

// Flush marks the response as streamed: it is not stored.
func (w *captureWriter) Flush() {
	w.streamed = true
	http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // as http.Flusher, no error to report
}

// Hijack marks the response as hijacked: it is not stored.
func (w *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.streamed = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
