//go:build integration

package pgstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// seed inserts rows straight into the table: n expired records, n stale
// locks (expired two hours ago), and one of each kind the janitor keeps:
// a live record, a live lock, a lock that expired a minute ago.
func seed(t *testing.T, exec func(string, ...any) error, table, prefix string, n int) {
	t.Helper()
	stmts := []string{
		`INSERT INTO ` + table + ` (key, status, record, completed_at, expires_at)
		 SELECT $2 || 'expired-' || i, 'completed', '\x00', now(), now() - interval '1 second' FROM generate_series(1, $1) i`,
		`INSERT INTO ` + table + ` (key, status, lock_token, locked_until)
		 SELECT $2 || 'stale-' || i, 'processing', 't', now() - interval '2 hours' FROM generate_series(1, $1) i`,
		`INSERT INTO ` + table + ` (key, status, record, completed_at, expires_at)
		 VALUES ($1 || 'live-record', 'completed', '\x00', now(), now() + interval '1 hour')`,
		`INSERT INTO ` + table + ` (key, status, lock_token, locked_until) VALUES ($1 || 'live-lock', 'processing', 't', now() + interval '1 hour')`,
		`INSERT INTO ` + table + ` (key, status, lock_token, locked_until) VALUES ($1 || 'recent-lock', 'processing', 't', now() - interval '1 minute')`,
	}
	for i, s := range stmts {
		var err error
		if i < 2 {
			err = exec(s, n, prefix)
		} else {
			err = exec(s, prefix)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func keys(t *testing.T, q func(string) (pgx.Rows, error), table string) []string {
	t.Helper()
	rows, err := q("SELECT key FROM " + table + " ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestIntegrationSweep: Sweep deletes the expired records, the stale
// locks and the expired checkpoints, in batches, and keeps the rest; a Sweep while another instance
// sweeps (holds the advisory lock) deletes nothing.
func TestIntegrationSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, schema := newStore(t, &pgstore.Options{JanitorInterval: -1, JanitorBatch: 7})
	table := pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()
	exec := func(sql string, args ...any) error { _, err := pool.Exec(ctx, sql, args...); return err }
	seed(t, exec, table, "", 100)
	steps := pgx.Identifier{schema, pgstore.DefaultTable + "_steps"}.Sanitize()
	if err := exec(`INSERT INTO ` + steps + ` (key, step, result, expires_at)
	SELECT 'k', 'expired-' || i, '\x00'::bytea, now() - interval '1 second' FROM generate_series(1, 10) i
	UNION ALL SELECT 'k', 'live', '\x00', now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}

	// Another instance's sweep in progress: its advisory lock.
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var locked bool
	other.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", "idem-go/idem janitor "+table).Scan(&locked)
	if !locked {
		t.Fatal("could not take the janitor's advisory lock")
	}
	if n, err := s.Sweep(ctx); n != 0 || err != nil {
		t.Fatalf("Sweep while another sweeps: %d deleted, %v; want 0", n, err)
	}
	other.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	other.Release()

	n, err := s.Sweep(ctx)
	if err != nil || n != 210 {
		t.Fatalf("Sweep: %d deleted, %v; want 210", n, err)
	}
	q := func(sql string) (pgx.Rows, error) { return pool.Query(ctx, sql) }
	if got := keys(t, q, table); len(got) != 3 || got[0] != "live-lock" || got[1] != "live-record" || got[2] != "recent-lock" {
		t.Fatalf("rows left: %v", got)
	}
	var left string
	if err := pool.QueryRow(ctx, "SELECT string_agg(step, ',') FROM "+steps).Scan(&left); err != nil || left != "live" {
		t.Fatalf("checkpoints left: %q, %v; want the live one", left, err)
	}
}

// TestIntegrationSweepSkipsLockedRows: a row that a live request holds (a
// transaction has it locked) is skipped, not waited for.
func TestIntegrationSweepSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, schema := newStore(t, &pgstore.Options{JanitorInterval: -1, JanitorBatch: 10})
	table := pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()
	exec := func(sql string, args ...any) error { _, err := pool.Exec(ctx, sql, args...); return err }
	seed(t, exec, table, "", 20)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT FROM "+table+" WHERE key IN ('expired-3', 'stale-5') FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	sweepCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, err := s.Sweep(sweepCtx); err != nil || n != 38 {
		t.Fatalf("Sweep: %d deleted, %v; want 38", n, err)
	}
	tx.Rollback(ctx)
	if n, err := s.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep after the transaction: %d deleted, %v; want 2", n, err)
	}
}

// TestIntegrationJanitor: New starts a janitor that sweeps on its
// interval; Close stops it.
func TestIntegrationJanitor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: 20 * time.Millisecond}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()
	exec := func(sql string, args ...any) error { _, err := pool.Exec(ctx, sql, args...); return err }
	s, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, exec, table, "", 50)
	q := func(sql string) (pgx.Rows, error) { return pool.Query(ctx, sql) }
	deadline := time.Now().Add(20 * time.Second)
	for len(keys(t, q, table)) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the janitor left %d rows", len(keys(t, q, table)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Close()
	s.Close() // twice is fine
	// Stopped (Close waits for the janitor): expired rows stay.
	seed(t, exec, table, "again-", 1)
	if got := len(keys(t, q, table)); got != 3+2+3 {
		t.Fatalf("%d rows after Close, want 8", got)
	}
}

// deadlineTracer counts the statements of a connection sent without a
// deadline in their context.
type deadlineTracer struct{ unbounded, all atomic.Int32 }

func (tr *deadlineTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.all.Add(1)
	if _, ok := ctx.Deadline(); !ok {
		tr.unbounded.Add(1)
	}
	return ctx
}

func (*deadlineTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestIntegrationSweepBoundsStatements: Sweep given a context without a
// deadline runs each statement within Options.Timeout, as the Options
// promise, so that a sweep of a cron job cannot hang on a stalled server
// (holding the janitor's advisory lock on its session).
func TestIntegrationSweepBoundsStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := &deadlineTracer{}
	_, s := tracedStore(t, tr, nil)
	tr.all.Store(0)
	tr.unbounded.Store(0)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if all, unbounded := tr.all.Load(), tr.unbounded.Load(); all == 0 || unbounded != 0 {
		t.Fatalf("Sweep(context.Background()) sent %d statements, %d of them without a deadline; want none", all, unbounded)
	}
}
