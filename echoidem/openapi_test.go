package echoidem_test

import (
	"fmt"
	"log"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/echoidem"
	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/swaggertest"
)

func TestOperations(t *testing.T) {
	t.Parallel()
	noop := func(echo.Context) error { return nil }
	routes := func() *echo.Echo {
		e := echo.New()
		e.POST("/orders", noop)
		e.GET("/orders", noop)
		e.PUT("/orders/:id", noop)
		e.DELETE("/files/*", noop)
		e.POST("/internal/reindex", noop)
		e.OPTIONS("/orders", noop)
		g := e.Group("/admin")
		g.Use(passThrough)
		g.PATCH("/users/:id", noop)
		return e
	}().Routes()
	eng := newEngine(t, core.Config{})
	skipInternal := func(c echo.Context) bool { return strings.HasPrefix(c.Path(), "/internal/") }
	skipPatchURL := func(c echo.Context) bool {
		return c.Request().Method == http.MethodPatch && c.Request().URL.Path == "/admin/users/:id"
	}
	skipByHeader := func(c echo.Context) bool { return c.Request().Header.Get("X-Internal") != "" }
	skipPanics := func(c echo.Context) bool { return c.Get("user").(string) == "root" }

	all := []string{ // sorted by path
		"PATCH /admin/users/{id}", "DELETE /files/{wildcard}", "POST /internal/reindex", "POST /orders", "PUT /orders/{id}"}
	for _, tc := range []struct {
		name string
		cfg  echoidem.Config
		want []string
	}{
		{"no skipper", echoidem.Config{Engine: eng}, all},
		{"default config", withEngine(echoidem.DefaultConfig, eng), all},
		{"skipper on the route path", echoidem.Config{Engine: eng, Skipper: skipInternal},
			[]string{"PATCH /admin/users/{id}", "DELETE /files/{wildcard}", "POST /orders", "PUT /orders/{id}"}},
		{"skipper on method and URL", echoidem.Config{Engine: eng, Skipper: skipPatchURL},
			[]string{"DELETE /files/{wildcard}", "POST /internal/reindex", "POST /orders", "PUT /orders/{id}"}},
		{"skipper on a header: not evaluated", echoidem.Config{Engine: eng, Skipper: skipByHeader}, all},
		{"skipper panics: not skipped", echoidem.Config{Engine: eng, Skipper: skipPanics}, all},
		{"engine covering POST only", echoidem.Config{Engine: newEngine(t, core.Config{Methods: []string{http.MethodPost}}), Skipper: skipInternal},
			[]string{"POST /orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, op := range echoidem.Operations(tc.cfg, routes) {
				got = append(got, op.Method+" "+op.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Operations = %q, want %q", got, tc.want)
			}
		})
	}

	// The covered POST gets the header in a document, the GET and the
	// skipped POST do not.
	cfg := echoidem.Config{Engine: eng, Skipper: skipInternal}
	documented := injected(t, eng, echoidem.Operations(cfg, routes), routes)
	for op, want := range map[string]bool{
		"POST /orders":           true,
		"PUT /orders/{id}":       true,
		"GET /orders":            false,
		"OPTIONS /orders":        false,
		"POST /internal/reindex": false,
	} {
		if documented[op] != want {
			t.Errorf("%s documents the key header: %v, want %v", op, documented[op], want)
		}
	}
}

func passThrough(next echo.HandlerFunc) echo.HandlerFunc { return next }

func withEngine(cfg echoidem.Config, eng *core.Engine) echoidem.Config {
	cfg.Engine = eng
	return cfg
}

func TestOperationsNothingCovered(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.GET("/orders", func(echo.Context) error { return nil })
	eng := newEngine(t, core.Config{})
	ops := echoidem.Operations(echoidem.Config{Engine: eng}, e.Routes())
	if ops == nil || len(ops) != 0 {
		t.Fatalf("Operations = %#v, want an empty, non-nil slice", ops)
	}
	e.POST("/orders", func(echo.Context) error { return nil })
	if documented := injected(t, eng, ops, e.Routes()); len(documented) != 0 {
		t.Fatalf("documented %v, want nothing", documented)
	}
}

func TestOperationsSkipperSeesRoute(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.PUT("/orders/:id", func(echo.Context) error { return nil })
	var seen []string
	echoidem.Operations(echoidem.Config{Engine: newEngine(t, core.Config{}), Skipper: func(c echo.Context) bool {
		seen = append(seen, c.Request().Method+" "+c.Request().URL.Path+" "+c.Path())
		return false
	}}, e.Routes())
	if want := []string{"PUT /orders/:id /orders/:id"}; !slices.Equal(seen, want) {
		t.Fatalf("Skipper saw %q, want %q", seen, want)
	}
}

func TestOperationsWithoutEngine(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.POST("/orders", func(echo.Context) error { return nil })
	e.GET("/orders", func(echo.Context) error { return nil })
	ops := echoidem.Operations(echoidem.Config{}, e.Routes())
	if len(ops) != 1 || ops[0] != (swagger.Operation{Method: http.MethodPost, Path: "/orders"}) {
		t.Fatalf("Operations = %v, want core's default methods: [{POST /orders}]", ops)
	}
}

// injected documents ops in a Swagger 2.0 document holding every route and
// returns the "METHOD /path" of the operations that got the key header.
func injected(t *testing.T, eng *core.Engine, ops []swagger.Operation, routes []*echo.Route) map[string]bool {
	var rs []swaggertest.Route
	for _, rt := range routes {
		if !strings.HasPrefix(rt.Method, "echo_") { // RouteNotFound
			rs = append(rs, swaggertest.Route{Method: rt.Method, Path: rt.Path})
		}
	}
	return swaggertest.Documented(t, rs, swagger.OptionsFor(eng.Config(), ops...))
}

func ExampleOperations() {
	eng, err := core.New(core.Config{})
	if err != nil {
		log.Fatal(err)
	}
	cfg := echoidem.Config{
		Engine:  eng,
		Skipper: func(c echo.Context) bool { return strings.HasPrefix(c.Path(), "/internal/") },
	}
	e := echo.New()
	e.Use(echoidem.NewWithConfig(cfg))
	e.POST("/orders", func(echo.Context) error { return nil })
	e.GET("/orders", func(echo.Context) error { return nil })
	e.DELETE("/orders/:id", func(echo.Context) error { return nil })
	e.POST("/internal/reindex", func(echo.Context) error { return nil })

	// After the routes: the covered operations, to document the header on.
	ops := echoidem.Operations(cfg, e.Routes())
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
