// Package routedoc is the part of the HTTP adapters' Operations that no
// framework needs: which routes of a router's table the middleware covers,
// as swagger operations. It is apart from httpadapt, so that serving
// requests never needs package swagger.
package routedoc

import (
	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/defaults"
	"github.com/idem-go/idem/swagger/route"
)

// Route is a route of a router's table: its method and its path in the
// router's syntax.
type Route struct{ Method, Path string }

// Operations returns the operations of routes that a middleware of eng
// documents, covering eng's methods (the default methods if eng is nil): a route whose method is
// one of them, or anyMethod (a route for every method, such as Echo v5's
// RouteAny; "" if the router has none) once per covered method, unless
// skipped (nil: none) says the middleware's skip function skips route i
// with that method. The result is in OpenAPI syntax, sorted and without
// duplicates (route.Sort), and never nil.
func Operations(routes []Route, eng *core.Engine, anyMethod string, skipped func(i int, method string) bool) []route.Operation {
	methods := defaults.Methods()
	if eng != nil {
		methods = eng.Config().Methods
	}
	ops := make([]route.Operation, 0, len(routes))
	for i, rt := range routes {
		for _, m := range methods {
			if m != rt.Method && (anyMethod == "" || rt.Method != anyMethod) {
				continue
			}
			if skipped != nil && skipped(i, m) {
				continue
			}
			ops = append(ops, route.Operation{Method: m, Path: route.Normalize(rt.Path)})
		}
	}
	return route.Sort(ops)
}

// Safely calls skip, a middleware's skip function asked with a synthetic
// context, and reports false if it panics: such a function decides on more
// of the request than the synthetic context holds, and the route may be
// covered.
func Safely(skip func() bool) (skipped bool) {
	defer func() {
		if recover() != nil {
			skipped = false
		}
	}()
	return skip()
}
