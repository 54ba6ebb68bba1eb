package echoidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/echoidem"
)

// serveEcho is the Echo harness of the conformance suite: Recover outside
// the idem middleware, as an application installs them, and the suite's
// app on every method at /orders and /orders/:id, on a loopback server.
func serveEcho(t *testing.T, eng *core.Engine, app http.Handler) string {
	e := newEcho()
	e.Use(middleware.Recover())
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set(idemtest.OuterHeader, c.Request().Header.Get(idemtest.OuterHeader))
			return next(c)
		}
	})
	e.Use(echoidem.New(eng))
	e.Any("/orders", echo.WrapHandler(app))
	e.Any("/orders/:id", echo.WrapHandler(app))
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// newEcho returns a quiet Echo: no banner, no log of recovered panics.
func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
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
