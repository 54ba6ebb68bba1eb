package pgstore

import (
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	t.Parallel()
	up, err := Migrations.ReadFile("migrations/0001_init.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts        Options
		table, idx  string
		notContains string
	}{
		{Options{Table: DefaultTable}, `CREATE TABLE IF NOT EXISTS "idempotency_keys" (`,
			`CREATE INDEX IF NOT EXISTS "idempotency_keys_expires_at_idx" ON "idempotency_keys" (expires_at)`, "\x00"},
		{Options{Schema: "billing", Table: "keys"}, `CREATE TABLE IF NOT EXISTS "billing"."keys" (`,
			`CREATE INDEX IF NOT EXISTS "keys_processing_idx" ON "billing"."keys" (locked_until)`, "idempotency_keys"},
		{Options{Schema: `we"ird`, Table: "Keys"}, `CREATE TABLE IF NOT EXISTS "we""ird"."Keys" (`,
			`CREATE INDEX IF NOT EXISTS "Keys_expires_at_idx" ON "we""ird"."Keys" (expires_at)`, "idempotency_keys"},
	} {
		got := render(string(up), &tc.opts, DefaultTable, tc.opts.Table)
		if !strings.Contains(got, tc.table) || !strings.Contains(got, tc.idx) || strings.Contains(got, tc.notContains) {
			t.Errorf("render for %+v:\n%s", tc.opts, got)
		}
	}
	// A table named after the store's is schema-qualified like it; its
	// index is not (PostgreSQL creates it in the table's schema).
	steps, err := Migrations.ReadFile("migrations/0002_steps.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	got := render(string(steps), &Options{Schema: "billing", Table: "keys"}, DefaultTable, "keys")
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "billing"."keys_steps" (`,
		`CREATE INDEX IF NOT EXISTS "keys_steps_expires_at_idx" ON "billing"."keys_steps" (expires_at)`, `-- the key of "billing"."keys"`} {
		if !strings.Contains(got, want) {
			t.Errorf("render of 0002_steps lacks %s:\n%s", want, got)
		}
	}
}

func TestUpMigrations(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"migrations", "migrations/inbox"} {
		ms, err := upMigrations(Migrations, dir)
		if err != nil || len(ms) == 0 {
			t.Fatalf("upMigrations(%s): %d, %v", dir, len(ms), err)
		}
		for i, m := range ms {
			if m.version != i+1 || !strings.HasSuffix(m.name, ".up.sql") || m.sql == "" {
				t.Fatalf("%s: migration %d: %+v", dir, i, m)
			}
			down, err := Migrations.ReadFile(dir + "/" + strings.TrimSuffix(m.name, ".up.sql") + ".down.sql")
			if err != nil || len(down) == 0 {
				t.Fatalf("%s/%s has no down file: %v", dir, m.name, err)
			}
		}
	}
}

func TestTokensUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		tok := newToken()
		if seen[tok] {
			t.Fatalf("token %q twice", tok)
		}
		seen[tok] = true
	}
}
