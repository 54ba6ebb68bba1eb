package echov5idem

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger"
)

// Operations returns the operations of routes that the middleware of cfg
// covers, for swagger.OptionsFor: those whose method the Engine covers
// (core.DefaultMethods without an Engine) and that cfg.Skipper does not
// skip; a route of e.Any counts once per covered method, RouteNotFound
// routes not at all. Paths are in OpenAPI syntax (/orders/:id →
// /orders/{id}), sorted by path and method, without duplicates; the result
// is never nil (a nil swagger.Options.Operations would document every
// operation).
//
// Call it once every route is registered, with the Config given to
// NewWithConfig (Config{Engine: eng} for New) and e.Router().Routes(), or
// only the routes of the group the middleware is used on: Echo's route
// table does not say which middleware a route runs.
//
// cfg.Skipper is called once per route and method with a context made for
// the occasion (of an echo.New(), not yours): the method, the path template
// as URL (/orders/:id), c.Path() and c.RouteInfo() of the route, nothing
// else. A Skipper that decides on more than that, or panics, counts as not
// skipping: the route may be covered.
func Operations(cfg Config, routes echo.Routes) []swagger.Operation {
	methods := core.DefaultMethods
	if cfg.Engine != nil {
		methods = cfg.Engine.Config().Methods
	}
	var e *echo.Echo
	ops := make([]swagger.Operation, 0, len(routes))
	add := func(method string, rt echo.RouteInfo) {
		if cfg.Skipper != nil {
			if e == nil {
				e = echo.New()
			}
			if skipped(e, cfg.Skipper, method, rt) {
				return
			}
		}
		ops = append(ops, swagger.Operation{Method: method, Path: swagger.NormalizePath(rt.Path)})
	}
	for _, rt := range routes {
		for _, m := range methods {
			if m == rt.Method || rt.Method == echo.RouteAny {
				add(m, rt)
			}
		}
	}
	return swagger.SortOperations(ops)
}

// skipped reports whether skip skips a request to rt with method, asked
// with a synthetic context; a panic counts as not skipped.
func skipped(e *echo.Echo, skip middleware.Skipper, method string, rt echo.RouteInfo) (s bool) {
	defer func() {
		if recover() != nil {
			s = false
		}
	}()
	req, err := http.NewRequestWithContext(context.Background(), method, "http://localhost/", http.NoBody)
	if err != nil {
		return false
	}
	req.URL.Path, req.RequestURI = rt.Path, rt.Path
	c := e.NewContext(req, discard{})
	c.InitializeRoute(&rt, &echo.PathValues{})
	return skip(c)
}

// discard is the ResponseWriter of the synthetic context.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
