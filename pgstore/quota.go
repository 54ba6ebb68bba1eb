package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
)

// quotaStatements are the SQL of core.Config.Quota.
type quotaStatements struct {
	lock, admit, sweep string
	// TxStore's: a slot of the scope's in flight; a completed record; an
	// admission taken back
	slot, record, unadmit string
	lockID, slotID        string // with the scope, its advisory locks
}

func buildQuotaStatements(o *Options) quotaStatements {
	t, tq := o.ident(o.Table), o.ident(o.Table+"_quota")
	return quotaStatements{
		lock: `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		// Under the scope's advisory lock, in a snapshot taken after it:
		// counts the scope's admitted live locks but $2's and its
		// admissions in the window but $3's (a run again after a lost
		// reply), each up to its bound and the window's from the oldest
		// on (docs/design.md, Quotas), then admits $2's lock of token $3
		// ($4 InFlight, $5 PerWindow, $6 Window), or deletes it.
		admit: `WITH inflight AS (
	SELECT count(*) AS n FROM (SELECT FROM ` + t + `
	WHERE quota_scope = $1 AND status = 'processing' AND locked_until > now() AND quota_token = lock_token AND key <> $2
	LIMIT $4) l
), win AS (
	SELECT count(*) AS n, min(until) AS oldest FROM (SELECT until FROM ` + tq + `
	WHERE scope = $1 AND until > now() AND token <> $3 ORDER BY until LIMIT $5) w
), verdict AS (
	SELECT ($4 = 0 OR inflight.n < $4) AS room, ($4 = 0 OR inflight.n < $4) AND ($5 = 0 OR win.n < $5) AS ok,
		GREATEST(EXTRACT(EPOCH FROM win.oldest - now()), 0.001)::float8 AS retry
	FROM inflight, win
), marked AS (
	UPDATE ` + t + ` SET quota_scope = $1, quota_token = $3
	WHERE key = $2 AND lock_token = $3 AND status = 'processing' AND (SELECT ok FROM verdict)
), logged AS (
	INSERT INTO ` + tq + ` (scope, token, until)
	SELECT $1, $3, now() + $6::interval WHERE $5 > 0 AND (SELECT ok FROM verdict)
	ON CONFLICT (scope, token) DO NOTHING
), dropped AS (
	DELETE FROM ` + t + ` WHERE key = $2 AND lock_token = $3 AND status = 'processing' AND NOT (SELECT ok FROM verdict)
)
SELECT ok, room, retry FROM verdict`,
		sweep: `DELETE FROM ` + tq + ` WHERE ctid IN (
	SELECT ctid FROM ` + tq + ` WHERE until <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`,
		// Takes the first free of the $2 advisory locks of the scope's
		// slots, held until the transaction ends; no row if none is free.
		slot:    `SELECT s FROM generate_series(0, $2::int - 1) AS s WHERE pg_try_advisory_xact_lock(hashtextextended($1, s::bigint)) LIMIT 1`,
		record:  `SELECT record FROM ` + t + ` WHERE key = $1 AND status = 'completed' AND expires_at > now()`,
		unadmit: `DELETE FROM ` + tq + ` WHERE scope = $1 AND token = $2`,
		lockID:  "idem-go/idem quota " + t + " ",
		slotID:  "idem-go/idem quota slot " + t + " ",
	}
}

// EnforcesQuota reports that the Store enforces core.Config.Quota: a new
// key's lock is admitted by a second statement, under an advisory lock of
// its scope, that counts the scope's admitted locks (rows of the table)
// and its admissions in the window (rows of <table>_quota), or deletes the
// lock. A TxStore's transaction holds one of the scope's InFlight slots
// (advisory locks) instead, and admits its key in the window before it
// begins.
func (s *Store) EnforcesQuota() bool { return true }

// quotaReleaseTimeout bounds the release of a lock whose admission failed.
const quotaReleaseTimeout = time.Second

// admit admits the lock of token, just taken for key, in the scope under q,
// in one round trip (a batch: one READ COMMITTED transaction, which holds
// the scope's advisory lock). A refused lock is deleted.
func (s *Store) admit(ctx context.Context, key, token, scope string, q core.Quota) error {
	var (
		ok, room bool
		retry    float64
	)
	_, err := s.run(ctx, "quota", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		b := &pgx.Batch{}
		b.Queue(readCommitted) // the admission's snapshot is taken after the lock
		b.Queue(s.qsql.lock, s.qsql.lockID+scope)
		b.Queue(s.qsql.admit, scope, key, token, q.InFlight, q.PerWindow, q.Window).QueryRow(func(r pgx.Row) error {
			return r.Scan(&ok, &room, &retry)
		})
		b.Queue("COMMIT")
		return c.SendBatch(ctx, b).Close()
	})
	switch {
	case err != nil:
		// Released even if the admission took ctx's time, else the lock
		// holds the key for its initial lease; bounded, as PostgreSQL may
		// be failing.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quotaReleaseTimeout)
		defer cancel()
		s.Release(rctx, key, token) //nolint:errcheck // else it expires
		return err
	case !room:
		return &core.QuotaError{}
	case !ok:
		return &core.QuotaError{RetryAfter: time.Duration(retry * float64(time.Second))}
	}
	return nil
}

// admit holds, for the key of t, just taken, a slot of its scope's in
// flight under ctx's quota, if any: an advisory lock that t's transaction
// holds until it ends (a crashed process's too).
func (t *txn) admit(ctx context.Context) error {
	scope, q, ok := core.QuotaFromContext(ctx)
	if !ok || q.InFlight <= 0 {
		return nil
	}
	// The savepoint again, after the slot: Commit rolls back to the newest
	// one of its name, which keeps the slot's lock until the end.
	var found bool
	b := &pgx.Batch{}
	b.Queue(t.s.qsql.slot, t.s.qsql.slotID+scope, q.InFlight).Query(func(rows pgx.Rows) error {
		found = rows.Next()
		rows.Close()
		return rows.Err()
	})
	b.Queue(savepoint)
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if !found {
		return &core.QuotaError{}
	}
	return nil
}

// admitWindow is the part of TxStore.Begin under a quota's PerWindow that
// comes before its transaction (a second connection taken while the
// transaction holds one could wait for connections that other such
// transactions hold): a completed record of key is returned (a replay is
// never refused); otherwise the key is admitted in the scope's window, and
// undo takes the admission back if no transaction takes the key.
func (s *TxStore) admitWindow(ctx context.Context, key string) (record []byte, undo func(), err error) {
	scope, q, ok := core.QuotaFromContext(ctx)
	if !ok || q.PerWindow <= 0 {
		return nil, func() {}, nil
	}
	// Each statement takes a connection of the pool: one that waits for it
	// with every connection in use, and meets the deadline, is busy.
	before := s.pool.Stat()
	_, err = s.run(ctx, "quota", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		return c.QueryRow(ctx, s.qsql.record, key).Scan(&record)
	})
	switch {
	case err == nil:
		return record, nil, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, nil, busy(ctx, err, s.saturated(before))
	}
	token := newToken()
	before = s.pool.Stat()
	if err := s.admit(ctx, key, token, scope, core.Quota{PerWindow: q.PerWindow, Window: q.Window}); err != nil {
		return nil, nil, busy(ctx, err, s.saturated(before))
	}
	return nil, func() {
		// Bounded: with the pool in use, a refusal waits for it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		s.run(ctx, "quota", func(ctx context.Context, c *pgxpool.Conn, _ bool) error { //nolint:errcheck // it leaves the window
			_, err := c.Exec(ctx, s.qsql.unadmit, scope, token)
			return err
		})
	}, nil
}
