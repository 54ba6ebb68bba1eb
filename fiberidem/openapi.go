package fiberidem

import (
	"slices"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger"
)

// Operations returns the operations of routes that the middleware of cfg
// covers, for swagger.OptionsFor: those whose method the Engine covers
// (core.DefaultMethods without an Engine) and that cfg.Next does not skip.
// Paths are in OpenAPI syntax (/orders/:id<int> → /orders/{id}), sorted by
// path and method, without duplicates; the result is never nil (a nil
// swagger.Options.Operations would document every operation).
//
// Call it once every route is registered, with the Config given to New and
// the routes the middleware is mounted on (Fiber's route table does not say
// which handlers a route runs): all of app.GetRoutes(true) when every route
// it lists is protected or not covered anyway, as in the examples.
//
// cfg.Next is called once per route with a *fiber.Ctx made for the occasion
// (of a fiber.New() app, not yours): the route's method, and its path
// template as the URL (/orders/:id), nothing else. A Next that decides on
// more than that, or panics, counts as not skipping: the route may be
// covered.
func Operations(cfg Config, routes []fiber.Route) []swagger.Operation {
	covers := func(method string) bool { return slices.Contains(core.DefaultMethods, method) }
	if cfg.Engine != nil {
		covers = cfg.Engine.Covers
	}
	var app *fiber.App
	ops := make([]swagger.Operation, 0, len(routes))
	for _, rt := range routes {
		if !covers(rt.Method) {
			continue
		}
		if cfg.Next != nil {
			if app == nil {
				app = fiber.New()
			}
			if skipped(app, cfg.Next, rt) {
				continue
			}
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
