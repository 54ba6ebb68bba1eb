//go:build integration

package pgstore_test

import (
	"context"
	"io/fs"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	if err != nil || version != 3 || rows != 1 {
		t.Fatalf("version %d in %d rows (%v), want 3 in 1", version, rows, err)
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
	if want := []string{"my_keys_quota_pkey", "my_keys_quota_until_idx"}; err != nil || !slices.Equal(indexes, want) {
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
