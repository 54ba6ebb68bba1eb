// Package echoidem is the Echo v4 middleware of idem: it makes retried
// POST, PUT, PATCH and DELETE requests that carry an Idempotency-Key safe.
// The first request with a key runs the handler once and its response is
// stored; a retry gets the stored response back, marked
// "X-Idempotency-Replay: true", without running the handler.
//
// All idempotency settings (Required, Methods, Scope, TTLs, Wait, the
// store...) live in core.Config; build one core.Engine and hand it over:
//
//	eng, err := core.New(core.Config{Store: redislock.New(rdb, nil)})
//	if err != nil {
//		log.Fatal(err)
//	}
//	e := echo.New()
//	e.Use(middleware.Recover())
//	e.Use(echoidem.New(eng))
//	e.POST("/orders", createOrder)
//
// or, for the Echo options, echoidem.NewWithConfig(echoidem.Config{Engine:
// eng, Skipper: …, ErrorHandler: …}). NewWithConfig panics without an
// Engine, when the app is set up, as Echo's own middlewares do.
//
// # Ordering
//
// Register the middleware with e.Use (or on a group, or on a single route:
// e.POST("/orders", h, echoidem.New(eng))), not with e.Pre. Middleware
// registered with e.Use runs after routing, so it sees the route template
// (c.Path(), "/orders/:id", for core.Event.Route and core.Config.ScopeRoute).
// Put middleware.Recover() before it (outside): after a panic the key's lock
// is released and nothing is stored, so a retry runs the handler again. Put
// authentication before it too, so that a scope can read the user, and
// middleware that shapes the response per client, such as
// middleware.Gzip(), so that what is stored does not depend on one client's
// Accept-Encoding.
//
// A request that matched no route passes through untouched, as in the
// other adapters, so that a key sent to a wrong URL gets Echo's own 404 or
// 405 and stays free for the right one. When the router picked
// echo.NotFoundHandler or echo.MethodNotAllowedHandler, the middleware does
// not look at the request at all. When the request reached the catch-all
// route of a group with middleware (which Echo registers for it), the key
// is checked and locked, but the 404 is sent without being stored. A
// handler returning echo.ErrNotFound or echo.ErrMethodNotAllowed itself is
// not stored either (a retry runs it again).
//
// Two cases need care:
//
//   - A context that has not been routed yet also holds
//     echo.NotFoundHandler: under e.Pre, or from e.NewContext in a test. The
//     middleware then routes the request on a context of its own to tell,
//     so a request that a route of that Echo matches stays protected (in a
//     test, register the route on the Echo whose NewContext you call).
//     Under e.Pre the request is routed as it is when the middleware runs: a
//     Pre middleware after it that rewrites the path (such as
//     middleware.RemoveTrailingSlash) can make it look unrouted, one more
//     reason to use e.Use.
//   - An app's own e.RouteNotFound handler is a route like any other: if it
//     writes a 404 and returns nil, that 404 is stored. Have it return
//     echo.ErrNotFound (rendered by the app's HTTPErrorHandler) instead.
//
// # Scope
//
// core.Request.Context is the request's context, whose Value also reads,
// for a string key, what earlier middleware stored with c.Set. To keep the
// keys of each user apart behind echo-jwt (which stores its token under
// "user"):
//
//	Scope: func(r *core.Request) string {
//		tok, _ := r.Context.Value("user").(*jwt.Token)
//		if tok == nil {
//			return ""
//		}
//		sub, _ := tok.Claims.GetSubject()
//		return sub
//	},
//
// # Errors
//
// A handler's error is rendered by the app's HTTPErrorHandler inside the
// middleware (c.Error), so the status and body that reach the client are
// the ones stored: a 400 from echo.NewHTTPError is stored and replayed
// byte for byte; a 500 (a plain error) is not stored, so a retry runs
// again. The middleware then returns nil: middleware outside it sees the
// response's status, not the error value.
//
// The Engine's own refusals (400 bad or missing key, 409 in flight with
// Retry-After, 413, 422 key reused, 503 store down) are RFC 9457
// application/problem+json documents, as the HTTP contract of idem says,
// and are written as such by default. To render them with the app's
// HTTPErrorHandler instead, set Config.ErrorHandler (its doc shows how).
//
// A replay is written as stored (status, headers, body) and the handler
// does not run. A flushed response (c.Response().Flush, SSE, a reverse
// proxy) is stored when the handler returns, as any other: the handler has
// done its work, and a retry gets its response rather than run it again.
// A hijacked connection (a WebSocket upgrade) is not stored.
//
// # OpenAPI
//
// Operations lists the routes the middleware covers, from Echo's route
// table, for package swagger to document the Idempotency-Key header and
// idem's responses on them: the routes whose method the Engine covers and
// that the Skipper does not skip (asked with a synthetic context, as
// Operations explains). GET routes stay as they are. Call it once every
// route is registered, with the Config the middleware was made of:
//
//	ops := echoidem.Operations(echoidem.Config{Engine: eng}, e.Routes()) // for New(eng)
//	opts := swagger.OptionsFor(eng.Config(), ops...)
//	opts.BasePath = docs.SwaggerInfo.BasePath
//	tmpl, err := swagger.InjectTemplate(docs.SwaggerInfo.SwaggerTemplate, opts)
package echoidem
