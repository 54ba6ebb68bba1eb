//go:build integration

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core/idemtest"
	"github.com/idem-go/idem/pgstore"
	"github.com/idem-go/idem/pgstore/pgtest"
)

// TestIntegrationMigrateConcurrent runs Migrate from 8 goroutines at once
// into a schema that does not exist yet, as instances starting together
// would, then again: no error, one version row, the table and its indexes
// under the configured names.
func TestIntegrationMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema + "_new", Table: "my_keys"}
	t.Cleanup(func() { pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE") })
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := pgstore.Migrate(ctx, pool, opts); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var version, rows int
	err := pool.QueryRow(ctx, "SELECT max(version), count(*) FROM "+pgx.Identifier{opts.Schema, pgstore.VersionTable}.Sanitize()+
		" WHERE table_name = 'my_keys'").Scan(&version, &rows)
	if err != nil || version != 4 || rows != 1 {
		t.Fatalf("version %d in %d rows (%v), want 4 in 1", version, rows, err)
	}
	var indexes []string
	r, err := pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'my_keys' ORDER BY 1", opts.Schema)
	if err != nil {
		t.Fatal(err)
	}
	indexes, err = pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"my_keys_expires_at_idx", "my_keys_pkey", "my_keys_processing_idx", "my_keys_quota_scope_idx"}; !slices.Equal(indexes, want) {
		t.Fatalf("indexes %v, want %v", indexes, want)
	}
	r, err = pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'my_keys_steps' ORDER BY 1", opts.Schema)
	if err != nil {
		t.Fatal(err)
	}
	indexes, err = pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil || len(indexes) != 2 || indexes[0] != "my_keys_steps_expires_at_idx" || indexes[1] != "my_keys_steps_pkey" {
		t.Fatalf("indexes of the steps table %v, %v", indexes, err)
	}
	r, err = pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'my_keys_quota' ORDER BY 1", opts.Schema)
	if err != nil {
		t.Fatal(err)
	}
	indexes, err = pgx.CollectRows(r, pgx.RowTo[string])
	if want := []string{"my_keys_quota_pkey", "my_keys_quota_until_idx", "my_keys_quota_window_idx"}; err != nil || !slices.Equal(indexes, want) {
		t.Fatalf("indexes of the quota table %v, %v; want %v", indexes, err, want)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: opts.Schema, Table: "my_keys", JanitorInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, token, err := s.Acquire(ctx, idemtest.Key(t), time.Minute); err != nil || token == "" {
		t.Fatalf("Acquire on the migrated table: %q, %v", token, err)
	}
}

// TestIntegrationMigrateFiles: the plain files, run as they are (the
// default names, in the search_path's schema), make the tables that Migrate
// makes; Migrate on top of them changes nothing, and the down files drop
// them.
func TestIntegrationMigrateFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	files := func(suffix string) []string {
		names, _ := fs.Glob(pgstore.Migrations, "migrations/*"+suffix)
		if suffix == ".down.sql" {
			slices.Reverse(names)
		}
		return names
	}
	for _, name := range files(".up.sql") {
		sql, _ := pgstore.Migrations.ReadFile(name)
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	columns := func() string {
		var s string
		conn.QueryRow(ctx, `SELECT string_agg(table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable, ', '
	ORDER BY table_name, ordinal_position)
FROM information_schema.columns WHERE table_schema = $1 AND table_name IN ($2::text, $2::text || '_steps', $2::text || '_quota')`,
			schema, pgstore.DefaultTable).Scan(&s)
		return s
	}
	fromFile := columns()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if got := columns(); got != fromFile || got == "" {
		t.Fatalf("Migrate changed the columns:\n%s\n%s", fromFile, got)
	}
	for _, name := range files(".down.sql") {
		sql, _ := pgstore.Migrations.ReadFile(name)
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := columns(); got != "" {
		t.Fatalf("the tables are still there after the down files: %s", got)
	}
}

// TestIntegrationMigrateWhileServing upgrades a table from version 2 while
// a request of the transactional mode holds one of its keys, as a rolling
// deploy does: the ALTER TABLE waits for that transaction, and requests
// for other keys, queued behind it, must not wait with it. Migrate gives up
// when its context is done, and succeeds once the request has finished.
func TestIntegrationMigrateWhileServing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema, JanitorInterval: -1}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	downgrade := "DROP TABLE " + pgx.Identifier{schema, "idempotency_keys_quota"}.Sanitize() + "; ALTER TABLE " +
		pgx.Identifier{schema, "idempotency_keys"}.Sanitize() + " DROP COLUMN quota_scope, DROP COLUMN quota_token; UPDATE " +
		pgx.Identifier{schema, pgstore.VersionTable}.Sanitize() + " SET version = 2"
	if _, err := pool.Exec(ctx, downgrade); err != nil {
		t.Fatal(err)
	}
	lease, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	txs, err := pgstore.NewTx(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer txs.Close()
	_, held, err := txs.Begin(ctx, "held", time.Minute) // a handler of the previous release, running
	if err != nil || held == nil {
		t.Fatalf("Begin: %v, %v", held, err)
	}
	defer held.Rollback(ctx) //nolint:errcheck // released below; this is for a failure on the way

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = pgstore.Migrate(short, pool, opts)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Migrate while the table is held, with a deadline: %v; want the deadline's error", err)
	}

	migrated := make(chan error, 1)
	go func() {
		mctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		migrated <- pgstore.Migrate(mctx, pool, opts)
	}()
	waitForWaitingAlter(t, pool, schema)
	for i := range 5 {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, tok, err := lease.Acquire(actx, fmt.Sprint("other", i), 10*time.Second)
		cancel()
		if err != nil || tok == "" {
			t.Fatalf("Acquire of another key while Migrate waits for the table: %q, %v; want a lock", tok, err)
		}
	}
	if err := held.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate after the request finished: %v", err)
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT version FROM "+pgx.Identifier{schema, pgstore.VersionTable}.Sanitize()).Scan(&version); err != nil || version != 4 {
		t.Fatalf("version %d (%v), want 4", version, err)
	}
}

// waitForWaitingAlter returns once a session is seen waiting for a lock
// in an ALTER TABLE of schema's (Migrate's, behind a held key).
func waitForWaitingAlter(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%ALTER TABLE%' AND query LIKE '%' || $1 || '%'`, schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(2 * time.Millisecond) // a real server's state, polled
	}
	t.Fatal("no ALTER TABLE of Migrate's seen waiting for the table")
}

// TestIntegrationMigrateUpToDateWithoutCreate runs Migrate, as an
// application starting does, with a role that may read and write the
// store's tables but create nothing (PostgreSQL 15's default on the public
// schema, or a role that a separate step migrates for): on a schema
// already migrated, it succeeds, running no DDL; on one that needs an
// upgrade, it fails with the missing right.
func TestIntegrationMigrateUpToDateWithoutCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := pgtest.Pool(t)
	opts := &pgstore.Options{Schema: schema}
	if err := pgstore.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	role := pgx.Identifier{schema + "_app"}.Sanitize()
	grants := "CREATE ROLE " + role + " NOLOGIN; GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + role +
		"; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + role
	if _, err := pool.Exec(ctx, grants); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(ctx, "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pgstore.Migrate(mctx, app, opts); err != nil {
		t.Fatalf("Migrate, up to date, by a role that cannot create: %v; want nil", err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, pgstore.VersionTable}.Sanitize()+" SET version = 3"); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.Migrate(mctx, app, opts); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Migrate, an upgrade, by a role that cannot create: %v; want permission denied", err)
	}
}
