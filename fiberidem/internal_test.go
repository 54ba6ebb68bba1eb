package fiberidem

import (
	"bufio"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/idem-go/idem/internal/httpadapt"
)

// TestUseFieldFound fails if a Fiber upgrade renamed Route's "use" flag:
// the middleware would still work, on the slower public fallback.
func TestUseFieldFound(t *testing.T) {
	if useField == nil {
		t.Fatal(`fiber.Route has no bool field "use" any more: routeTemplate falls back to fiber.RoutePatternMatch`)
	}
}

// TestRouteTemplate checks routeTemplate with the "use" flag and with the
// public fallback. Not parallel: it swaps useField.
func TestRouteTemplate(t *testing.T) {
	saved := useField
	defer func() { useField = saved }()
	for _, flag := range []bool{true, false} {
		if !flag {
			useField = nil
		}
		var got []string
		record := func(c *fiber.Ctx) error {
			got = append(got, routeTemplate(c))
			return c.Next()
		}
		app := fiber.New()
		app.Use(record)                // the Use route "/": no template
		app.Use("/orders", record)     // the Use route "/orders": no template
		g := app.Group("/api", record) // a Group's Use route: no template
		app.Post("/orders/:id", record, func(c *fiber.Ctx) error { return nil })
		g.Post("/orders/:id", record, func(c *fiber.Ctx) error { return nil })
		for _, path := range []string{"/orders/7", "/api/orders/8", "/orders/9/"} { // a trailing slash routes as without
			if _, err := app.Test(httptest.NewRequest("POST", path, nil)); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"", "", "/orders/:id", "", "", "/api/orders/:id", "", "", "/orders/:id"}
		if len(got) != len(want) {
			t.Fatalf("flag %v: templates %q, want %q", flag, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("flag %v: templates %q, want %q", flag, got, want)
			}
		}
	}
}

// FastHeaders' two views of fasthttp's request headers, the one Keyed reads
// and the one Begin reads, agree on whether a header is there, with this
// module's fasthttp.
func TestFastHeadersAgree(t *testing.T) {
	for name, raw := range map[string]string{
		"absent":     "",
		"empty":      "Idempotency-Key: \r\n",
		"one":        "Idempotency-Key: k\r\n",
		"repeated":   "Idempotency-Key: a\r\nIdempotency-Key: b\r\n",
		"lower case": "idempotency-key: k\r\n",
	} {
		var h fasthttp.RequestHeader
		if err := h.Read(bufio.NewReader(strings.NewReader("POST / HTTP/1.1\r\nHost: x\r\n" + raw + "\r\n"))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		header, keyed := httpadapt.FastHeaders(&h, false)
		if p, r := keyed.Values("Idempotency-Key") != nil, header.Values("Idempotency-Key") != nil; p != r || p != (raw != "") {
			t.Errorf("%s: Keyed's view says present=%v, Begin's %v", name, p, r)
		}
	}
}
