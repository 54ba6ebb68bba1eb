package fiberv3idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v3"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/fiberv3idem"
)

// TestRouteTemplate pins the route template that reaches the Engine for
// every way of mounting the middleware. It rests on Fiber's public
// c.Matched(), false while only Use routes have matched: if a Fiber release
// changes that, this test fails.
func TestRouteTemplate(t *testing.T) {
	t.Parallel()
	h := func(c fiber.Ctx) error { return c.Status(fiber.StatusCreated).SendString("created") }
	for _, tc := range []struct {
		name  string
		mount func(app *fiber.App, idem fiber.Handler)
		path  string
		want  string // Event.Route
	}{
		{"on the route", func(app *fiber.App, idem fiber.Handler) {
			app.Use(func(c fiber.Ctx) error { return c.Next() }) // a Use middleware before it
			app.Post("/orders/:id", idem, h)
		}, "/orders/7", "/orders/:id"},
		{"on the route, with a trailing slash and another case", func(app *fiber.App, idem fiber.Handler) {
			app.Post("/orders/:id", idem, h)
		}, "/Orders/7/", "/orders/:id"},
		{"on a route without parameters, with a trailing slash", func(app *fiber.App, idem fiber.Handler) {
			app.Post("/orders", idem, h)
		}, "/orders/", "/orders"},
		{"on a group's route", func(app *fiber.App, idem fiber.Handler) {
			app.Group("/api").Post("/orders/:id", idem, h)
		}, "/api/orders/7", "/api/orders/:id"},
		{"on a mounted app's route", func(app *fiber.App, idem fiber.Handler) {
			sub := fiber.New()
			sub.Post("/orders/:id", idem, h)
			app.Use("/sub", sub)
		}, "/sub/orders/7", "/sub/orders/:id"},
		{"app.Use: unknown", func(app *fiber.App, idem fiber.Handler) {
			app.Use(idem)
			app.Post("/orders/:id", h)
		}, "/orders/7", "unmatched"},
		{"app.Use with a prefix: unknown", func(app *fiber.App, idem fiber.Handler) {
			app.Use("/orders", idem)
			app.Post("/orders/:id", h)
		}, "/orders/7", "unmatched"},
		{"a group's middleware: unknown", func(app *fiber.App, idem fiber.Handler) {
			app.Group("/api", idem).Post("/orders/:id", h)
		}, "/api/orders/7", "unmatched"},
		{"app.Use after a route whose handler calls c.Next: unknown", func(app *fiber.App, idem fiber.Handler) {
			app.Post("/orders/:id", func(c fiber.Ctx) error { return c.Next() })
			app.Use("/orders", idem, h)
		}, "/orders/7", "unmatched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var routes []string
			eng := newEngine(t, core.Config{Observer: func(e core.Event) {
				mu.Lock()
				routes = append(routes, e.Route)
				mu.Unlock()
			}})
			app := fiber.New()
			tc.mount(app, fiberv3idem.New(fiberv3idem.Config{Engine: eng}))
			req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(order))
			req.Header.Set("Idempotency-Key", "route-1")
			resp, err := app.Test(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != fiber.StatusCreated || len(routes) != 1 || routes[0] != tc.want {
				t.Fatalf("%d, routes %q; want 201 and %q", resp.StatusCode, routes, tc.want)
			}
		})
	}
}

// Under app.Use the path is the route, and a URL no route matches gets
// Fiber's 404, not stored: the key stays free for the right URL.
func TestUseUnroutedNotStored(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New()
	app.Use(fiberv3idem.New(fiberv3idem.Config{Engine: newEngine(t, core.Config{})}))
	app.Post("/orders/:id", func(c fiber.Ctx) error {
		runs.Add(1)
		return c.Status(201).SendString("created")
	})
	app.Put("/items/:id", func(c fiber.Ctx) error { return c.SendStatus(204) })
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders/1", order, "Idempotency-Key", "use-1"), 201, "created", false)
	want(t, c.post("/orders/1", order, "Idempotency-Key", "use-1"), 201, "created", true)
	if r := c.post("/orders/2", order, "Idempotency-Key", "use-1"); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("another path under app.Use: %d %s, want 422 (the path is the route)", r.status, r.body)
	}
	for path, status := range map[string]int{"/orderz": http.StatusNotFound, "/items/1": http.StatusMethodNotAllowed} {
		for range 2 {
			if r := c.post(path, order, "Idempotency-Key", "use-2"); r.status != status || r.header.Get(core.HeaderReplay) != "" {
				t.Fatalf("%s: %d replay %q %s, want Fiber's %d", path, r.status, r.header.Get(core.HeaderReplay), r.body, status)
			}
		}
	}
	want(t, c.post("/orders/3", order, "Idempotency-Key", "use-2"), 201, "created", false)
	wantRuns(t, &runs, 2)
}

// A handler that routes the request again (c.RestartRouting) sends it
// through the middleware under app.Use a second time: that pass lets it
// through, and the first stores the answer, replayed on a retry. (It found
// the first pass's lock and answered 409, which the first stored.)
func TestRestartRouting(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	app := fiber.New()
	app.Use(fiberv3idem.New(fiberv3idem.Config{Engine: newEngine(t, core.Config{})}))
	app.Post("/orders/legacy", func(c fiber.Ctx) error {
		c.Path("/orders")
		return c.RestartRouting()
	})
	app.Post("/orders", func(c fiber.Ctx) error {
		runs.Add(1)
		return c.Status(201).SendString("created")
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders/legacy", order, "Idempotency-Key", "restart-1"), 201, "created", false)
	want(t, c.post("/orders/legacy", order, "Idempotency-Key", "restart-1"), 201, "created", true)
	wantRuns(t, &runs, 1)
}

// A route whose own middleware has an Engine of its own, under app.Use's
// of another, is protected by both: the route's Engine holds the key too,
// and its handler runs under it (its Scope, a TxStore's transaction).
func TestTwoEngines(t *testing.T) {
	t.Parallel()
	app := fiber.New()
	app.Use(fiberv3idem.New(fiberv3idem.Config{Engine: newEngine(t, core.Config{})}))
	inner := newEngine(t, core.Config{Scope: func(*core.Request) string { return "inner" }})
	app.Post("/orders", fiberv3idem.New(fiberv3idem.Config{Engine: inner}), func(c fiber.Ctx) error {
		info, _ := core.InfoFromContext(c.Context())
		return c.Status(201).SendString("scope " + info.Scope)
	})
	c := newClient(t, listen(t, app))
	want(t, c.post("/orders", order, "Idempotency-Key", "two-1"), 201, "scope inner", false)
}

// A request whose context the app set from one that carries a key of its
// own (here core.Do's, on the same Engine) is protected all the same.
func TestLeasedContext(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	eng := newEngine(t, core.Config{})
	var leased context.Context
	app := fiber.New()
	app.Use(func(c fiber.Ctx) error {
		c.SetContext(leased)
		return c.Next()
	}, fiberv3idem.New(fiberv3idem.Config{Engine: eng}))
	app.Post("/orders", func(c fiber.Ctx) error {
		runs.Add(1)
		return c.Status(201).SendString("created")
	})
	c := newClient(t, listen(t, app))
	_, _, err := core.Do(context.Background(), eng, "", "job-1", func(ctx context.Context) (int, error) {
		leased = ctx
		want(t, c.post("/orders", order, "Idempotency-Key", "leased-1"), 201, "created", false)
		want(t, c.post("/orders", order, "Idempotency-Key", "leased-1"), 201, "created", true)
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRuns(t, &runs, 1)
}
