//go:build integration

package blackbox

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// postgresURL is the test PostgreSQL: $IDEM_PG_URL, or the machine's.
func postgresURL() string {
	if u := os.Getenv("IDEM_PG_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// postgresSchema creates a schema of the test's own, dropped after it, and
// returns a DATABASE_URL whose connections use it (search_path): the
// examples create their tables, idem's and the orders', there.
func postgresSchema(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", postgresURL(), err)
	}
	schema := "idemtest_" + strings.ToLower(rand.Text())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("cleanup: DROP SCHEMA %s: %v", schema, err)
		}
	})
	sep := "?"
	if strings.Contains(postgresURL(), "?") {
		sep = "&"
	}
	return postgresURL() + sep + "search_path=" + schema
}

// TestExamplesPostgres starts two instances of each example on one
// PostgreSQL database (DATABASE_URL, no REDIS_URL): idempotency records and
// orders are shared, so duplicates spread over both create one order per
// key, and a key sent to one instance replays on the other.
func TestExamplesPostgres(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			dbURL := postgresSchema(t)
			bin := build(t, fw)
			servers := []*server{
				start(t, bin, "REDIS_URL=", "DATABASE_URL="+dbURL),
				start(t, bin, "REDIS_URL=", "DATABASE_URL="+dbURL),
			}
			const keys, dups = 10, 16
			for range keys {
				results := concurrently(t, servers, dups, newKey(t), `{"item": "lamp", "qty": 1, "delay_ms": 50}`)
				checkDuplicates(t, results)
			}
			for i, s := range servers {
				if got := s.count(); got != keys {
					t.Fatalf("instance %d sees %d orders, want %d (one per key)", i, got, keys)
				}
			}
			// A key sent to one instance runs once; the other replays it.
			key := newKey(t)
			first := servers[0].post("erin", key, `{"item": "mug", "qty": 3}`)
			wantStatus(t, "first request", first, 201)
			wantReplay(t, "the same key on the other instance", servers[1].post("erin", key, `{"item": "mug", "qty": 3}`), first)
			if got := servers[1].count(); got != keys+1 {
				t.Fatalf("%d orders after the replay, want %d", got, keys+1)
			}
			// The whole contract holds on a PostgreSQL-backed instance.
			testContract(t, servers[1])
		})
	}
}
