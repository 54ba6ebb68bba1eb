package echov5idem_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/echov5idem"
)

// serveEcho is the Echo v5 harness of the conformance suite: Recover
// outside the idem middleware, as an application installs them, and the
// suite's app on every method at /orders and /orders/:id, on a loopback
// server.
func serveEcho(t *testing.T, eng *core.Engine, app http.Handler) string {
	e := newEcho()
	e.Use(middleware.Recover())
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			c.Response().Header().Set(idemtest.OuterHeader, c.Request().Header.Get(idemtest.OuterHeader))
			return next(c)
		}
	})
	e.Use(echov5idem.New(eng))
	e.Any("/orders", echo.WrapHandler(app))
	e.Any("/orders/:id", echo.WrapHandler(app))
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// newEcho returns an Echo that logs nothing.
func newEcho() *echo.Echo {
	e := echo.New()
	e.Logger = slog.New(slog.DiscardHandler)
	return e
}

func TestHTTPConformance(t *testing.T) {
	idemtest.TestHTTP(t, serveEcho, nil)
}

// TestHTTPConformanceTx runs the suite in the transactional mode's shape
// (Buffered flights), on idemtest's in-memory TxStore.
func TestHTTPConformanceTx(t *testing.T) {
	idemtest.TestHTTP(t, serveEcho, idemtest.NewTxStore)
}
