package redistest_test

import (
	"net/http"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/redislock/redistest"
)

// An adapter runs the HTTP conformance suite on the real Redis in one line
// of its integration test (go test -tags integration).
func ExampleNewStore() {
	var serve idemtest.Serve = func(t *testing.T, eng *core.Engine, app http.Handler) string {
		return "http://127.0.0.1:8080" // the adapter's loopback server
	}
	testIntegration := func(t *testing.T) { idemtest.TestHTTP(t, serve, redistest.NewStore) }
	_ = testIntegration
}
