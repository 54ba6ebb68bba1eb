// Command janitorload measures what the janitor costs live requests: p99
// latency of concurrent requests through core.Engine.Middleware on the
// PostgreSQL store while Sweep deletes a million expired rows, as a ratio
// to the same load on the same table without it.
//
//	go run ./internal/janitorload -database postgres://postgres@127.0.0.1:5432/test -rows 1000000
//
// It works in a schema of its own, dropped at the end: it fills the table
// with -rows expired records, runs the load for -duration (the baseline),
// then runs it again while one Sweep deletes them (at most -max), and
// prints both phases' latencies and the sweep's rate.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/pgstore"
)

func main() {
	def := os.Getenv("DATABASE_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	dbURL := flag.String("database", def, "PostgreSQL URL (default $DATABASE_URL)")
	rows := flag.Int("rows", 1_000_000, "expired rows to delete")
	batch := flag.Int("batch", pgstore.DefaultJanitorBatch, "rows per DELETE (Options.JanitorBatch)")
	workers := flag.Int("workers", 16, "concurrent requests")
	duration := flag.Duration("duration", 10*time.Second, "length of the baseline phase")
	maxSweep := flag.Duration("max", 2*time.Minute, "longest the sweep phase may run")
	flag.Parse()
	if err := run(*dbURL, *rows, *batch, *workers, *duration, *maxSweep); err != nil {
		log.Fatal(err)
	}
}

func run(dbURL string, rows, batch, workers int, duration, maxSweep time.Duration) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	if h := cfg.ConnConfig.Host; h != "127.0.0.1" && h != "localhost" && !strings.HasPrefix(h, "/") {
		return fmt.Errorf("host %q: the load test runs against a loopback PostgreSQL only", h)
	}
	cfg.MaxConns = int32(workers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	schema := "idemload_" + strings.ToLower(rand.Text())
	defer pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1, JanitorBatch: batch}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		return err
	}
	store, err := pgstore.New(pool, opts)
	if err != nil {
		return err
	}
	defer store.Close()
	table := pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()

	start := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, status, lock_token, record, status_code, created_at, completed_at, expires_at)
SELECT md5(i::text) || md5((-i)::text), 'completed', 't', decode(repeat('ab', 300), 'hex'), 201,
	now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
FROM generate_series(1, $1) i`, rows); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return err
	}
	fmt.Printf("janitor load test: %d expired rows (inserted in %v), %d concurrent requests, batches of %d, GOMAXPROCS from the machine\n",
		rows, time.Since(start).Round(time.Millisecond), workers, batch)

	eng, err := core.New(core.Config{Store: store, ResponseTTL: time.Hour})
	if err != nil {
		return err
	}
	h := eng.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ord_1","item":"book","qty":2}`))
	}))
	var phase atomic.Int64
	// load sends requests from workers until stop closes: each worker a
	// fresh key (lock, handler, record), then its replay.
	load := func(stop <-chan struct{}) ([]time.Duration, int64) {
		p := phase.Add(1)
		var (
			mu     sync.Mutex
			lat    []time.Duration
			failed atomic.Int64
			wg     sync.WaitGroup
		)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for i := 0; ; i++ {
					select {
					case <-stop:
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
						return
					default:
					}
					key := fmt.Sprintf("p%d-w%d-%d", p, w, i/2)
					r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book","qty":2}`))
					r.Header.Set("Content-Type", "application/json")
					r.Header.Set("Idempotency-Key", key)
					rec := httptest.NewRecorder()
					t0 := time.Now()
					h.ServeHTTP(rec, r)
					mine = append(mine, time.Since(t0))
					if rec.Code != http.StatusCreated {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return lat, failed.Load()
	}

	// Baseline.
	stop := make(chan struct{})
	time.AfterFunc(duration, func() { close(stop) })
	base, baseFailed := load(stop)

	// The same load while one Sweep deletes the rows.
	stop = make(chan struct{})
	var (
		deleted  int64
		sweepErr error
		took     time.Duration
	)
	sweepCtx, cancel := context.WithTimeout(ctx, maxSweep)
	defer cancel()
	go func() {
		defer close(stop)
		t0 := time.Now()
		deleted, sweepErr = store.Sweep(sweepCtx)
		took = time.Since(t0)
	}()
	during, duringFailed := load(stop)
	if sweepErr != nil {
		return fmt.Errorf("sweep: %w (%d rows deleted)", sweepErr, deleted)
	}

	fmt.Printf("\n%-22s %9s %9s %9s %9s %9s\n", "phase", "requests", "req/s", "p50", "p99", "p99.9")
	b := report("no janitor", base, duration)
	d := report("janitor sweeping", during, took)
	fmt.Printf("\nsweep: %d rows deleted in %v (%.0f rows/s)\n", deleted, took.Round(time.Millisecond), float64(deleted)/took.Seconds())
	fmt.Printf("p99 while sweeping / p99 without: %.2fx; p50: %.2fx; throughput: %.2fx\n",
		float64(d.p99)/float64(b.p99), float64(d.p50)/float64(b.p50), d.rps/b.rps)
	if baseFailed+duringFailed > 0 {
		return fmt.Errorf("%d requests without a 201", baseFailed+duringFailed)
	}
	if deleted != int64(rows) {
		return fmt.Errorf("the sweep deleted %d rows, want %d", deleted, rows)
	}
	return nil
}

type stats struct {
	p50, p99 time.Duration
	rps      float64
}

func report(name string, lat []time.Duration, d time.Duration) stats {
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[int(f*float64(len(lat)-1))] }
	s := stats{p50: q(0.50), p99: q(0.99), rps: float64(len(lat)) / d.Seconds()}
	fmt.Printf("%-22s %9d %9.0f %9s %9s %9s\n", name, len(lat), s.rps, round(s.p50), round(s.p99), round(q(0.999)))
	return s
}

func round(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + "ms"
}
