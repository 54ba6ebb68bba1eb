//go:build integration

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

func TestAdmin(t *testing.T) {
	idemtest.TestAdmin(t, pgtest.NewStore)
}

// TestAdminStaleRows: a row whose lock expired (left for the janitor) or
// whose record expired is no key to the admin methods, as to Acquire.
func TestAdminStaleRows(t *testing.T) {
	ctx := context.Background()
	s, pool, schema := newStore(t, nil)
	table := pgx.Identifier{schema, pgstore.DefaultTable}.Sanitize()
	stale, expired := idemtest.Key(t), idemtest.Key(t)
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, status, lock_token, locked_until, created_at)
VALUES ($1, 'processing', 'gone', now() - interval '1 minute', now() - interval '10 minutes')`, stale); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, status, record, created_at, completed_at, expires_at)
VALUES ($1, 'completed', 'r', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day')`, expired); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{stale, expired} {
		if _, err := s.Inspect(ctx, key); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Inspect: %v", err)
		}
		if err := s.Purge(ctx, key); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Purge: %v", err)
		}
		if err := s.Unlock(ctx, key); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Unlock: %v", err)
		}
	}
	if got, err := s.InFlight(ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("InFlight = %+v, %v; want no stale lock", got, err)
	}
}

// sqlTracer records the SQL of every query of a pool.
type sqlTracer struct {
	mu  sync.Mutex
	sql []string
}

func (tr *sqlTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	tr.sql = append(tr.sql, d.SQL)
	tr.mu.Unlock()
	return ctx
}

func (*sqlTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedStore returns a store without a janitor, in a schema of its own,
// on a pool of its own whose connections trace their statements to tr and
// set params.
func tracedStore(t *testing.T, tr pgx.QueryTracer, params map[string]string) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	_, schema := pgtest.Pool(t)
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	maps.Copy(cfg.ConnConfig.RuntimeParams, params)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return pool, s
}

// TestAdminInFlightUsesIndex: the planner can answer InFlight from the
// partial index of the 'processing' rows (with sequential scans off, as on
// a table too large for them).
func TestAdminInFlightUsesIndex(t *testing.T) {
	ctx := context.Background()
	tr := &sqlTracer{}
	pool, s := tracedStore(t, tr, map[string]string{"enable_seqscan": "off"})
	tr.mu.Lock()
	tr.sql = nil
	tr.mu.Unlock()
	if _, err := s.InFlight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	query := tr.sql[len(tr.sql)-1]
	tr.mu.Unlock()
	var plan []string
	rows, err := pool.Query(ctx, "EXPLAIN "+query, 10)
	if err != nil {
		t.Fatal(err)
	}
	plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, pgstore.DefaultTable+"_processing_idx") {
		t.Fatalf("InFlight's plan does not use the processing index:\n%s\n%s", query, p)
	}
}

// newAdminTx returns a Store (idemctl's) and a transactional Store on one
// table of the test's own.
func newAdminTx(t *testing.T) (*pgstore.Store, *pgstore.TxStore) {
	admin, pool, schema := newStore(t, nil)
	txs, err := pgstore.NewTx(pool, &pgstore.Options{Schema: schema, JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txs.Close)
	return admin, txs
}

// TestAdminTxHeldKey: a key that the transactional mode holds has no row,
// only an advisory lock; the admin methods of a Store on the same table
// (idemctl's) see it in flight, refuse to purge it, and do not unlock it
// but name the session holding it; the transaction then commits as usual.
func TestAdminTxHeldKey(t *testing.T) {
	ctx := context.Background()
	admin, txs := newAdminTx(t)
	key := idemtest.Key(t)
	_, tx, err := txs.Begin(ctx, key, time.Minute)
	if err != nil || tx == nil {
		t.Fatalf("Begin: %v, %v", tx, err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck // after a failure: the pool closes only once it ends
	var pid int32
	if err := pgstore.Tx(tx.Context(ctx)).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}

	if st, err := admin.Inspect(ctx, key); err != nil || st.Record != nil || st.Key != key {
		t.Fatalf("Inspect = %+v, %v; want in flight", st, err)
	}
	// Purge says who holds the key: not a lock that Unlock drops, which
	// idemctl and the admin API advise for a bare ErrInFlight.
	if err := admin.Purge(ctx, key); !errors.Is(err, core.ErrInFlight) || !strings.Contains(err.Error(), "transactional mode") {
		t.Fatalf("Purge: %v, want ErrInFlight saying the transactional mode holds the key", err)
	}
	err = admin.Unlock(ctx, key)
	if !errors.Is(err, core.ErrInFlight) || !strings.Contains(err.Error(), fmt.Sprintf("pg_terminate_backend(%d)", pid)) {
		t.Fatalf("Unlock: %v, want ErrInFlight naming session %d", err, pid)
	}
	// Purge took the key's lock only for its own transaction, and Inspect
	// took none: the holder is undisturbed and a second Begin still finds
	// the key in flight.
	if _, _, err := txs.Begin(ctx, key, time.Minute); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("a duplicate's Begin: %v, want ErrInFlight", err)
	}
	if err := tx.Commit(ctx, []byte("record"), time.Hour, false); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if st, err := admin.Inspect(ctx, key); err != nil || string(st.Record) != "record" {
		t.Fatalf("Inspect after the commit = %+v, %v", st, err)
	}
	free := idemtest.Key(t)
	for name, err := range map[string]error{"Purge": admin.Purge(ctx, free), "Unlock": admin.Unlock(ctx, free)} {
		if !errors.Is(err, core.ErrNotFound) {
			t.Errorf("%s of a free key: %v, want ErrNotFound", name, err)
		}
	}
	if _, err := admin.Inspect(ctx, free); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("Inspect of a free key: %v, want ErrNotFound", err)
	}
}

// TestAdminLeavesTheLock: Inspect and Purge never take a key's lock, so a
// request that begins while an operator or the tiered store inspects or
// purges the key is not refused as in flight. The tiered store inspects the
// durable tier for every duplicate that meets the fast tier's lock: a probe
// by trying the key's lock made the first request of a burst of duplicates
// fail too now and then, and nobody ran the key.
func TestAdminLeavesTheLock(t *testing.T) {
	ctx := context.Background()
	admin, txs := newAdminTx(t)
	key := idemtest.Key(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := admin.Inspect(ctx, key); err != nil && !errors.Is(err, core.ErrNotFound) {
					t.Errorf("Inspect: %v", err)
					return
				}
				if err := admin.Purge(ctx, key); err != nil && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrInFlight) {
					t.Errorf("Purge: %v", err)
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)
	for i := range 300 {
		_, tx, err := txs.Begin(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("Begin %d, while the key is inspected and purged: %v", i, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
