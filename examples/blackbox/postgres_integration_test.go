//go:build integration

package blackbox

import (
	"context"
	"crypto/rand"
	"net/http"
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

// With DATABASE_URL, what PostgreSQL would refuse is the handler's own 400
// (a NUL in item, a qty over an integer's range), stored and replayed like
// any; and a database error is a 500 with a fixed message, its text (the
// server's types, the request's bytes) in the log only.
func TestExamplesPostgresErrors(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			dbURL := postgresSchema(t)
			s := start(t, build(t, fw), "REDIS_URL=", "DATABASE_URL="+dbURL)
			leaks := func(r result) bool {
				return strings.Contains(string(r.body), "SQLSTATE") || strings.Contains(string(r.body), "OID") ||
					strings.Contains(string(r.body), "idem_example_orders")
			}
			for name, body := range map[string]string{
				"NUL in item":  `{"item": "a\u0000b", "qty": 1}`,
				"qty over int": `{"item": "book", "qty": 99999999999}`,
			} {
				k := newKey(t)
				r := s.post("alice", k, body)
				wantStatus(t, name, r, http.StatusBadRequest)
				if leaks(r) || !strings.Contains(string(r.body), "invalid order") {
					t.Fatalf("%s: %s, want the handler's own 400", name, r.body)
				}
				wantReplay(t, name+" replayed", s.post("alice", k, body), r)
			}
			if n := s.count(); n != 0 {
				t.Fatalf("%d orders, want none", n)
			}

			// The orders' table gone: every query fails.
			conn, err := pgx.Connect(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), "DROP TABLE idem_example_orders"); err != nil {
				t.Fatal(err)
			}
			const internal = `{"error":"internal error"}`
			for _, k := range []string{newKey(t), ""} {
				r := s.post("alice", k, `{"item": "book", "qty": 1}`)
				if r.status != http.StatusInternalServerError || strings.TrimSpace(string(r.body)) != internal {
					t.Fatalf("POST /orders (key %q) without the table: %d %s, want 500 %s", k, r.status, r.body, internal)
				}
			}
			r := s.do(mustRequest(http.MethodGet, s.url+"/orders"))
			if r.status != http.StatusInternalServerError || strings.TrimSpace(string(r.body)) != internal {
				t.Fatalf("GET /orders without the table: %d %s, want 500 %s", r.status, r.body, internal)
			}
		})
	}
}
