// Package pgtest gives tests a real PostgreSQL for the PostgreSQL store:
// the one at $IDEM_PG_URL (default DefaultURL), shared by many tests at
// once. Every test gets a schema of its own, which its cleanup drops.
//
// An adapter's integration test runs the HTTP conformance suite on it in
// one line:
//
//	idemtest.TestHTTP(t, serve, pgtest.NewStore)
package pgtest

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

// DefaultURL is the test PostgreSQL when IDEM_PG_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// URL returns the test PostgreSQL's URL: $IDEM_PG_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("IDEM_PG_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Ping reports whether the test PostgreSQL answers, for tests that skip
// without it.
func Ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

// Pool returns a pool on the test PostgreSQL and a fresh schema of the
// test's own, created empty. t.Cleanup drops the schema and closes the
// pool. The test fails at once if PostgreSQL does not answer.
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return PoolURL(t, URL())
}

// maxConns bounds a pool of Pool whose URL sets no pool_max_conns:
// pgxpool's default, four on a small machine, is fewer than the
// transactional mode's tests hold at once (a connection per running
// handler, see docs/pgstore.md).
const maxConns = 12

// PoolURL is Pool on the PostgreSQL at url.
func PoolURL(t testing.TB, url string) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", url, err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", url, err)
	}
	schema := "idemtest_" + strings.ToLower(rand.Text())
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		pool.Close()
		t.Fatalf("PostgreSQL at %s (set IDEM_PG_URL): %v", url, err)
	}
	t.Cleanup(func() {
		defer pool.Close()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("cleanup: DROP SCHEMA %s: %v", schema, err)
		}
	})
	return pool, schema
}

// Store returns a pgstore.Store on the test PostgreSQL, migrated into a
// schema of the test's own; opts (nil for the defaults) gets that schema.
// t.Cleanup closes the store, then drops the schema.
func Store(t testing.TB, opts *pgstore.Options) *pgstore.Store {
	t.Helper()
	pool, o := migrated(t, opts)
	s, err := pgstore.New(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TxStore is Store in the transactional mode (pgstore.NewTx).
func TxStore(t testing.TB, opts *pgstore.Options) *pgstore.TxStore {
	t.Helper()
	pool, o := migrated(t, opts)
	s, err := pgstore.NewTx(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// migrated returns a pool and opts with a schema of the test's own, where
// Migrate has run.
func migrated(t testing.TB, opts *pgstore.Options) (*pgxpool.Pool, *pgstore.Options) {
	t.Helper()
	pool, schema := Pool(t)
	o := pgstore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Schema = schema
	if err := pgstore.Migrate(context.Background(), pool, &o); err != nil {
		t.Fatal(err)
	}
	return pool, &o
}

// NewStore is Store with the default options: the newStore of
// idemtest.TestStore and idemtest.TestHTTP.
func NewStore(t *testing.T) core.Store { return Store(t, nil) }

// NewTxStore is TxStore with the default options.
func NewTxStore(t *testing.T) core.Store { return TxStore(t, nil) }
