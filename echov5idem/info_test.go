package echov5idem_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/echov5idem"
)

// The handler reads the key it runs under from the request's context.
func TestInfoFromContext(t *testing.T) {
	e := echo.New()
	e.Use(echov5idem.New(newEngine(t, core.Config{})))
	var got []string
	e.POST("/orders", func(c *echo.Context) error {
		info, ok := core.InfoFromContext(c.Request().Context())
		if ok {
			got = append(got, info.Key)
		} else {
			got = append(got, "-")
		}
		return c.NoContent(http.StatusCreated)
	})
	send(e, http.MethodPost, "/orders", "info-1")
	send(e, http.MethodPost, "/orders", "")
	if len(got) != 2 || got[0] != "info-1" || got[1] != "-" {
		t.Fatalf("handlers saw keys %q, want [info-1 -]", got)
	}
}
