//go:build integration

package echov5idem_test

import (
	"testing"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore/pgtest"
	"github.com/idem-go/idem/redislock/redistest"
)

// TestIntegrationHTTPConformance runs the HTTP conformance suite through
// the adapter on the real Redis at IDEM_REDIS_ADDR (default 127.0.0.1:6379),
// each store under a key prefix of its own, and on the PostgreSQL store at
// IDEM_PG_URL (see pgtest), in both its modes, each store in a schema of
// its own.
func TestIntegrationHTTPConformance(t *testing.T) {
	t.Run("Redis", func(t *testing.T) { idemtest.TestHTTP(t, serveEcho, redistest.NewStore) })
	t.Run("PostgreSQL", func(t *testing.T) { idemtest.TestHTTP(t, serveEcho, pgtest.NewStore) })
	t.Run("PostgreSQLTx", func(t *testing.T) { idemtest.TestHTTP(t, serveEcho, pgtest.NewTxStore) })
}
