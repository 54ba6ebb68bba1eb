package pgstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// BenchmarkPostgresTx compares, in a database of its own, an order handler
// that inserts a row: bare (no idem, the row in one autocommit: the
// examples' IDEM_OFF=1), lease (idem's lease mode, the row committed apart
// from the record: IDEM_TX=0) and tx (the transactional mode, one commit),
// for first requests and replays. Each case reports commits/op, the
// pg_stat_database.xact_commit delta per request (read-only transactions
// count too), read after the pool's backends exit and flush their counts;
// the measured loop starts on a pool whose connections are open.
func BenchmarkPostgresTx(b *testing.B) {
	if err := pgtest.Ping(); err != nil {
		b.Skipf("no PostgreSQL at %s (set IDEM_PG_URL): %v", pgtest.URL(), err)
	}
	ctx := context.Background()
	dbURL := benchDatabase(b)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	engine := func(s core.Store) *core.Engine {
		eng, err := core.New(core.Config{Store: s, ResponseTTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		return eng
	}
	lease, err := pgstore.New(pool, &pgstore.Options{JanitorInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(lease.Close)
	txs, err := pgstore.NewTx(pool, &pgstore.Options{JanitorInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(txs.Close)
	handler := orderHandler(pool)
	bare, leased, transactional := handler, engine(lease).Middleware(handler), engine(txs).Middleware(handler)
	var fresh atomic.Int64
	first := func(h http.Handler) func(*testing.B) {
		return func(b *testing.B) { serve(b, h, "first-"+strconv.FormatInt(fresh.Add(1), 10)) }
	}
	replay := func(h http.Handler, key string) func(*testing.B) {
		return func(b *testing.B) { serve(b, h, key) }
	}
	cases := []struct {
		name string
		op   func(*testing.B)
	}{
		{"bare", func(b *testing.B) { serve(b, bare, "") }},
		{"first-lease", first(leased)},
		{"first-tx", first(transactional)},
		{"replay-lease", replay(leased, "replay-lease")},
		{"replay-tx", replay(transactional, "replay-tx")},
	}
	commits := func() int64 {
		pool.Reset() // the backends exit and flush their statistics
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		// Reset returns before the backends have exited: wait for them.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var others int
			err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&others)
			if err != nil {
				b.Fatal(err)
			}
			if others == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d backends still up 10s after the pool's reset: their commits are not flushed", others)
			}
		}
		var n int64
		if err := c.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	// warm opens the pool's connections again after commits, so that the
	// measured loop does not open them.
	warm := func() {
		conns := make([]*pgxpool.Conn, 0, cfg.MaxConns)
		for range cfg.MaxConns {
			c, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, tc := range cases {
				b.Run(tc.name, func(b *testing.B) {
					tc.op(b) // a replay's record
					before := commits()
					warm()
					b.ReportAllocs()
					b.ResetTimer()
					if mode == "serial" {
						for range b.N {
							tc.op(b)
						}
					} else {
						b.SetParallelism(4)
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								tc.op(b)
							}
						})
					}
					b.StopTimer()
					// Less the one transaction of the count itself.
					b.ReportMetric(float64(commits()-before-1)/float64(b.N), "commits/op")
				})
			}
		})
	}
}

// orderHandler inserts an order through the request's transaction, if it
// has one, else through pool, and answers 201.
func orderHandler(pool *pgxpool.Pool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var db interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		} = pool
		if tx := pgstore.Tx(r.Context()); tx != nil {
			db = tx
		}
		var id int64
		if err := db.QueryRow(r.Context(), "INSERT INTO orders (item) VALUES ('book') RETURNING id").Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
}

// benchDatabase creates a database of the benchmark's own and returns its
// URL; b.Cleanup drops it.
func benchDatabase(b *testing.B) string {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		b.Fatal(err)
	}
	name := "idem_bench_" + strings.ToLower(rand.Text())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			b.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
