package echoidem

import (
	"context"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger"
)

// Operations returns the operations of routes that the middleware of cfg
// covers, for swagger.OptionsFor: those whose method the Engine covers
// (core.DefaultMethods without an Engine) and that cfg.Skipper does not
// skip. Paths are in OpenAPI syntax (/orders/:id → /orders/{id}), sorted by
// path and method, without duplicates; the result is never nil (a nil
// swagger.Options.Operations would document every operation).
//
// Call it once every route is registered, with the Config given to
// NewWithConfig (Config{Engine: eng} for New) and e.Routes(), or only the
// routes of the group the middleware is used on: Echo's route table does
// not say which middleware a route runs.
//
// cfg.Skipper is called once per route with a context made for the
// occasion (of an echo.New(), not yours): the route's method, its path
// template as URL (/orders/:id) and as c.Path(), nothing else. A Skipper
// that decides on more than that, or panics, counts as not skipping: the
// route may be covered.
func Operations(cfg Config, routes []*echo.Route) []swagger.Operation {
	covers := func(method string) bool { return slices.Contains(core.DefaultMethods, method) }
	if cfg.Engine != nil {
		covers = cfg.Engine.Covers
	}
	var e *echo.Echo
	ops := make([]swagger.Operation, 0, len(routes))
	for _, rt := range routes {
		if !covers(rt.Method) {
			continue
		}
		if cfg.Skipper != nil {
			if e == nil {
				e = echo.New()
			}
			if skipped(e, cfg.Skipper, rt) {
				continue
			}
		}
		ops = append(ops, swagger.Operation{Method: rt.Method, Path: swagger.NormalizePath(rt.Path)})
	}
	return swagger.SortOperations(ops)
}

// skipped reports whether skip skips a request to rt, asked with a
// synthetic context; a panic counts as not skipped.
func skipped(e *echo.Echo, skip middleware.Skipper, rt *echo.Route) (s bool) {
	defer func() {
		if recover() != nil {
			s = false
		}
	}()
	req, err := http.NewRequestWithContext(context.Background(), rt.Method, "http://localhost/", http.NoBody)
	if err != nil {
		return false
	}
	req.URL.Path, req.RequestURI = rt.Path, rt.Path
	c := e.NewContext(req, discard{})
	c.SetPath(rt.Path)
	return skip(c)
}

// discard is the ResponseWriter of the synthetic context.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
