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
// It must run after anything that rewrites the request's URL. A request
// dispatched again to another route (r.HandleContext) while it holds the
// key, or meeting it twice in one chain, passes through, and what the chain
// answers is stored; a dispatch that no route matches is not stored. A
// response written past its capture is replayed with its status and
// headers but an empty body, and in pgstore's transactional mode it is sent
// before the commit: one that a middleware before it writes when
// HandleContext runs that middleware again, one from a route without it or
// from the same route dispatched to, or from a second dispatch. A
// middleware before it that dispatches after the chain returns (an error
// page) sends a new request under the same key: 422.
//
// A replay or one of idem's refusals (RFC 9457 problem details, or
// WithErrorHandler's rendering) is written and the chain aborted. Otherwise
// the response is stored per core.Config.Storable, unless a handler
// panicked, the connection was hijacked, or the handlers left a c.Error
// with nothing written: then the lock is released and a retry runs again.
// In pgstore's transactional mode the response is held until the commit.
// Operations lists the covered routes for package swagger.
//
// See Example; the reasons and edge cases are in docs/design.md, "ginidem".
package ginidem
