package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
)

var _ core.Admin = (*Store)(nil)

// adminStatements are the SQL of core.Admin. A row whose lock or record
// has expired is no key (Acquire takes it over): Inspect, Unlock and Purge
// answer core.ErrNotFound for it, and InFlight leaves it out.
//
// A key that the transactional mode holds has no row until its
// transaction commits, only the key's advisory lock: Inspect and Purge find
// it in pg_locks, never by trying the lock (the tiered store inspects the
// durable tier for every duplicate that meets the fast tier's lock, and a
// lock taken for a moment would refuse a request beginning then as in
// flight); Unlock names its session from pg_locks; InFlight cannot list it.
type adminStatements struct {
	inspect, lockForPurge, heldByTx, purge, unlock, inflight, holder string
}

func (s *Store) adminSQL() adminStatements {
	t := s.opts.ident(s.opts.Table)
	return adminStatements{
		// The key's live row; without one, a row 'processing' with no
		// times if the transactional mode holds the key ($2: keyLock and
		// the key). CASE reads pg_locks only when there is no row.
		inspect: `WITH r AS (SELECT status, record, created_at, COALESCE(locked_until, expires_at) AS until FROM ` + t + `
	WHERE key = $1 AND ((status = 'processing' AND locked_until > now()) OR (status = 'completed' AND expires_at > now())))
SELECT status, record, created_at, until FROM r
UNION ALL
SELECT 'processing', NULL, NULL, NULL
WHERE CASE WHEN EXISTS (SELECT FROM r) THEN false ELSE EXISTS (SELECT FROM pg_locks l WHERE ` + advisoryLock("$2") + `) END`,
		lockForPurge: `SELECT status, COALESCE(locked_until, expires_at) > now() FROM ` + t + ` WHERE key = $1 FOR UPDATE`,
		heldByTx:     `SELECT EXISTS (SELECT FROM pg_locks l WHERE ` + advisoryLock("$1") + `)`,
		purge:        `DELETE FROM ` + t + ` WHERE key = $1`,
		unlock:       `DELETE FROM ` + t + ` WHERE key = $1 AND status = 'processing' AND locked_until > now()`,
		// Through the partial index on locked_until of the 'processing' rows.
		inflight: `SELECT key, created_at, locked_until FROM ` + t + `
WHERE status = 'processing' AND locked_until > now() ORDER BY created_at, key LIMIT $1`,
		// The session holding the key's advisory lock ($1: keyLock and the
		// key), and since when its transaction runs (NULL when this role
		// may not see it).
		holder: `SELECT l.pid, a.xact_start FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE ` + advisoryLock("$1") + ` LIMIT 1`,
	}
}

// advisoryLock is the condition on pg_locks l of the granted advisory lock
// of the bigint hashtextextended(param, 0) in this database: such a lock
// shows as its high half in classid, its low half in objid, and objsubid 1.
// pg_locks is a snapshot of the lock table, read without taking the lock.
func advisoryLock(param string) string {
	return `l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND (l.classid::bigint << 32 | l.objid::bigint) = hashtextextended(` + param + `, 0)`
}

// Inspect implements core.Admin in one statement. LockedAt is the row's
// created_at: when the request took the lock, by PostgreSQL's clock. A key
// the transactional mode holds is in flight with neither LockedAt nor
// Expires: it ends with its transaction.
func (s *Store) Inspect(ctx context.Context, key string) (core.KeyState, error) {
	var (
		status   string
		record   []byte
		created  *time.Time
		expires  *time.Time
		sqlQuery = s.adminSQL().inspect
	)
	_, err := s.run(ctx, "inspect", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		return c.QueryRow(ctx, sqlQuery, key, s.sql.keyLock+key).Scan(&status, &record, &created, &expires)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return core.KeyState{}, core.ErrNotFound
	case err != nil:
		return core.KeyState{}, err
	}
	var st core.KeyState
	st.Key = key
	if expires != nil {
		st.Expires = *expires
	}
	if status == "processing" {
		if created != nil {
			st.LockedAt = *created
		}
		return st, nil
	}
	st.Record = record
	if st.Record == nil {
		st.Record = []byte{}
	}
	return st, nil
}

// Purge implements core.Admin in one transaction: it locks the key's row
// (SELECT … FOR UPDATE), refuses a live lock, or a key the transactional
// mode holds, with core.ErrInFlight, and deletes a live record. A request
// of the key that comes meanwhile waits for the transaction, then finds the
// key free.
func (s *Store) Purge(ctx context.Context, key string) error {
	sql := s.adminSQL()
	var result error
	_, err := s.run(ctx, "purge", func(ctx context.Context, c *pgxpool.Conn, again bool) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			var (
				status string
				live   bool
			)
			err := tx.QueryRow(ctx, sql.lockForPurge, key).Scan(&status, &live)
			switch {
			case errors.Is(err, pgx.ErrNoRows) && again:
				result = nil // deleted by the run whose reply was lost
				return nil
			case errors.Is(err, pgx.ErrNoRows), err == nil && !live:
				var held bool // by the transactional mode
				if err := tx.QueryRow(ctx, sql.heldByTx, s.sql.keyLock+key).Scan(&held); err != nil {
					return err
				}
				result = core.ErrNotFound
				if held {
					result = errTxHeld
				}
				return nil
			case err != nil:
				return err
			case status == "processing":
				result = core.ErrInFlight
				return nil
			}
			result = nil
			if _, err = tx.Exec(ctx, sql.purge, key); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.purgeChannel(), key) // SetInvalidate's listeners, on commit
			return err
		})
	})
	if err != nil {
		return err
	}
	return result
}

// errTxHeld is Purge's answer for a key that the transactional mode holds:
// Unlock does not end it (it names the session that does).
var errTxHeld = fmt.Errorf("%w: held by the transactional mode until its transaction ends (unlock names its PostgreSQL session)", core.ErrInFlight)

// Unlock implements core.Admin: it deletes the lease mode's lock in one
// statement. A key that the transactional mode holds goes with its
// transaction and is not ended: for it (a second statement) Unlock returns
// an error wrapping core.ErrInFlight that names the session holding it,
// which `SELECT pg_terminate_backend(pid)` ends.
func (s *Store) Unlock(ctx context.Context, key string) error {
	sql := s.adminSQL()
	var (
		deleted int64
		pid     int32
		since   *time.Time
	)
	_, err := s.run(ctx, "unlock", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		tag, err := c.Exec(ctx, sql.unlock, key)
		if deleted = tag.RowsAffected(); err != nil || deleted > 0 {
			return err
		}
		return c.QueryRow(ctx, sql.holder, s.sql.keyLock+key).Scan(&pid, &since)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return core.ErrNotFound
	case err != nil || deleted > 0:
		return err
	}
	at := ""
	if since != nil {
		at = ", in a transaction begun " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("%w: held by the transactional mode in PostgreSQL session %d%s, until that transaction ends "+
		"(SELECT pg_terminate_backend(%d) ends it now, rolling back the request's writes)", core.ErrInFlight, pid, at, pid)
}

// InFlight implements core.Admin in one statement, through the index of the
// 'processing' rows; LockedAt is created_at, by PostgreSQL's clock. It lists
// the lease mode's locks: a key that the transactional mode holds has no
// row before its commit (pg_stat_activity shows its transaction).
func (s *Store) InFlight(ctx context.Context, limit int) ([]core.KeyState, error) {
	if limit <= 0 {
		return nil, nil
	}
	sqlQuery := s.adminSQL().inflight
	var out []core.KeyState
	_, err := s.run(ctx, "inflight", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		rows, err := c.Query(ctx, sqlQuery, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.KeyState, error) {
			var st core.KeyState
			err := row.Scan(&st.Key, &st.LockedAt, &st.Expires)
			return st, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
