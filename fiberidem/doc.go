// Package fiberidem is idem's middleware for Fiber v2: it makes retried
// POST, PUT, PATCH and DELETE requests safe with an Idempotency-Key header.
// The first request with a key runs the handler once and its response is
// stored; a retry with the same key gets that response back, marked
// "X-Idempotency-Replay: true", and the handler does not run again. All the
// idempotency logic is core's: build a core.Engine once and hand it over.
//
//	eng, err := core.New(core.Config{
//		Store: redislock.New(rdb, nil), // or the default in-memory store
//		Scope: func(r *core.Request) string { u, _ := r.Context.Value("user").(string); return u },
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	idem := fiberidem.New(fiberidem.Config{Engine: eng})
//	app.Post("/orders", idem, createOrder)
//	app.Put("/orders/:id", idem, updateOrder)
//
// # Where to mount it
//
// Mount the middleware on the routes it protects, as above, or on each
// route of a group (g.Post("/:id", idem, h)). There c.Route().Path is the
// route template ("/orders/:id"), for core.Event.Route and
// core.Config.ScopeRoute. app.Use(fiberidem.New(…)) and
// app.Group("/orders", fiberidem.New(…)) work too, but in Fiber v2 a Use
// middleware runs before the router has picked the handler's route:
// c.Route() is then the Use route ("/"), so the path stands in for the
// template, as in core's net/http middleware outside a ServeMux. There a
// request that matches no route reaches the middleware too: its key is
// checked and locked, and the router's 404 or 405 is sent but not stored,
// so the key stays free for the right URL (as is a 404 or 405 *fiber.Error
// that a handler behind app.Use returns itself: a retry runs it again).
//
// Install it after recover.New() and after the authentication middleware
// (so that the scope is known). Middleware that shapes the response per
// client, such as compress, belongs before it too, so that what is stored
// does not depend on one client's Accept-Encoding. Requests that Next skips,
// methods the Engine does not cover and requests without a key (unless
// core.Config.Required) go on untouched.
//
// # Scope
//
// core.Request.Context is the request's c.UserContext() whose Value reads
// c.Locals first (as ginidem and echoidem read the framework's own store
// first), so a core.Config.Scope function reads what an
// authentication middleware stored: after c.Locals("user", id), Scope may
// return r.Context.Value("user").(string), and the same key from two users
// is two records. Keys from the X-User-ID header alone, as the examples do,
// are for demonstrations only.
//
// # Errors, panics, streams
//
// A handler's error is rendered by the app's ErrorHandler inside the
// middleware (c.App().ErrorHandler, which honours mounted sub-apps), so
// that the status the client receives is the one stored: a
// fiber.NewError(400, …) is stored and replayed, a plain error rendered as
// 500 is not, and a retry runs the handler again. The middleware then
// returns nil: middleware mounted before it sees the rendered response, not
// the error value. A replay or one of idem's own errors (RFC 9457
// application/problem+json: 400 bad key, 409 in flight, 422 key reused,
// 413, 503) is written directly; later handlers do not run.
//
// After a panic the lock is released and nothing is stored; the panic goes
// on to recover.New(). A streamed response (c.Context().SetBodyStreamWriter,
// c.SendStream, c.SendFile) or a hijacked connection is passed through and
// not stored either: fasthttp sends a body stream after the handler
// returns, so idem never sees it. (The net/http-based adapters do store a
// response that the handler flushed: its body went through them.)
//
// # fasthttp buffers
//
// fasthttp reuses request and response buffers once a handler returns, and
// Fiber's strings (c.Get, c.Path, c.Method) point into them. Whatever the
// Engine keeps past the request (key, scope, method, path, stored headers
// and body) is copied first; a replay's body is copied into fasthttp's
// buffer, not aliased. With Fiber's StreamRequestBody, a request with a key
// has its body read once (bounded by core.Config.MaxBodyBytes) and set back
// on the request for the handler.
//
// The body is fingerprinted and bounded as it was sent. Fiber's c.Body()
// decompresses a body sent with Content-Encoding: gzip, deflate or br,
// which net/http, Gin and Echo leave to the handler: on Fiber such a body's
// MaxBodyBytes bound is on its compressed size, and a retry compressed
// differently gets 422 (never another request's replay: the fingerprint
// holds the Content-Encoding, and one compressed body has one content). Set
// fiber.Config.BodyLimit, and refuse compressed bodies in a middleware
// before idem if the handler should not get them.
//
// The key header, and any critical header of the fingerprint, is looked up
// in any case. fasthttp gives every request header its canonical name,
// unless the app sets fiber.Config.DisableHeaderNormalizing: it then keeps
// names as sent and matches them byte for byte, and the middleware compares
// names ignoring case itself, so that a key sent as "idempotency-key" (as
// HTTP/2 clients and proxies such as Envoy send names) is still found. Your
// own handlers' c.Get (a Scope function's, say) stays case-sensitive there.
//
// # OpenAPI
//
// Operations lists the routes the middleware covers, from Fiber's route
// table, for package swagger to document the Idempotency-Key header and
// idem's responses on them: the routes whose method the Engine covers and
// that Config.Next does not skip (asked with a synthetic *fiber.Ctx, as
// Operations explains). GET routes stay as they are. Call it once every
// route is registered, with the routes the middleware is mounted on:
//
//	ops := fiberidem.Operations(cfg, app.GetRoutes(true))
//	opts := swagger.OptionsFor(eng.Config(), ops...)
//	opts.BasePath = docs.SwaggerInfo.BasePath
//	tmpl, err := swagger.InjectTemplate(docs.SwaggerInfo.SwaggerTemplate, opts)
package fiberidem
