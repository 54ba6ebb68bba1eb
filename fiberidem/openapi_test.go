package fiberidem_test

import (
	"fmt"
	"log"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/fiberidem"
	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/swaggertest"
)

func TestOperations(t *testing.T) {
	t.Parallel()
	noop := func(c *fiber.Ctx) error { return c.Next() }
	eng := newEngine(t, core.Config{})
	app := fiber.New()
	idem := fiberidem.New(fiberidem.Config{Engine: eng})
	app.Post("/orders", idem, noop)
	app.Get("/orders", noop) // and HEAD
	app.Put("/orders/:id<int>", idem, noop)
	app.Delete("/files/*", idem, noop)
	app.Post("/internal/reindex", idem, noop)
	app.Options("/orders", noop)
	app.Post("/orders", noop) // a second handler of the same route
	app.Group("/admin").Patch("/users/:id", idem, noop)
	routes := app.GetRoutes(true)

	skipInternal := func(c *fiber.Ctx) bool { return strings.HasPrefix(c.Route().Path, "/internal/") }
	skipPatch := func(c *fiber.Ctx) bool { return c.Method() == http.MethodPatch && c.Path() == "/admin/users/:id" }
	skipByHeader := func(c *fiber.Ctx) bool { return c.Get("X-Internal") != "" }
	skipPanics := func(c *fiber.Ctx) bool { return c.Locals("user").(string) == "root" }

	all := []string{ // sorted by path
		"PATCH /admin/users/{id}", "DELETE /files/{wildcard}", "POST /internal/reindex", "POST /orders", "PUT /orders/{id}"}
	for _, tc := range []struct {
		name string
		cfg  fiberidem.Config
		want []string
	}{
		{"zero Config: core's default methods", fiberidem.Config{}, all},
		{"no Next", fiberidem.Config{Engine: eng}, all},
		{"Next on the route path", fiberidem.Config{Engine: eng, Next: skipInternal},
			[]string{"PATCH /admin/users/{id}", "DELETE /files/{wildcard}", "POST /orders", "PUT /orders/{id}"}},
		{"Next on method and path", fiberidem.Config{Engine: eng, Next: skipPatch},
			[]string{"DELETE /files/{wildcard}", "POST /internal/reindex", "POST /orders", "PUT /orders/{id}"}},
		{"Next on a header: not evaluated", fiberidem.Config{Engine: eng, Next: skipByHeader}, all},
		{"Next panics: not skipped", fiberidem.Config{Engine: eng, Next: skipPanics}, all},
		{"engine covering POST only", fiberidem.Config{Engine: newEngine(t, core.Config{Methods: []string{http.MethodPost}}), Next: skipInternal},
			[]string{"POST /orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, op := range fiberidem.Operations(tc.cfg, routes) {
				got = append(got, op.Method+" "+op.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Operations = %q, want %q", got, tc.want)
			}
		})
	}

	// The covered POST gets the header in a document, the GET and the
	// skipped POST do not.
	ops := fiberidem.Operations(fiberidem.Config{Engine: eng, Next: skipInternal}, routes)
	documented := injected(t, eng, ops, routes)
	for op, want := range map[string]bool{
		"POST /orders":           true,
		"PUT /orders/{id}":       true,
		"GET /orders":            false,
		"HEAD /orders":           false,
		"OPTIONS /orders":        false,
		"POST /internal/reindex": false,
	} {
		if documented[op] != want {
			t.Errorf("%s documents the key header: %v, want %v", op, documented[op], want)
		}
	}
}

func TestOperationsNothingCovered(t *testing.T) {
	t.Parallel()
	app := fiber.New()
	app.Get("/orders", func(*fiber.Ctx) error { return nil })
	eng := newEngine(t, core.Config{})
	ops := fiberidem.Operations(fiberidem.Config{Engine: eng}, app.GetRoutes(true))
	if ops == nil || len(ops) != 0 {
		t.Fatalf("Operations = %#v, want an empty, non-nil slice", ops)
	}
	app.Post("/orders", func(*fiber.Ctx) error { return nil })
	if documented := injected(t, eng, ops, app.GetRoutes(true)); len(documented) != 0 {
		t.Fatalf("documented %v, want nothing", documented)
	}
}

func TestOperationsNextSeesRoute(t *testing.T) {
	t.Parallel()
	app := fiber.New()
	app.Put("/orders/:id", func(*fiber.Ctx) error { return nil })
	var seen []string
	fiberidem.Operations(fiberidem.Config{Next: func(c *fiber.Ctx) bool {
		seen = append(seen, c.Method()+" "+c.Path()+" "+c.Route().Path)
		return false
	}}, app.GetRoutes(true))
	if want := []string{"PUT /orders/:id /orders/:id"}; !slices.Equal(seen, want) {
		t.Fatalf("Next saw %q, want %q", seen, want)
	}
}

// injected documents ops in a Swagger 2.0 document holding every route and
// returns the "METHOD /path" of the operations that got the key header.
func injected(t *testing.T, eng *core.Engine, ops []swagger.Operation, routes []fiber.Route) map[string]bool {
	rs := make([]swaggertest.Route, len(routes))
	for i, rt := range routes {
		rs[i] = swaggertest.Route{Method: rt.Method, Path: rt.Path}
	}
	return swaggertest.Documented(t, rs, swagger.OptionsFor(eng.Config(), ops...))
}

func ExampleOperations() {
	eng, err := core.New(core.Config{})
	if err != nil {
		log.Fatal(err)
	}
	cfg := fiberidem.Config{Engine: eng}
	app := fiber.New()
	app.Post("/orders", fiberidem.New(cfg), func(*fiber.Ctx) error { return nil })
	app.Get("/orders", func(*fiber.Ctx) error { return nil })
	app.Delete("/orders/:id", fiberidem.New(cfg), func(*fiber.Ctx) error { return nil })

	// After the routes: the covered operations, to document the header on.
	ops := fiberidem.Operations(cfg, app.GetRoutes(true))
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
