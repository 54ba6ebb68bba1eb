// Package echov5idem is idem's middleware for Echo v5: it makes retried
// POST, PUT, PATCH and DELETE requests that carry an Idempotency-Key safe.
// The first request with a key runs the handler once and its response is
// stored; a retry gets the stored response back, marked
// "X-Idempotency-Replay: true", without running the handler. (Echo v4 apps
// use package echoidem; the README says why the modules are named after the
// framework's major.)
//
// All idempotency settings (Required, Methods, Scope, TTLs, Wait, the
// store…) live in core.Config; build one core.Engine and hand it over:
//
//	eng, err := core.New(core.Config{Store: redislock.New(rdb, nil)})
//	if err != nil {
//		log.Fatal(err)
//	}
//	e := echo.New()
//	e.Use(middleware.Recover())
//	e.Use(echov5idem.New(eng))
//	e.POST("/orders", createOrder)
//
// or, for the Echo options, echov5idem.NewWithConfig(echov5idem.Config{
// Engine: eng, Skipper: …, ErrorHandler: …}). As with Echo v5's own
// middleware, NewWithConfig panics on an invalid Config (no Engine) and
// Config.ToMiddleware returns the error instead.
//
// # Ordering
//
// Register it with e.Use, on a group or on a route, not with e.Pre: after
// routing, c.Path() is the route template ("/orders/:id") for
// core.Event.Route and core.Config.ScopeRoute. Put middleware.Recover()
// before it (a panic releases the key's lock and stores nothing, so a
// retry runs again), and authentication too, so that a scope can read the
// user, and middleware that shapes the response per client, such as Gzip.
//
// A request that no route matches passes through untouched, so that a key
// sent to a wrong URL gets Echo's 404 or 405 and stays free for the right
// one: the router's own answers and RouteNotFound routes (a group's
// catch-all, e.RouteNotFound) are told apart by c.RouteInfo(). A context
// not routed yet (under e.Pre, or from e.NewContext in a test) is routed on
// a context of its own to tell. A handler that returns echo.ErrNotFound or
// echo.ErrMethodNotAllowed itself is not stored either.
//
// # Scope
//
// core.Request.Context is the request's context, whose Value also reads,
// for a string key, what earlier middleware stored with c.Set (echo-jwt's
// "user", say).
//
// # Errors
//
// A handler's error is rendered by the app's HTTPErrorHandler inside the
// middleware, so the status and body that reach the client are the ones
// stored: a 400 from echo.NewHTTPError is stored and replayed byte for
// byte, a 500 is not stored, so a retry runs again. The middleware then
// returns nil. idem's own refusals are RFC 9457 application/problem+json
// documents (Config.ErrorHandler renders them the app's way). A flushed
// response (SSE, a reverse proxy) is stored when the handler returns; a
// hijacked connection is not.
//
// # OpenAPI
//
// Operations lists the routes the middleware covers, from Echo's route
// table, for package swagger to document the Idempotency-Key header and
// idem's responses on them:
//
//	ops := echov5idem.Operations(cfg, e.Router().Routes())
//	opts := swagger.OptionsFor(eng.Config(), ops...)
package echov5idem
