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
type adminStatements struct {
	inspect, lockForPurge, purge, unlock, inflight string
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
	}
}

// Inspect implements core.Admin in one statement. LockedAt is the row's
// created_at: when the request took the lock, by PostgreSQL's clock.
func (s *Store) Inspect(ctx context.Context, key string) (core.KeyState, error) {
	var (
		status   string
		record   []byte
		created  time.Time
		expires  time.Time
		sqlQuery = s.adminSQL().inspect
	)
	_, err := s.run(ctx, "inspect", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		return c.QueryRow(ctx, sqlQuery, key).Scan(&status, &record, &created, &expires)
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
// (SELECT … FOR UPDATE), refuses a live lock with core.ErrInFlight, and
// deletes a live record. A request of the key that comes meanwhile waits
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

// Unlock implements core.Admin in one statement.
func (s *Store) Unlock(ctx context.Context, key string) error {
	sqlQuery := s.adminSQL().unlock
	var deleted int64
	_, err := s.run(ctx, "unlock", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		tag, err := c.Exec(ctx, sqlQuery, key)
		deleted = tag.RowsAffected()
		return err
	})
	if err == nil && deleted == 0 {
		return core.ErrNotFound
	}
	return err
}

// InFlight implements core.Admin in one statement, through the index of the
// 'processing' rows; LockedAt is created_at, by PostgreSQL's clock.
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
