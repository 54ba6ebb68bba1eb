package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations holds the SQL files that Migrate runs (migrations/) and those
// of MigrateInbox (migrations/inbox/), in golang-migrate's layout
// (NNNN_name.up.sql, NNNN_name.down.sql), written for the default names:
// the table idempotency_keys (processed_events) in the search_path's
// schema, its indexes idempotency_keys_* (processed_events_*). Teams that
// run their own migration tool may ship these files instead of calling
// Migrate.
//
//go:embed migrations/*.sql migrations/inbox/*.sql
var Migrations embed.FS

// VersionTable records, per table, the last migration Migrate applied.
const VersionTable = "idem_schema_versions"

// migrateLock, with the schema's name, is the advisory lock that serializes
// the migrations of one schema (a lock per schema: a migration stuck behind
// another session's lock holds up no other schema's).
const migrateLock = "idem-go/idem migrate "

// Migrate creates the store's table and indexes, or upgrades them, in the
// schema and under the name of opts (nil means the defaults). It is
// idempotent and safe to run from several instances at once: it runs in
// one transaction under an advisory lock of the schema's, and records the
// version it reached in VersionTable of the same schema, which it creates
// if needed (with the schema). A table already at the last version costs
// the advisory lock, a read of VersionTable and no DDL, so a role with no
// right to create in the schema may call Migrate at every start once a
// role that has it (a separate migration step) migrated.
//
// It is safe to run while other instances serve requests: it waits at
// most 100 ms for each lock (an upgrade that alters the table needs it to
// itself, and the transactional mode holds it while handlers run;
// statements queued behind the waiting migration wait that long too), and
// then starts again, after a pause, until ctx is done: give it a deadline.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts *Options) error {
	if pool == nil {
		return ErrNilPool
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	return migrate(ctx, pool, &o, "migrations", DefaultTable, o.Table)
}

// migrate runs the migrations of dir, written for the table def, for table
// in o.Schema.
func migrate(ctx context.Context, pool *pgxpool.Pool, o *Options, dir, def, table string) error {
	ups, err := upMigrations(Migrations, dir)
	if err != nil {
		return err
	}
	for {
		err = migrateOnce(ctx, pool, o, ups, def, table)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != lockNotAvailable {
			break
		}
		// Another session holds a lock the migration needs: let the
		// statements queued behind it run, then try again.
		t := time.NewTimer(lockWait + rand.N(4*lockWait))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgstore: migrate: %w (waiting for a lock: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// lockWait bounds how long Migrate and MigrateInbox wait for each lock
// before the migration starts again (lock_timeout).
const lockWait = 100 * time.Millisecond

// lockNotAvailable is the SQLSTATE of a statement that waited lock_timeout.
const lockNotAvailable = "55P03"

// migrateOnce runs the migrations of ups past the table's version in one
// transaction.
func migrateOnce(ctx context.Context, pool *pgxpool.Pool, o *Options, ups []migration, def, table string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(lockWait.Milliseconds(), 10)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", migrateLock+o.Schema); err != nil {
			return err
		}
		if done, err := upToDate(ctx, tx, o, ups, table); done || err != nil {
			return err
		}
		if o.Schema != "" {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{o.Schema}.Sanitize()); err != nil {
				return err
			}
		}
		versions := o.ident(VersionTable)
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versions+` (
	table_name text PRIMARY KEY,
	version    integer NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, "SELECT version FROM "+versions+" WHERE table_name = $1", table).Scan(&version)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		applied := version
		for _, m := range ups {
			if m.version <= version {
				continue
			}
			if _, err := tx.Exec(ctx, render(m.sql, o, def, table)); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			applied = m.version
		}
		if applied == version {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+versions+` (table_name, version) VALUES ($1, $2)
ON CONFLICT (table_name) DO UPDATE SET version = EXCLUDED.version, applied_at = now()`, table, applied)
		return err
	})
}

// upToDate reports whether VersionTable says that table has had the last
// of ups. It runs no DDL: a role that may use the store's tables but
// create nothing in the schema or the database (PostgreSQL 15's default
// on the public schema) fails even a CREATE ... IF NOT EXISTS of what
// exists. It reads under the migration's advisory lock, so after any
// migration that ran before: a name looked up before the lock could stay
// cached in the session as missing, and CREATE SCHEMA IF NOT EXISTS then
// conflict with the schema another instance has just created.
func upToDate(ctx context.Context, tx pgx.Tx, o *Options, ups []migration, table string) (bool, error) {
	versions := o.ident(VersionTable)
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", versions).Scan(&exists); err != nil || !exists || len(ups) == 0 {
		return false, err
	}
	var version int
	err := tx.QueryRow(ctx, "SELECT version FROM "+versions+" WHERE table_name = $1", table).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil && version >= ups[len(ups)-1].version, err
}

type migration struct {
	version int
	name    string
	sql     string
}

// upMigrations returns the *.up.sql files of fsys's folder dir in the
// order of their numbers.
func upMigrations(fsys fs.FS, dir string) ([]migration, error) {
	names, err := fs.Glob(fsys, dir+"/*.up.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		num, _, _ := strings.Cut(path.Base(name), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("pgstore: migration %s: no number", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: path.Base(name), sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	return ms, nil
}

// render replaces, in a migration written for the default names, the
// default name of the table, or of another table named after it with a
// suffix (def_steps), by the schema-qualified name on table, and its
// indexes' names (a suffix ending in _idx: def_expires_at_idx) by the same
// suffix on table, which PostgreSQL creates in the table's schema.
func render(sql string, o *Options, def, table string) string {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(def) + `(_\w+)?\b`)
	return re.ReplaceAllStringFunc(sql, func(m string) string {
		if suffix := strings.TrimPrefix(m, def); strings.HasSuffix(suffix, "_idx") {
			return pgx.Identifier{table + suffix}.Sanitize()
		}
		return o.ident(table + strings.TrimPrefix(m, def))
	})
}
