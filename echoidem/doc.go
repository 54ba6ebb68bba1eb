// Package echoidem is idem's Echo v4 middleware: a request with an
// Idempotency-Key runs its handler once and its response is stored; a retry
// with the same key gets that response back with X-Idempotency-Replay:
// true, and the handler does not run.
//
// Build one core.Engine (every setting is a core.Config field) and register
// echoidem.New(eng), or NewWithConfig for a Skipper or an ErrorHandler, with
// e.Use, on a group or on a route (not e.Pre; once: a request through it
// twice gets 500 middleware-twice), after middleware.Recover(),
// authentication and response-shaping middleware such as Gzip. The route
// template is c.Path(); a request that matched no route passes through
// untouched. core.Request.Context's Value also reads what c.Set stored.
//
// A handler's error is rendered by the app's HTTPErrorHandler inside the
// middleware, which then returns nil, so what the client gets is what is
// stored: a 400 is stored and replayed, a 500 is not. The response is not
// stored after a panic, a hijack or a returned echo.ErrNotFound or
// echo.ErrMethodNotAllowed: the lock is released and a retry runs again.
// idem's refusals are RFC 9457 problem details (Config.ErrorHandler renders
// them the app's way); a body over middleware.BodyLimit's limit gets
// Echo's own 413, reported to the Observer as core.OutcomeTooLarge.
// Operations lists the covered routes for package swagger.
//
// See Example; the reasons and edge cases are in [docs/design.md], "echoidem".
//
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package echoidem
