package pgstore

import (
	"context"
	"errors"
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
// transaction commits, only the key's advisory lock: Inspect, Purge and
// Unlock find it through pg_locks (holder), InFlight cannot list it.
type adminStatements struct {
	inspect, lockForPurge, purge, unlock, inflight, holder string
}

func (s *Store) adminSQL() adminStatements {
	t := s.opts.ident(s.opts.Table)
	return adminStatements{
		inspect: `SELECT status, record, created_at, COALESCE(locked_until, expires_at) FROM ` + t + `
WHERE key = $1 AND ((status = 'processing' AND locked_until > now()) OR (status = 'completed' AND expires_at > now()))`,
		lockForPurge: `SELECT status, COALESCE(locked_until, expires_at) > now() FROM ` + t + ` WHERE key = $1 FOR UPDATE`,
		purge:        `DELETE FROM ` + t + ` WHERE key = $1`,
		unlock:       `DELETE FROM ` + t + ` WHERE key = $1 AND status = 'processing' AND locked_until > now()`,
		// Through the partial index on locked_until of the 'processing' rows.
		inflight: `SELECT key, created_at, locked_until FROM ` + t + `
WHERE status = 'processing' AND locked_until > now() ORDER BY created_at, key LIMIT $1`,
		// The session holding the key's advisory lock ($1: keyLock and the
		// key), and since when its transaction runs (NULL when this role
		// may not see it). A bigint advisory lock shows in pg_locks as its
		// high half in classid, its low half in objid, and objsubid 1.
		holder: `SELECT l.pid, a.xact_start FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
AND (l.classid::bigint << 32 | l.objid::bigint) = hashtextextended($1, 0) LIMIT 1`,
	}
}

// holder returns the backend whose transaction holds key's advisory lock
// (the transactional mode's request of key), and since when, or
// pgx.ErrNoRows.
func (s *Store) holder(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) (pid int32, since time.Time, err error) {
	var start *time.Time
	err = q.QueryRow(ctx, s.adminSQL().holder, s.sql.keyLock+key).Scan(&pid, &start)
	if start != nil {
		since = *start
	}
	return pid, since, err
}

// Inspect implements core.Admin in one statement, two for a key without a
// row. LockedAt is the row's created_at: when the request took the lock, by
// PostgreSQL's clock. A key the transactional mode holds is in flight with
// LockedAt its transaction's start and no Expires: it ends with the
// transaction.
func (s *Store) Inspect(ctx context.Context, key string) (core.KeyState, error) {
	var (
		status   string
		record   []byte
		created  time.Time
		expires  time.Time
		sqlQuery = s.adminSQL().inspect
	)
	_, err := s.run(ctx, "inspect", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		err := c.QueryRow(ctx, sqlQuery, key).Scan(&status, &record, &created, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, created, err = s.holder(ctx, c, key); err == nil {
				status, expires = "processing", time.Time{}
			}
		}
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return core.KeyState{}, core.ErrNotFound
	case err != nil:
		return core.KeyState{}, err
	case status == "processing":
		return core.KeyState{Key: key, LockedAt: created, Expires: expires}, nil
	}
	if record == nil {
		record = []byte{}
	}
	return core.KeyState{Key: key, Record: record, Expires: expires}, nil
}

// Purge implements core.Admin in one transaction: it locks the key's row
// (SELECT … FOR UPDATE), refuses a live lock, or a key the transactional
// mode holds, with core.ErrInFlight, and deletes a live record. A request of the key that comes meanwhile waits
// for the transaction, then finds the key free.
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
				result = core.ErrNotFound
				if _, _, err := s.holder(ctx, tx, key); err == nil {
					result = core.ErrInFlight
				} else if !errors.Is(err, pgx.ErrNoRows) {
					return err
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

// Unlock implements core.Admin in one statement: it deletes the lease
// mode's lock. A key that the transactional mode holds is unlocked by
// ending the session that holds it (pg_terminate_backend, which this role
// needs the right to do): its transaction rolls back, so nothing of the
// request's writes stays and its client gets 503, and the key is free once
// PostgreSQL has ended the session.
func (s *Store) Unlock(ctx context.Context, key string) error {
	sqlQuery := s.adminSQL().unlock
	var deleted int64
	_, err := s.run(ctx, "unlock", func(ctx context.Context, c *pgxpool.Conn, again bool) error {
		tag, err := c.Exec(ctx, sqlQuery, key)
		if deleted = tag.RowsAffected(); err != nil || deleted > 0 {
			return err
		}
		pid, _, err := s.holder(ctx, c, key)
		if errors.Is(err, pgx.ErrNoRows) {
			if again {
				deleted = 1 // unlocked by the run whose reply was lost
			}
			return nil
		}
		var ended bool
		if err == nil {
			err = c.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ended)
		}
		if ended {
			deleted = 1
		}
		return err
	})
	if err == nil && deleted == 0 {
		return core.ErrNotFound
	}
	return err
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
