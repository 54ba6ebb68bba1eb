// Package fiberv3idem is idem's middleware for Fiber v3: it makes retried
// POST, PUT, PATCH and DELETE requests safe with an Idempotency-Key header.
// The first request with a key runs the handler once and its response is
// stored; a retry with the same key gets that response back, marked
// "X-Idempotency-Replay: true", without running the handler again. All the
// idempotency logic is core's: build a core.Engine once and hand it over.
// (Fiber v2 apps use package fiberidem; the README says why the modules are
// named after the framework's major.)
//
//	eng, err := core.New(core.Config{
//		Store: redislock.New(rdb, nil), // or the default in-memory store
//		Scope: func(r *core.Request) string { u, _ := r.Context.Value("user").(string); return u },
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	idem := fiberv3idem.New(fiberv3idem.Config{Engine: eng})
//	app.Post("/orders", idem, createOrder)
//	app.Put("/orders/:id", idem, updateOrder)
//
// # Where to mount it
//
// On the routes it protects, as above, c.Route().Path is the route template
// ("/orders/:id") for core.Event.Route and core.Config.ScopeRoute. Under
// app.Use or a Group's middleware Fiber has not routed the request yet
// (c.Matched() is false): the path stands in for the template, a request
// to a URL that no route matches is checked and locked, and the router's
// 404 or 405 is sent but not stored, so the key stays free for the right URL.
//
// Install it after recover.New() and after authentication (so that a scope
// can read the user), and after middleware that shapes the response per
// client, such as compress. Requests that Next skips, methods the Engine
// does not cover and requests without a key (unless core.Config.Required)
// go on untouched.
//
// # Scope
//
// core.Request.Context is c.Context() whose Value reads c.Locals first: after
// an authentication middleware's c.Locals("user", id), Scope may return
// r.Context.Value("user").(string).
//
// # Errors, panics, streams
//
// A handler's error is rendered by the app's ErrorHandler (c.App().ErrorHandler,
// which honours mounted sub-apps) inside the middleware, so that the status
// the client receives is the one stored: a fiber.NewError(400, …) is stored
// and replayed, a plain error rendered as 500 is not. The middleware then
// returns nil. idem's own refusals are RFC 9457 problem documents
// (Config.ErrorHandler renders them the app's way); a replay or a refusal
// ends the chain.
//
// After a panic the lock is released and nothing is stored; the panic goes
// on to recover.New(). A body stream (SendStream, SendFile,
// SetBodyStreamWriter) or a hijacked connection is sent after the handler
// returns, so it is passed through and not stored.
//
// # fasthttp buffers
//
// fasthttp reuses request and response buffers once a handler returns, and
// Fiber's strings point into them: whatever the Engine keeps past the
// request is copied first, and a replay's body is copied into fasthttp's
// buffer. With StreamRequestBody, a body is read once, bounded by
// core.Config.MaxBodyBytes, and set back on the request for the handler.
// The body is fingerprinted as sent (c.Body() would decompress it). With
// fiber.Config.DisableHeaderNormalizing, the key header is looked up
// ignoring case all the same.
//
// # OpenAPI
//
// Operations lists the routes the middleware covers, for package swagger to
// document the Idempotency-Key header and idem's responses on them:
//
//	ops := fiberv3idem.Operations(cfg, app.GetRoutes(true))
//	opts := swagger.OptionsFor(eng.Config(), ops...)
package fiberv3idem
