package echov5idem_test

import (
	"fmt"
	"log"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/echov5idem"
	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/swaggertest"
)

func TestOperations(t *testing.T) {
	t.Parallel()
	noop := func(*echo.Context) error { return nil }
	routes := func() echo.Routes {
		e := echo.New()
		e.POST("/orders", noop)
		e.GET("/orders", noop)
		e.PUT("/orders/:id", noop)
		e.DELETE("/files/*", noop)
		e.POST("/internal/reindex", noop)
		e.OPTIONS("/orders", noop)
		e.Any("/hooks/:name", noop)
		e.RouteNotFound("/*", noop)
		g := e.Group("/admin")
		g.Use(passThrough) // and its catch-all routes
		g.PATCH("/users/:id", noop)
		return e.Router().Routes()
	}()
	eng := newEngine(t, core.Config{})
	skipInternal := func(c *echo.Context) bool { return strings.HasPrefix(c.Path(), "/internal/") }
	skipPatchURL := func(c *echo.Context) bool {
		return c.Request().Method == http.MethodPatch && c.Request().URL.Path == "/admin/users/:id"
	}
	skipHookDeletes := func(c *echo.Context) bool {
		return c.RouteInfo().Method == echo.RouteAny && c.Request().Method == http.MethodDelete
	}
	skipByHeader := func(c *echo.Context) bool { return c.Request().Header.Get("X-Internal") != "" }
	skipPanics := func(c *echo.Context) bool { return c.Get("user").(string) == "root" }

	hooks := []string{"DELETE /hooks/{name}", "PATCH /hooks/{name}", "POST /hooks/{name}", "PUT /hooks/{name}"}
	all := append([]string{ // sorted by path
		"PATCH /admin/users/{id}", "DELETE /files/{wildcard}"}, append(hooks,
		"POST /internal/reindex", "POST /orders", "PUT /orders/{id}")...)
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(s string) bool { return slices.Contains(drop, s) })
	}
	for _, tc := range []struct {
		name string
		cfg  echov5idem.Config
		want []string
	}{
		{"zero Config: core's default methods", echov5idem.Config{}, all},
		{"no skipper", echov5idem.Config{Engine: eng}, all},
		{"default config", withEngine(echov5idem.DefaultConfig, eng), all},
		{"skipper on the route path", echov5idem.Config{Engine: eng, Skipper: skipInternal}, without("POST /internal/reindex")},
		{"skipper on method and URL", echov5idem.Config{Engine: eng, Skipper: skipPatchURL}, without("PATCH /admin/users/{id}")},
		{"skipper on an Any route's method", echov5idem.Config{Engine: eng, Skipper: skipHookDeletes}, without("DELETE /hooks/{name}")},
		{"skipper on a header: not evaluated", echov5idem.Config{Engine: eng, Skipper: skipByHeader}, all},
		{"skipper panics: not skipped", echov5idem.Config{Engine: eng, Skipper: skipPanics}, all},
		{"engine covering POST only", echov5idem.Config{Engine: newEngine(t, core.Config{Methods: []string{http.MethodPost}}), Skipper: skipInternal},
			[]string{"POST /hooks/{name}", "POST /orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, op := range echov5idem.Operations(tc.cfg, routes) {
				got = append(got, op.Method+" "+op.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Operations = %q, want %q", got, tc.want)
			}
		})
	}

	// The covered POST gets the header in a document, the GET and the
	// skipped POST do not.
	documented := injected(t, eng, echov5idem.Operations(echov5idem.Config{Engine: eng, Skipper: skipInternal}, routes), routes)
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

func withEngine(cfg echov5idem.Config, eng *core.Engine) echov5idem.Config {
	cfg.Engine = eng
	return cfg
}

func TestOperationsNothingCovered(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.GET("/orders", func(*echo.Context) error { return nil })
	eng := newEngine(t, core.Config{})
	ops := echov5idem.Operations(echov5idem.Config{Engine: eng}, e.Router().Routes())
	if ops == nil || len(ops) != 0 {
		t.Fatalf("Operations = %#v, want an empty, non-nil slice", ops)
	}
	e.POST("/orders", func(*echo.Context) error { return nil })
	if documented := injected(t, eng, ops, e.Router().Routes()); len(documented) != 0 {
		t.Fatalf("documented %v, want nothing", documented)
	}
}

func TestOperationsSkipperSeesRoute(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.PUT("/orders/:id", func(*echo.Context) error { return nil })
	var seen []string
	echov5idem.Operations(echov5idem.Config{Engine: newEngine(t, core.Config{}), Skipper: func(c *echo.Context) bool {
		seen = append(seen, c.Request().Method+" "+c.Request().URL.Path+" "+c.Path()+" "+c.RouteInfo().Name)
		return false
	}}, e.Router().Routes())
	if want := []string{"PUT /orders/:id /orders/:id PUT:/orders/:id"}; !slices.Equal(seen, want) {
		t.Fatalf("Skipper saw %q, want %q", seen, want)
	}
}

// injected documents ops in a Swagger 2.0 document holding every route and
// returns the "METHOD /path" of the operations that got the key header.
func injected(t *testing.T, eng *core.Engine, ops []swagger.Operation, routes echo.Routes) map[string]bool {
	var rs []swaggertest.Route
	for _, rt := range routes {
		if !strings.HasPrefix(rt.Method, "echo_") { // Any, RouteNotFound
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
	cfg := echov5idem.Config{
		Engine:  eng,
		Skipper: func(c *echo.Context) bool { return strings.HasPrefix(c.Path(), "/internal/") },
	}
	e := echo.New()
	e.Use(echov5idem.NewWithConfig(cfg))
	e.POST("/orders", func(*echo.Context) error { return nil })
	e.GET("/orders", func(*echo.Context) error { return nil })
	e.DELETE("/orders/:id", func(*echo.Context) error { return nil })
	e.POST("/internal/reindex", func(*echo.Context) error { return nil })

	// After the routes: the covered operations, to document the header on.
	ops := echov5idem.Operations(cfg, e.Router().Routes())
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
