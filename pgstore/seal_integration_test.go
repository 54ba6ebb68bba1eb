//go:build integration

package pgstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// The raw rows of a sealed record hold no body, header value, key or scope
// in clear (nor its status code), and the response replays.
func TestIntegrationSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	plaintexts := idemtest.Sealed(t, store)
	var (
		record []byte
		code   *int32
		n      int
	)
	err = pool.QueryRow(ctx, "SELECT record, status_code, count(*) OVER () FROM "+pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()).
		Scan(&record, &code, &n)
	if err != nil || n != 1 || code != nil || len(record) == 0 {
		t.Fatalf("rows %d, status_code %v, record of %d bytes, %v; want one row, no code", n, code, len(record), err)
	}
	for _, clear := range plaintexts {
		if bytes.Contains(record, []byte(clear)) {
			t.Errorf("the stored record holds %q in clear", clear)
		}
	}
}
