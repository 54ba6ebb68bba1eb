//go:build integration

package ginidem_test

import (
	"testing"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore/pgtest"
	"github.com/idem-go/idem/redislock/redistest"
)

// TestIntegrationHTTPConformance runs the HTTP conformance suite through
// the adapter on the real Redis at IDEM_REDIS_ADDR (default 127.0.0.1:6379),
// each store under a key prefix of its own, and on the PostgreSQL store at
// IDEM_PG_URL (see pgtest), in both its modes, each store in a schema of
// its own; and on the tiered store of that Redis in front of that
// PostgreSQL store, in both its modes.
func TestIntegrationHTTPConformance(t *testing.T) {
	t.Run("Redis", func(t *testing.T) { idemtest.TestHTTP(t, serveGin, redistest.NewStore) })
	t.Run("PostgreSQL", func(t *testing.T) { idemtest.TestHTTP(t, serveGin, pgtest.NewStore) })
	t.Run("PostgreSQLTx", func(t *testing.T) { idemtest.TestHTTP(t, serveGin, pgtest.NewTxStore) })
	t.Run("Tiered", func(t *testing.T) {
		idemtest.TestHTTP(t, serveGin, func(t *testing.T) core.Store { return core.NewTiered(redistest.NewStore(t), pgtest.NewStore(t)) })
	})
	t.Run("TieredTx", func(t *testing.T) {
		idemtest.TestHTTP(t, serveGin, func(t *testing.T) core.Store { return core.NewTiered(redistest.NewStore(t), pgtest.NewTxStore(t)) })
	})
}
