package ginidem

import (
	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/routedoc"
	"github.com/idem-go/idem/swagger/route"
)

// Operations returns the operations of routes that eng covers (those whose
// method is one of core.Config.Methods; POST, PUT, PATCH and DELETE if eng
// is nil), for swagger.OptionsFor: the routes whose API description
// documents the Idempotency-Key header. Paths are converted to OpenAPI
// syntax (/orders/:id → /orders/{id}).
//
// Gin's route table does not say which middleware a route runs, so routes
// are the routes the middleware covers: all of r.Routes() when it is used
// with r.Use, or only those of the group it is used on, which the caller
// selects, e.g. by the group's prefix:
//
//	var covered gin.RoutesInfo
//	for _, rt := range r.Routes() {
//		if strings.HasPrefix(rt.Path, api.BasePath()+"/") {
//			covered = append(covered, rt)
//		}
//	}
//	ops := ginidem.Operations(eng, covered)
//
// Call it after every route is registered. The result is sorted by path and
// method, without duplicates, and never nil: with no covered route it is
// empty and documents nothing (a nil swagger.Options.Operations would
// document every operation).
func Operations(eng *core.Engine, routes gin.RoutesInfo) []route.Operation {
	rs := make([]routedoc.Route, len(routes))
	for i, rt := range routes {
		rs[i] = routedoc.Route{Method: rt.Method, Path: rt.Path}
	}
	return routedoc.Operations(rs, eng, "", nil)
}
