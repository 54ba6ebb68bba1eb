// Package fiberidem is idem's Fiber v2 middleware: a request with an
// Idempotency-Key runs its handler once and its response is stored; a retry
// with the same key gets that response back with X-Idempotency-Replay:
// true, and the handler does not run.
//
// Build one core.Engine (every setting is a core.Config field) and mount
// fiberidem.New(fiberidem.Config{Engine: eng}) on the routes it protects
// (app.Post("/orders", idem, h)), where c.Route().Path is the route
// template, after recover.New(), authentication and response-shaping
// middleware such as compress. Under app.Use the template is unknown, and
// the router's 404 or 405 is sent but not stored. core.Request.Context's
// Value reads c.Locals first. It must run after anything that rewrites the
// path (the rewrite middleware, c.Path): it fingerprints the path it sees.
// A request routed again (c.RestartRouting) passes through it the second
// time: the first pass holds the key and stores the answer.
//
// A handler's error is rendered by the app's ErrorHandler inside the
// middleware, which then returns nil, so what the client gets is what is
// stored: a 400 is stored and replayed, a 500 is not. After a panic the lock
// is released and nothing is stored; a body stream or a hijacked connection
// is passed through and not stored. idem's refusals are RFC 9457 problem
// details (Config.ErrorHandler renders them the app's way). The body is
// fingerprinted as sent, before Fiber's decompression. A body over
// fiber.Config.BodyLimit (4 MiB by default) is refused by fasthttp before
// any middleware runs, with the ErrorHandler's 413, not idem's
// body-too-large problem (core.Config.MaxBodyBytes, 1 MiB, applies below
// it; with StreamRequestBody, to any size). Likewise request headers over
// fiber.Config.ReadBufferSize (4 KiB) get fasthttp's 431, a key of that
// length included, where other frameworks give idem's 400 invalid-key.
// fasthttp answers a header lookup that the header section lacks from a
// chunked request's trailer section, for idem as for the app: a key, or a
// header that Config.Scope reads, may come from a trailer (a proxy that
// strips identity headers must strip trailers too).
// Operations lists the covered routes for package swagger.
//
// See Example; the reasons and edge cases (fasthttp's buffers,
// StreamRequestBody, header names) are in [docs/design.md], "fiberidem".
//
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package fiberidem
