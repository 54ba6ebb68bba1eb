package ginidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/ginidem"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(m.Run())
}

// serveGin is the Gin harness of the conformance suite: gin.Recovery
// outside the middleware, the suite's app at /orders and /orders/:id.
func serveGin(t *testing.T, eng *core.Engine, app http.Handler) string {
	r := gin.New()
	outer := func(c *gin.Context) { c.Header(idemtest.OuterHeader, c.GetHeader(idemtest.OuterHeader)) }
	r.Use(gin.RecoveryWithWriter(io.Discard), outer, ginidem.New(eng))
	r.Any("/orders", gin.WrapH(app))
	r.Any("/orders/:id", gin.WrapH(app))
	srv := httptest.NewUnstartedServer(r)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHTTPConformance(t *testing.T) {
	idemtest.TestHTTP(t, serveGin, nil)
}

// TestHTTPConformanceTx runs the suite in the transactional mode's shape
// (Buffered flights), on idemtest's in-memory TxStore.
func TestHTTPConformanceTx(t *testing.T) {
	idemtest.TestHTTP(t, serveGin, idemtest.NewTxStore)
}
