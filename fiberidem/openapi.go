package fiberidem

import (
	"slices"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger"
)

// Operations returns the operations of routes that the middleware of
// config covers, for swagger.OptionsFor: the routes whose API description
// documents the Idempotency-Key header. A route is covered when the
// Engine covers its method (core.Config.Methods; core.DefaultMethods
// without an Engine) and Config.Next does not skip it. Paths are converted
// to OpenAPI syntax (/orders/:id<int> → /orders/{id}); the result is sorted
// by path and method, without duplicates, and never nil: with no covered
// route it is empty and documents nothing (a nil swagger.Options.Operations
// would document every operation).
//
// Call it once every route is registered, with the Config given to New,
// and with the routes the middleware is mounted on: Fiber's route table
// does not say which handlers a route runs. When every route it lists is
// protected (as in the examples), that is all of app.GetRoutes(true), whose
// argument leaves out the routes of app.Use:
//
//	cfg := fiberidem.Config{Engine: eng}
//	app.Post("/orders", fiberidem.New(cfg), createOrder)
//	app.Get("/orders", listOrders)
//	ops := fiberidem.Operations(app, app.GetRoutes(true), cfg)
//
// Config.Next is called once per route with a *fiber.Ctx of app made for
// the occasion: a request with the route's method and its path as URL (the
// path template itself, such as /orders/:id, with no parameter values), and
// nothing else: no headers, no body, no Locals, and c.Route() falls back
// to that method and path. A Next that decides on more of the request than
// its method and path cannot be evaluated here; for it, such a route
// counts as not skipped, and as not skipped too if Next panics: the
// middleware may cover it.
func Operations(app *fiber.App, routes []fiber.Route, config ...Config) []swagger.Operation {
	var cfg Config
	if len(config) > 0 {
		cfg = config[0]
	}
	covers := func(method string) bool { return slices.Contains(core.DefaultMethods, method) }
	if cfg.Engine != nil {
		covers = cfg.Engine.Covers
	}
	ops := make([]swagger.Operation, 0, len(routes))
	for _, rt := range routes {
		if !covers(rt.Method) || cfg.Next != nil && skipped(app, cfg.Next, rt) {
			continue
		}
		ops = append(ops, swagger.Operation{Method: rt.Method, Path: swagger.NormalizePath(rt.Path)})
	}
	return swagger.SortOperations(ops) // also drops a route registered twice
}

// skipped reports whether next skips a request to rt, asked with a
// synthetic context; a panic counts as not skipped.
func skipped(app *fiber.App, next func(*fiber.Ctx) bool, rt fiber.Route) (s bool) {
	var fctx fasthttp.RequestCtx
	fctx.Request.Header.SetMethod(rt.Method)
	fctx.Request.SetRequestURI(rt.Path)
	c := app.AcquireCtx(&fctx)
	defer func() {
		app.ReleaseCtx(c)
		if recover() != nil {
			s = false
		}
	}()
	return next(c)
}
