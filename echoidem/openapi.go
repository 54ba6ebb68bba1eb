package echoidem

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idem-go/idem/swagger"
)

// Operations returns the operations of routes that the middleware of cfg
// covers, for swagger.OptionsFor: the routes whose API description
// documents the Idempotency-Key header. A route is covered when
// cfg.Engine covers its method (core.Config.Methods) and cfg.Skipper does
// not skip it. Paths are converted to OpenAPI syntax (/orders/:id →
// /orders/{id}); the result is sorted by path and method, and never nil:
// with no covered route it is empty and documents nothing (a nil
// swagger.Options.Operations would document every operation).
//
// Call it with e.Routes() once every route is registered, with the Config
// given to NewWithConfig (or echoidem.Config{Engine: eng} for New):
//
//	cfg := echoidem.Config{Engine: eng, Skipper: skipHealth}
//	e.Use(echoidem.NewWithConfig(cfg))
//	e.POST("/orders", createOrder)
//	ops := cfg.Operations(e.Routes())
//
// When the middleware is used on a group or on single routes, pass only
// those routes: Echo's route table does not say which middleware a route
// runs.
//
// The Skipper is called once per route with a context made for the
// occasion: a request with the route's method and its path as URL (the
// path template itself, such as /orders/:id, with no parameter values),
// c.Path() set to the route's path, and nothing else: no headers, no body,
// no values set by other middleware, and the Echo of c.Echo() is a new
// one. A Skipper that decides on more of the request than its method and
// path cannot be evaluated here; for it, such a route counts as not
// skipped, and as not skipped too if the Skipper panics: the middleware
// may cover it.
func (cfg Config) Operations(routes []*echo.Route) []swagger.Operation {
	if cfg.Engine == nil {
		panic("echoidem: Config.Engine is required")
	}
	var e *echo.Echo
	ops := make([]swagger.Operation, 0, len(routes))
	for _, rt := range routes {
		if !cfg.Engine.Covers(rt.Method) {
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
