//go:build integration

package pgstore_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore/pgtest"
)

func TestIntegrationConformance(t *testing.T) {
	idemtest.TestStore(t, pgtest.NewStore)
}

// TestIntegrationQuota runs the quota suite: 200 concurrent new keys of one
// scope, of which exactly the bound are admitted, on a real PostgreSQL.
func TestIntegrationQuota(t *testing.T) {
	idemtest.TestQuota(t, pgtest.NewStore)
}

// TestIntegrationLease runs the conformance suite of core's
// transport-neutral layer on the PostgreSQL store.
func TestIntegrationLease(t *testing.T) {
	idemtest.TestLease(t, pgtest.NewStore)
}

// TestIntegrationHTTP runs the HTTP conformance suite through
// core.Engine.Middleware on the PostgreSQL store.
func TestIntegrationHTTP(t *testing.T) {
	idemtest.TestHTTP(t, serveMux, pgtest.NewStore)
}

// TestIntegrationTx runs the lease and HTTP conformance suites on the
// transactional mode.
func TestIntegrationTx(t *testing.T) {
	t.Run("Lease", func(t *testing.T) { idemtest.TestLease(t, pgtest.NewTxStore) })
	t.Run("Quota", func(t *testing.T) { idemtest.TestQuota(t, pgtest.NewTxStore) })
	t.Run("HTTP", func(t *testing.T) { idemtest.TestHTTP(t, serveMux, pgtest.NewTxStore) })
}

// serveMux is the net/http harness of the HTTP conformance suite.
func serveMux(t *testing.T, eng *core.Engine, app http.Handler) string {
	mux := http.NewServeMux()
	mux.Handle("/orders", eng.Middleware(app))
	mux.Handle("/orders/{id}", eng.Middleware(app))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idemtest.OuterHeader, r.Header.Get(idemtest.OuterHeader))
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		mux.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
