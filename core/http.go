package core

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
)

// Middleware protects next with e, for net/http routers: the Go 1.22+
// http.ServeMux, chi, or any router that takes func(http.Handler) http.Handler.
//
// The route template (Event.Route, and the endpoint of Config.ScopeRoute) is
// r.Pattern, which the ServeMux sets when it routes a request: wrap the
// handlers inside the mux, mux.Handle("POST /orders/{id}", eng.Middleware(h)),
// not the mux itself. Without a pattern (the middleware outside the router)
// the URL path stands in for the route.
//
// A handler that panics or hijacks the connection has its lock released
// without storing; the panic goes on up the stack to whatever recovers it.
// A flushed response is stored when the handler returns, as any other.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.Keyed(r.Method, r.Header) {
			next.ServeHTTP(w, r) // untouched, at no cost
			return
		}
		route := r.Pattern
		if route != "" {
			route = patternRoute(route)
		}
		f, resp := e.Begin(&Request{
			Context:        r.Context(),
			Method:         r.Method,
			Route:          route,
			Path:           r.URL.EscapedPath(),
			Query:          r.URL.RawQuery,
			Header:         r.Header,
			Body:           r.Body,
			ContentLength:  r.ContentLength,
			ResponseHeader: w.Header(),
		})
		switch {
		case resp != nil:
			resp.Write(w)
			return
		case f == nil:
			next.ServeHTTP(w, r)
			return
		}
		defer f.Abort() // after a panic; a no-op once Finish ran
		body := &BodyReader{}
		body.Reset(f.Body())
		r.Body = body
		cw := &CaptureWriter{ResponseWriter: w, Flight: f}
		next.ServeHTTP(cw, r)
		cw.Finish()
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

// BodyReader gives the handler the request body that Engine.Begin read
// (Flight.Body): an io.ReadCloser over the bytes, with Reset to reuse it.
type BodyReader struct{ bytes.Reader }

// Close does nothing: the bytes are in memory.
func (*BodyReader) Close() error { return nil }

// CaptureWriter is the http.ResponseWriter an adapter hands the handler
// while a Flight is open: it passes the response through to the client and
// copies its body into the Flight, notes the status, and notes a hijacked
// connection. The net/http middleware and the adapters of net/http-based
// frameworks share it.
//
// A flush does not stop the capture: the response is stored when the
// handler returns, like any other (a body over Config.MaxStoredBodyBytes
// as its size and hash). A handler that flushed has done its work, whether
// it streams events or is an httputil.ReverseProxy, which flushes every
// response without a Content-Length: a retry must get that response, not
// run the handler again.
type CaptureWriter struct {
	http.ResponseWriter
	Flight *Flight

	status   int
	header   http.Header // as sent: a copy taken with the status
	hijacked bool
}

// WriteHeader notes the first final status and the headers sent with it,
// and passes it on.
func (w *CaptureWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write copies p into the Flight and passes it on.
func (w *CaptureWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.Flight.Write(p) //nolint:errcheck // never fails
	return w.ResponseWriter.Write(p)
}

// FlushError flushes: the status and headers, if not sent yet, and the
// body so far. http.ResponseController and Echo's Response.Flush call it.
func (w *CaptureWriter) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK) // as net/http sends it on a flush
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for code that asserts http.Flusher.
func (w *CaptureWriter) Flush() { w.FlushError() } //nolint:errcheck // as http.Flusher, no error to report

// Hijack hijacks, and notes a hijack that succeeded: the response is then
// not stored.
func (w *CaptureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *CaptureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Finish ends the Flight after the handler: Abort if the connection was
// hijacked, else Complete with the status and the headers as
// they were sent (headers changed after WriteHeader never reach the client,
// so they are not stored), or, if the handler wrote nothing, 200 and the
// headers as they are now, as net/http then sends them.
func (w *CaptureWriter) Finish() {
	if w.hijacked {
		w.Flight.Abort()
		return
	}
	if w.status == 0 {
		w.Flight.Complete(http.StatusOK, w.ResponseWriter.Header())
		return
	}
	w.Flight.Complete(w.status, w.header)
}
