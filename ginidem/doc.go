// Package ginidem is the Gin adapter of idem: it makes retried mutations
// safe with an Idempotency-Key header, a lock and a stored response replayed
// with X-Idempotency-Replay: true.
//
// Build one core.Engine (all idempotency settings live in core.Config) and
// use it as middleware:
//
//	eng, err := core.New(core.Config{
//		Store: redislock.New(rdb, nil),
//		Scope: func(r *core.Request) string {
//			user, _ := r.Context.Value("user").(string) // set by your auth middleware: c.Set("user", id)
//			return user
//		},
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	r := gin.New()
//	r.Use(gin.Recovery(), auth, ginidem.New(eng))
//	r.POST("/orders", createOrder)
//
// # Ordering
//
// Put gin.Recovery() and the authentication middleware before ginidem, and
// the handlers it protects after it: ginidem sees the request as the
// handlers do and captures what the handlers after it write. A middleware
// after ginidem is part of the protected response: if it answers with
// c.AbortWithStatusJSON (say 403), that response is stored and replayed
// like any other. To protect only some routes, use it on a group
// (api := r.Group("/api", ginidem.New(eng))) or on a route. Middleware that
// shapes the response per client, such as gzip, belongs before ginidem, so
// that what is stored does not depend on one client's Accept-Encoding.
//
// The route template (core.Event.Route, and the endpoint of
// core.Config.ScopeRoute) is c.FullPath() ("/orders/:id"). A request that
// matched no route (the NoRoute and NoMethod handlers) passes through
// untouched, as in the other adapters: a key sent to a wrong URL gets Gin's
// 404 or 405 and stays free for the right one.
//
// # Scope
//
// core.Request.Context reads the values of the gin.Context (c.Keys, where
// c.Set puts them; gin.ContextKey gives the *gin.Context itself) and of the
// request's context (typed keys of net/http middleware), and carries the
// request's cancellation whatever gin.Engine.ContextWithFallback says. A
// core.Config.Scope function scopes keys per authenticated user with
// r.Context.Value("user").
//
// # Responses
//
// A replay or an idem error (400, 409, 413, 422, 503 as
// application/problem+json) is written with the status, headers and body the
// engine returns, and the chain is aborted: later handlers do not run, while
// the middleware before ginidem (logger, metrics) see the response as usual.
// WithErrorHandler renders the errors the app's way instead.
//
// After the handlers, the response is stored (per core.Config.Storable)
// unless:
//
//   - a handler panicked: the lock is released and nothing stored, so a
//     retry runs the handler again; the panic goes on to gin.Recovery();
//   - the connection was hijacked (a WebSocket upgrade);
//   - the handlers recorded an error with c.Error and wrote nothing, leaving
//     the response to an error-rendering middleware before ginidem: that
//     response is not known when the handlers return, so the lock is
//     released without storing and a retry runs the handlers again. An
//     error middleware placed after ginidem, or a handler that writes its
//     error itself (c.JSON(400, …), c.AbortWithError), has its response
//     stored. So has a handler that sets a success status beside its
//     c.Error (c.Status(204), the error only for the logs): ginidem sends
//     that status when the handlers return, so that an error middleware
//     before it, which renders what is not written yet, leaves it alone.
//
// A flushed response (c.Stream, SSE, httputil.ReverseProxy) is stored
// when the handlers return, as any other: the handlers have done their
// work, and a retry gets that response rather than run them again.
//
// A middleware before ginidem that read the body with c.ShouldBindBodyWith
// leaves it in the context, where ginidem reads it; a middleware that
// drained c.Request.Body otherwise gets a 500 (core.ProblemBodyConsumed)
// rather than a fingerprint of an empty body.
//
// # OpenAPI
//
// Operations lists the routes the middleware covers, from Gin's route
// table, for package swagger to document the Idempotency-Key header and
// idem's responses on them (and on nothing else: GET routes stay as they
// are). Call it once every route is registered:
//
//	opts := swagger.OptionsFor(eng.Config(), ginidem.Operations(eng, r.Routes())...)
//	opts.BasePath = docs.SwaggerInfo.BasePath
//	tmpl, err := swagger.InjectTemplate(docs.SwaggerInfo.SwaggerTemplate, opts)
//
// Gin does not record which middleware a route runs: when ginidem is used
// on a group, pass only that group's routes (Operations shows how).
package ginidem
