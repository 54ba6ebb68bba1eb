package core

import (
	"context"
	"net/http"
)

// Middleware protects next with e, for net/http routers: the Go 1.22+
// http.ServeMux, chi, or any router that takes func(http.Handler) http.Handler.
//
// The route template (Event.Route, and the endpoint of Config.ScopeRoute) is
// r.Pattern, which the ServeMux sets when it routes a request: wrap the
// handlers inside the mux, mux.Handle("POST /orders/{id}", eng.Middleware(h)),
// not the mux itself. Without a pattern (the middleware outside the router)
// Event.Route is "unmatched" and ScopeRoute joins the URL path. A pattern's
// host joins the fingerprint (Request.Host).
//
// Wrap a handler once: a request through the middleware of one Engine
// twice gets 500 middleware-twice from the second pass, and its handler
// does not run.
//
// A handler that panics or hijacks the connection has its lock released
// without storing (the panic goes on up the stack). What the handlers
// inside the middleware answer is stored, a handler that writes nothing
// included (net/http's 200): one that gives up at its deadline writes its
// error status. A timeout that answers for the handler goes inside the
// middleware if it waits for the handler to return (chi's
// middleware.Timeout: its 504 is then not stored), before it if it answers
// while the handler runs on (http.TimeoutHandler: inside, its 503 would
// release the key while the handler still runs, and a retry would run it
// again beside it). A flushed response is stored when the handler
// returns, as any other.
// With a TxStore (Flight.Buffered) nothing reaches the client before the
// handler's writes commit with the stored response; a failed commit
// answers 503 instead.
//
// The handler finds the key it runs under with InfoFromContext.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return e.middleware(next, nil)
}

// MiddlewareWithErrorHandler is Middleware with the Engine's refusals (400,
// 409, 413, 422, 429, 500, 503) rendered by onError instead of as problem+json,
// as the framework adapters' ErrorHandler: the refusal's headers
// (Retry-After, Link) are set on w before onError is called. Replays are
// written as stored.
func (e *Engine) MiddlewareWithErrorHandler(onError func(w http.ResponseWriter, r *http.Request, p *Problem)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return e.middleware(next, onError) }
}

func (e *Engine) middleware(next http.Handler, onError func(http.ResponseWriter, *http.Request, *Problem)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.Keyed(r.Method, r.Header) {
			next.ServeHTTP(w, r) // untouched, at no cost
			return
		}
		var host, route string
		if r.Pattern != "" {
			host, route = patternRoute(r.Pattern)
		}
		req := NewRequest(r, route, w)
		req.Host = host
		var refuse func(*Response)
		if onError != nil {
			refuse = func(resp *Response) {
				resp.SetHeaders(w.Header())
				onError(w, r, resp.Problem)
			}
		}
		f, resp := e.Begin(&req)
		switch {
		case resp != nil && resp.Problem != nil && refuse != nil:
			refuse(resp)
			return
		case resp != nil:
			resp.Write(w)
			return
		case f == nil:
			next.ServeHTTP(w, r)
			return
		}
		defer f.Abort() // after a panic; a no-op once Finish ran
		next.ServeHTTP(f.ResponseWriter(w), f.Request(r))
		f.Finish(refuse)
	})
}

// patternRoute splits a ServeMux pattern into its host and its route
// ("POST example.com/orders/{id}" → "example.com", "/orders/{id}"): the
// method is fingerprinted on its own.
func patternRoute(p string) (host, route string) {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case ' ', '\t':
			p = p[i+1:]
			i = -1
		case '/':
			return p[:i], p[i:]
		}
	}
	return "", p
}

// Info describes the key a handler runs under.
type Info struct {
	Key         string   // the client's key, unquoted (as Event.Key)
	Scope       string   // Config.Scope's answer for the request ("" without a Scope)
	Fingerprint [32]byte // SHA-256 of the request, as a retry must repeat it
}

type leaseKey struct{}

// InfoFromContext returns the key that the handler of ctx's request runs
// under; false if it runs without one (no key, method not covered, or the
// store failed and it runs unprotected). A handler that runs at all was not
// replayed: a replay never reaches it.
func InfoFromContext(ctx context.Context) (Info, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	if !ok || !l.Protected() {
		return Info{}, false
	}
	return Info{Key: l.ev.Key, Scope: l.ev.Scope, Fingerprint: l.fingerprint}, true
}
