package pgstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// BenchmarkPostgres needs the PostgreSQL of pgtest.URL (IDEM_PG_URL), in
// a schema of its own that it drops afterwards; without one it skips.
// Serially (latency) and in parallel (GOMAXPROCS×4 goroutines:
// throughput): Bare is the handler without the middleware, RawSelect one
// "SELECT 1" round trip of the pool, NoKey the handler behind the
// middleware without a key, First a fresh key per request (two
// statements), Replay one key (one statement).
func BenchmarkPostgres(b *testing.B) {
	if err := pgtest.Ping(); err != nil {
		b.Skipf("no PostgreSQL at %s (set IDEM_PG_URL): %v", pgtest.URL(), err)
	}
	ctx := context.Background()
	admin, schema := pgtest.Pool(b)
	if err := pgstore.Migrate(ctx, admin, &pgstore.Options{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store, err := pgstore.New(pool, &pgstore.Options{Schema: schema, JanitorInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	eng, err := core.New(core.Config{Store: store, ResponseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	protected := eng.Middleware(benchHandler())
	bare := benchHandler()
	var fresh atomic.Int64
	cases := []struct {
		name string
		op   func(b *testing.B)
	}{
		{"bare", func(b *testing.B) { serve(b, bare, "") }},
		{"raw-select", func(b *testing.B) {
			var one int
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				b.Error(err)
			}
		}},
		{"no-key", func(b *testing.B) { serve(b, protected, "") }},
		{"first-run", func(b *testing.B) { serve(b, protected, "first-"+strconv.FormatInt(fresh.Add(1), 10)) }},
		{"replay", func(b *testing.B) { serve(b, protected, "replay") }},
	}
	b.Run("serial", func(b *testing.B) {
		for _, tc := range cases {
			b.Run(tc.name, func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					tc.op(b)
				}
			})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for _, tc := range cases {
			b.Run(tc.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						tc.op(b)
					}
				})
			})
		}
	})
}

var benchBody = []byte(`{"id":"ord_1","item":"book","qty":2}`)

func benchHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(benchBody)
	})
}

// serve runs one POST through h; a key of "" sends none.
func serve(b *testing.B, h http.Handler, key string) {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book","qty":2}`))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		b.Errorf("status %d: %s", w.Code, w.Body)
	}
}
