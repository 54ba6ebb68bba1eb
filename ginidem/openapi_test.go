package ginidem_test

import (
	"fmt"
	"log"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/ginidem"
	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/swaggertest"
)

// TestOperationsWithoutEngine: like echoidem's, fiberidem's and
// fiberv3idem's Operations, a nil Engine documents core's default methods.
func TestOperationsWithoutEngine(t *testing.T) {
	t.Parallel()
	noop := func(*gin.Context) {}
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.POST("/orders", noop)
	r.GET("/orders", noop)
	ops := ginidem.Operations(nil, r.Routes())
	if len(ops) != 1 || ops[0] != (swagger.Operation{Method: http.MethodPost, Path: "/orders"}) {
		t.Fatalf("Operations = %v, want core's default methods: [{POST /orders}]", ops)
	}
}

func TestOperations(t *testing.T) {
	t.Parallel()
	noop := func(*gin.Context) {}
	eng := newEngine(t, core.Config{})
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.GET("/health", noop)
	r.POST("/login", noop) // outside the group: the middleware skips it
	api := r.Group("/api", ginidem.New(eng))
	api.POST("/orders", noop)
	api.GET("/orders", noop)
	api.PUT("/orders/:id", noop)
	api.DELETE("/files/*path", noop)
	api.OPTIONS("/orders", noop)

	// The routes of the group, as the package documentation shows.
	var covered gin.RoutesInfo
	for _, rt := range r.Routes() {
		if strings.HasPrefix(rt.Path, api.BasePath()+"/") {
			covered = append(covered, rt)
		}
	}
	ops := ginidem.Operations(eng, covered)
	documented := injected(t, ops, r.Routes())

	onlyPost := newEngine(t, core.Config{Methods: []string{http.MethodPost}})
	for _, tc := range []struct {
		name, method, path string
		ops                []swagger.Operation
		want               bool
	}{
		{"covered POST", "POST", "/api/orders", ops, true},
		{"covered PUT with a parameter", "PUT", "/api/orders/{id}", ops, true},
		{"covered DELETE with a wildcard", "DELETE", "/api/files/{path}", ops, true},
		{"GET", "GET", "/api/orders", ops, false},
		{"OPTIONS", "OPTIONS", "/api/orders", ops, false},
		{"POST outside the group", "POST", "/login", ops, false},
		{"GET outside the group", "GET", "/health", ops, false},
		{"method the engine does not cover", "PUT", "/api/orders/{id}", ginidem.Operations(onlyPost, covered), false},
		{"POST of an engine covering POST only", "POST", "/api/orders", ginidem.Operations(onlyPost, covered), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := swagger.Operation{Method: tc.method, Path: tc.path}
			if got := slices.Contains(tc.ops, op); got != tc.want {
				t.Errorf("%v in %v: %v, want %v", op, tc.ops, got, tc.want)
			}
		})
	}
	for _, op := range []string{"POST /api/orders", "PUT /api/orders/{id}", "DELETE /api/files/{path}"} {
		if !documented[op] {
			t.Errorf("%s does not document the key header; documented: %v", op, documented)
		}
	}
	for _, op := range []string{"GET /api/orders", "OPTIONS /api/orders", "POST /login", "GET /health"} {
		if documented[op] {
			t.Errorf("%s documents the key header", op)
		}
	}
}

func TestOperationsNothingCovered(t *testing.T) {
	t.Parallel()
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.GET("/orders", func(*gin.Context) {})
	ops := ginidem.Operations(newEngine(t, core.Config{}), r.Routes())
	if ops == nil || len(ops) != 0 {
		t.Fatalf("Operations = %#v, want an empty, non-nil slice", ops)
	}
	r.POST("/orders", func(*gin.Context) {})
	if documented := injected(t, ops, r.Routes()); len(documented) != 0 {
		t.Fatalf("documented %v, want nothing", documented)
	}
}

// injected documents ops in a Swagger 2.0 document holding every route and
// returns the "METHOD /path" of the operations that got the key header.
func injected(t *testing.T, ops []swagger.Operation, routes gin.RoutesInfo) map[string]bool {
	rs := make([]swaggertest.Route, len(routes))
	for i, rt := range routes {
		rs[i] = swaggertest.Route{Method: rt.Method, Path: rt.Path}
	}
	return swaggertest.Documented(t, rs, swagger.OptionsFor(newEngine(t, core.Config{}).Config(), ops...))
}

func ExampleOperations() {
	eng, err := core.New(core.Config{})
	if err != nil {
		log.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginidem.New(eng))
	r.POST("/orders", func(*gin.Context) {})
	r.GET("/orders", func(*gin.Context) {})
	r.DELETE("/orders/:id", func(*gin.Context) {})

	// After the routes: the covered operations, to document the header on.
	ops := ginidem.Operations(eng, r.Routes())
	fmt.Println(ops)
	// With the spec swag generated (package docs):
	//
	//	opts := swagger.OptionsFor(eng.Config(), ops...)
	//	opts.BasePath = docs.SwaggerInfo.BasePath
	//	tmpl, err := swagger.InjectTemplate(docs.SwaggerInfo.SwaggerTemplate, opts)
	//	...
	//	docs.SwaggerInfo.SwaggerTemplate = tmpl

	// Output:
	// [{POST /orders} {DELETE /orders/{id}}]
}
