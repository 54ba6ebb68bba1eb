package echov5idem

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/idem-go/idem/internal/routedoc"
	"github.com/idem-go/idem/swagger/route"
)

// Operations returns the operations of routes that the middleware of cfg
// covers, for swagger.OptionsFor: those whose method the Engine covers
// (POST, PUT, PATCH and DELETE without an Engine) and that cfg.Skipper does not
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
// cfg.Skipper is asked about each route and method with a synthetic context
// holding only those and its RouteInfo; a Skipper that panics does not skip.
func Operations(cfg Config, routes echo.Routes) []route.Operation {
	rs := make([]routedoc.Route, len(routes))
	for i, rt := range routes {
		rs[i] = routedoc.Route{Method: rt.Method, Path: rt.Path}
	}
	var skipped func(int, string) bool
	if cfg.Skipper != nil {
		e := echo.New()
		skipped = func(i int, method string) bool {
			req, err := http.NewRequestWithContext(context.Background(), method, "http://localhost/", http.NoBody)
			if err != nil {
				return false
			}
			req.URL.Path, req.RequestURI = routes[i].Path, routes[i].Path
			c := e.NewContext(req, discard{})
			ri := routes[i]
			c.InitializeRoute(&ri, &echo.PathValues{})
			return routedoc.Safely(func() bool { return cfg.Skipper(c) })
		}
	}
	return routedoc.Operations(rs, cfg.Engine, echo.RouteAny, skipped)
}

// discard is the ResponseWriter of the synthetic context.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
