package fiberv3idem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/fiberv3idem"
)

// The handler reads the key it runs under from the request's context.
func TestInfoFromContext(t *testing.T) {
	eng, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New()
	var got []string
	app.Post("/orders", fiberv3idem.New(fiberv3idem.Config{Engine: eng}), func(c fiber.Ctx) error {
		info, ok := core.InfoFromContext(c.Context())
		if ok {
			got = append(got, info.Key)
		} else {
			got = append(got, "-")
		}
		return c.SendStatus(http.StatusCreated)
	})
	for _, key := range []string{"info-1", ""} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := app.Test(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(got) != 2 || got[0] != "info-1" || got[1] != "-" {
		t.Fatalf("handlers saw keys %q, want [info-1 -]", got)
	}
}
