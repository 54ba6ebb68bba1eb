// Package ginidem is idem's Gin middleware: a request with an
// Idempotency-Key runs its handlers once and its response is stored; a
// retry with the same key gets that response back with
// X-Idempotency-Replay: true, and the handlers do not run.
//
// Build one core.Engine (every setting is a core.Config field) and use
// ginidem.New(eng) after gin.Recovery(), the authentication middleware and
// response-shaping middleware such as gzip, before the handlers it
// protects: on a group or a route (under r.Use, a login route's 401 would
// be stored under the client's key and replayed). The route template is
// c.FullPath(); a request that matched no route passes through untouched.
// core.Request.Context reads c.Keys (c.Set) before the request's context.
// It must run after anything that rewrites the request's URL, and once per
// chain: a request that meets it twice, under r.Use and on its route, or
// dispatched again by a handler (r.HandleContext, or r.ServeHTTP with the
// same request) through r.Use, gets 500 middleware-twice from the second,
// and the handler does not run. With such a handler, put it only on the
// routes dispatched to: on the dispatching route, HandleContext gives
// c.Writer back to Gin, and the response would bypass its capture.
//
// A replay or one of idem's refusals (RFC 9457 problem details, or
// WithErrorHandler's rendering) is written and the chain aborted. Otherwise
// the response is stored per core.Config.Storable, unless a handler
// panicked, the connection was hijacked, or the handlers left a c.Error
// with nothing written: then the lock is released and a retry runs again.
// In pgstore's transactional mode the response is held until the commit.
// Operations lists the covered routes for package swagger.
//
// See Example; the reasons and edge cases are in [docs/design.md], "ginidem".
//
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package ginidem
