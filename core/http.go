package core

import "net/http"

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
