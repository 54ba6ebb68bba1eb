package fiberv3idem

import (
	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/internal/routedoc"
	"github.com/idem-go/idem/swagger/route"
)

// Operations returns the operations of routes that the middleware of cfg
// covers, for swagger.OptionsFor: those whose method the Engine covers
// (POST, PUT, PATCH and DELETE without an Engine) and that cfg.Next does not skip.
// Paths are in OpenAPI syntax (/orders/:id<int> → /orders/{id}), sorted by
// path and method, without duplicates; the result is never nil (a nil
// swagger.Options.Operations would document every operation).
//
// Call it once every route is registered, with the Config given to New and
// the routes the middleware is mounted on (Fiber's route table does not say
// which handlers a route runs): all of app.GetRoutes(true) when every route
// it lists is protected or not covered anyway, as in the examples.
//
// cfg.Next is asked about each route with a synthetic context holding only
// its method and path template; a Next that panics does not skip.
func Operations(cfg Config, routes []fiber.Route) []route.Operation {
	rs := make([]routedoc.Route, len(routes))
	for i, rt := range routes {
		rs[i] = routedoc.Route{Method: rt.Method, Path: rt.Path}
	}
	var skipped func(int, string) bool
	if cfg.Next != nil {
		app := fiber.New()
		skipped = func(i int, method string) bool {
			var fctx fasthttp.RequestCtx
			fctx.Request.Header.SetMethod(method)
			fctx.Request.SetRequestURI(routes[i].Path)
			c := app.AcquireCtx(&fctx)
			defer app.ReleaseCtx(c)
			return routedoc.Safely(func() bool { return cfg.Next(c) })
		}
	}
	return routedoc.Operations(rs, cfg.Engine, "", skipped)
}
