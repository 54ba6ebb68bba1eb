package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
)

// Defaults of Options.
const (
	DefaultTable           = "idempotency_keys"
	DefaultTimeout         = 5 * time.Second
	DefaultJanitorInterval = time.Minute
	DefaultJanitorBatch    = 1000
	DefaultStaleLockAge    = time.Hour
)

// Errors of this package; PostgreSQL and network errors are wrapped as they
// come, with a "pgstore: <operation>:" prefix.
var (
	// ErrNilPool reports New or Migrate called without a pool.
	ErrNilPool = errors.New("pgstore: nil pool")
	// ErrInvalidOptions reports Options out of range: a negative Timeout,
	// JanitorBatch or StaleLockAge, a JanitorInterval under 1ms, a name
	// too long for PostgreSQL, or a Table name ending in _steps or _quota
	// (another store's tables).
	ErrInvalidOptions = errors.New("pgstore: invalid options")
)

// Options configures a Store and Migrate. A nil *Options means the defaults.
type Options struct {
	// Schema holds the table. Optional. Default: none, the connection's
	// search_path (public, usually). Every Store and TxStore on a table
	// must write Schema and Table alike: the transactional mode's locks
	// and the purge notices are named after them, so "" on one instance
	// and "public" on another let both run a key at once (the second to
	// commit then fails, its writes rolled back).
	Schema string
	// Table is the table's name, at most 40 bytes; Migrate also creates
	// <Table>_steps and <Table>_quota, so it must not end in either suffix
	// (another store's table would be one of them). Optional. Default:
	// DefaultTable.
	Table string
	// Timeout bounds each statement whose context has no deadline (the
	// Engine's calls have Config.StoreTimeout's). Optional. Default:
	// DefaultTimeout.
	Timeout time.Duration
	// JanitorInterval is the time between two sweeps of expired rows, at
	// least 1ms; a negative value starts no janitor. Optional. Default:
	// DefaultJanitorInterval.
	JanitorInterval time.Duration
	// JanitorBatch is the most rows one DELETE removes. Optional.
	// Default: DefaultJanitorBatch.
	JanitorBatch int
	// StaleLockAge is how long a row stays 'processing' after its lock
	// expired before the janitor deletes it (meanwhile operators can find
	// it). Optional. Default: DefaultStaleLockAge.
	StaleLockAge time.Duration
	// Logger receives the janitor's errors. Optional. Default: slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a copy of o with every zero field set to its
// default, or an error wrapping ErrInvalidOptions.
func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.JanitorInterval == 0 {
		c.JanitorInterval = DefaultJanitorInterval
	}
	if c.JanitorBatch == 0 {
		c.JanitorBatch = DefaultJanitorBatch
	}
	if c.StaleLockAge == 0 {
		c.StaleLockAge = DefaultStaleLockAge
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Timeout < 0:
		return c, fmt.Errorf("%w: negative Timeout", ErrInvalidOptions)
	case c.JanitorBatch < 0:
		return c, fmt.Errorf("%w: negative JanitorBatch", ErrInvalidOptions)
	case c.StaleLockAge < 0:
		return c, fmt.Errorf("%w: negative StaleLockAge", ErrInvalidOptions)
	case c.JanitorInterval > 0 && c.JanitorInterval < time.Millisecond:
		// A bare number is nanoseconds (JanitorInterval: 60): each sweep
		// opens a connection, hundreds a second.
		return c, fmt.Errorf("%w: JanitorInterval under 1ms", ErrInvalidOptions)
	case len(c.Table) > 40 || len(c.Schema) > 63:
		// The index names add up to 23 bytes to the table's; PostgreSQL
		// cuts identifiers at 63.
		return c, fmt.Errorf("%w: table name over 40 bytes or schema name over 63", ErrInvalidOptions)
	}
	for _, t := range []struct{ suffix, of string }{{"_steps", "checkpoints'"}, {"_quota", "quota's"}} {
		if strings.HasSuffix(c.Table, t.suffix) {
			return c, fmt.Errorf("%w: table name %q ends in %q, as the %s table of the store with Table %q does (Migrate creates <Table>%s): choose a name without it",
				ErrInvalidOptions, c.Table, t.suffix, t.of, strings.TrimSuffix(c.Table, t.suffix), t.suffix)
		}
	}
	return c, nil
}

// ident returns the quoted, schema-qualified name of table.
func (o *Options) ident(table string) string {
	if o.Schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{o.Schema, table}.Sanitize()
}

// Store is a core.Store on a PostgreSQL table (see the package doc). It is
// safe for concurrent use; any number of instances may share the table.
// Make one with New; the zero value is not usable.
type Store struct {
	pool    *pgxpool.Pool
	opts    Options
	sql     statements
	qsql    quotaStatements
	resetAt atomic.Int64 // unix nanos of the last pool reset

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	inv invalidation // SetInvalidate's purge listener
}

var (
	_ core.Store        = (*Store)(nil)
	_ core.Checkpointer = (*Store)(nil)
)

type statements struct {
	acquire, complete, release, refresh string
	sweepExpired, sweepStale, lockID    string
	saveStep, loadSteps, sweepSteps     string
	// TxStore's steps: the lock of a key's steps, taken by a step's
	// transaction and waited for by LoadSteps; whether a backend holds the
	// key's lock; a checkpoint's insert
	stepsLock, waitSteps, takeSteps, keyHeld, keyHeldOrFree, txSaveStep, savedStep string
	// TxStore's
	lock, held, commit, keyLock string
}

// New returns a Store on the table that Migrate created, and starts its
// janitor unless opts.JanitorInterval is negative. opts may be nil. New does
// no I/O; Close stops the janitor (not the pool, which is the caller's).
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, ErrNilPool
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, opts: o, sql: buildStatements(&o), qsql: buildQuotaStatements(&o), stop: make(chan struct{}), done: make(chan struct{})}
	if o.JanitorInterval > 0 {
		go s.janitor()
	} else {
		close(s.done)
	}
	return s, nil
}

// Close stops the janitor, waiting for a sweep in progress to end its
// current statement (at most Options.Timeout), and the purge listener
// (SetInvalidate). It does not close the pool.
func (s *Store) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.inv.stop()
}

// buildStatements writes the store's SQL for its table. Every statement
// reads the time from PostgreSQL (now()), so that instances whose clocks
// disagree agree on expiries.
func buildStatements(o *Options) statements {
	t, st := o.ident(o.Table), o.ident(o.Table+"_steps")
	// A bigint advisory lock shows in pg_locks as its high half in classid,
	// its low half in objid, and objsubid 1.
	keyHeld := `SELECT EXISTS (SELECT FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND pid = $2 AND objsubid = 1
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND (classid::bigint << 32 | objid::bigint) = hashtextextended($1, 0))`
	return statements{
		// Returns the key's live record, or nothing if another request holds
		// a live lock, without writing or locking anything (a replay is a
		// read); otherwise takes the lock: no row, an expired lock or
		// record, or a lock of this very token (a run again after a lost
		// reply). A row committed after the statement's snapshot is seen by
		// neither part: no row at all, in flight. A key that the
		// transactional mode holds (its advisory lock, $4 || $1, and no row
		// yet) is not taken either: in flight, so both modes share a table.
		acquire: `WITH cur AS (
	SELECT record, status = 'completed' AND expires_at > now()
		OR status = 'processing' AND locked_until > now() AND lock_token <> $2 AS live
	FROM ` + t + ` WHERE key = $1
), taken AS (
	INSERT INTO ` + t + ` AS k (key, status, lock_token, locked_until, created_at)
	SELECT $1, 'processing', $2, now() + $3::interval, now()
	WHERE NOT EXISTS (SELECT FROM cur WHERE live) AND pg_try_advisory_xact_lock(hashtextextended($4 || $1, 0))
	ON CONFLICT (key) DO UPDATE SET status = 'processing', lock_token = EXCLUDED.lock_token,
		locked_until = EXCLUDED.locked_until, record = NULL, status_code = NULL,
		created_at = EXCLUDED.created_at, completed_at = NULL, expires_at = NULL
	WHERE (k.status = 'processing' AND (k.locked_until <= now() OR k.lock_token = EXCLUDED.lock_token))
		OR (k.status = 'completed' AND k.expires_at <= now())
	RETURNING 1
)
SELECT true, NULL::bytea FROM taken
UNION ALL
SELECT false, record FROM cur WHERE live`,
		// Stores if $2 owns the lock, expired or not, or if nobody holds a
		// live lock or record (the late-store rule), and deletes the key's
		// checkpoints; $6 is true on a run again after a lost reply, when
		// the record may be this call's.
		complete: `WITH done AS (
	INSERT INTO ` + t + ` AS k (key, status, lock_token, record, status_code, created_at, completed_at, expires_at)
	VALUES ($1, 'completed', $2, $3, $4, now(), now(), now() + $5::interval)
	ON CONFLICT (key) DO UPDATE SET status = 'completed', lock_token = EXCLUDED.lock_token, locked_until = NULL,
		record = EXCLUDED.record, status_code = EXCLUDED.status_code, completed_at = now(),
		expires_at = EXCLUDED.expires_at
	WHERE (k.status = 'processing' AND (k.lock_token = $2 OR k.locked_until <= now()))
		OR (k.status = 'completed' AND (k.expires_at <= now() OR ($6 AND k.lock_token = $2)))
	RETURNING 1
), dropped AS (
	DELETE FROM ` + st + ` WHERE key = $1 AND EXISTS (SELECT FROM done)
)
SELECT 1 FROM done`,
		// Deletes the lock of $2, reporting whether it was still live.
		release: `DELETE FROM ` + t + `
WHERE key = $1 AND status = 'processing' AND lock_token = $2
RETURNING locked_until > now()`,
		refresh: `UPDATE ` + t + ` SET locked_until = now() + $3::interval
WHERE key = $1 AND status = 'processing' AND lock_token = $2 AND locked_until > now()`,
		sweepExpired: `DELETE FROM ` + t + ` WHERE ctid IN (
	SELECT ctid FROM ` + t + ` WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`,
		sweepStale: `DELETE FROM ` + t + ` WHERE ctid IN (
	SELECT ctid FROM ` + t + ` WHERE status = 'processing' AND locked_until <= now() - $2::interval
	LIMIT $1 FOR UPDATE SKIP LOCKED)`,
		lockID: "idem-go/idem janitor " + t,
		// Writes the checkpoint if $2 holds the key's live lock: the lock's
		// row is share-locked until the write commits, so that a takeover
		// of the key (an UPDATE of that row) waits for it, and one
		// committed first fails the check.
		saveStep: `INSERT INTO ` + st + ` AS s (key, step, result, expires_at)
SELECT key, $3, $4, now() + $5::interval FROM ` + t + `
WHERE key = $1 AND status = 'processing' AND lock_token = $2 AND locked_until > now() FOR SHARE
ON CONFLICT (key, step) DO UPDATE SET result = EXCLUDED.result, expires_at = GREATEST(s.expires_at, EXCLUDED.expires_at)
RETURNING 1`,
		loadSteps: `SELECT step, result FROM ` + st + ` WHERE key = $1 AND expires_at > now()`,
		sweepSteps: `DELETE FROM ` + st + ` WHERE ctid IN (
	SELECT ctid FROM ` + st + ` WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`,

		// $1: idle_in_transaction_session_timeout in ms, $2: the key's lock name.
		lock: `SELECT set_config('idle_in_transaction_session_timeout', $1, true), pg_try_advisory_xact_lock(hashtextextended($2, 0))`,
		// The key's live record, or a live lock of the lease mode.
		held: `SELECT record, status = 'completed' AND expires_at > now()
	OR status = 'processing' AND locked_until > now() FROM ` + t + ` WHERE key = $1`,
		// now() is the transaction's start; the record's times are the commit's.
		// A live row of the key, which the advisory lock should have kept out
		// (another store on the table that spells it differently, a lease-mode
		// instance of an older release), is not written over: the division by
		// zero aborts the transaction, the handler's writes with it
		// (errKeyTaken).
		commit: `WITH dropped AS (DELETE FROM ` + st + ` WHERE key = $1), done AS (
INSERT INTO ` + t + ` AS k (key, status, record, status_code, created_at, completed_at, expires_at)
VALUES ($1, 'completed', $2, $3, now(), clock_timestamp(), clock_timestamp() + $4::interval)
ON CONFLICT (key) DO UPDATE SET status = 'completed', lock_token = NULL, locked_until = NULL,
	record = EXCLUDED.record, status_code = EXCLUDED.status_code, created_at = EXCLUDED.created_at,
	completed_at = EXCLUDED.completed_at, expires_at = EXCLUDED.expires_at
WHERE NOT ((k.status = 'completed' AND k.expires_at > now()) IS TRUE OR (k.status = 'processing' AND k.locked_until > now()) IS TRUE)
RETURNING 1
)
SELECT 1 / count(*)::int FROM done`,
		keyLock: "idem-go/idem key " + t + " ",

		stepsLock: "idem-go/idem steps " + t + " ",
		waitSteps: `SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))`,
		takeSteps: `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		keyHeld:   keyHeld,
		// Or the key is no one's: no live row (a record, a lease mode's
		// lock), and its lock, which no one holds, is this transaction's
		// until it ends. $3 is the key.
		keyHeldOrFree: keyHeld + ` OR (NOT EXISTS (SELECT FROM ` + t + ` WHERE key = $3
	AND (expires_at > now() OR locked_until > now())) AND pg_try_advisory_xact_lock(hashtextextended($1, 0)))`,
		savedStep: `INSERT INTO ` + st + ` (key, step, result, expires_at) VALUES ($1, $2, $3, now() + $4::interval)
ON CONFLICT (key, step) DO NOTHING`,
		txSaveStep: `INSERT INTO ` + st + ` AS s (key, step, result, expires_at) VALUES ($1, $2, $3, now() + $4::interval)
ON CONFLICT (key, step) DO UPDATE SET result = EXCLUDED.result, expires_at = GREATEST(s.expires_at, EXCLUDED.expires_at)`,
	}
}

// readCommitted begins the transaction of a batch that reads after taking
// an advisory lock: at READ COMMITTED each statement's snapshot is taken
// when it starts, so after the lock; a server whose
// default_transaction_isolation is REPEATABLE READ would take one snapshot
// before it.
const readCommitted = "BEGIN ISOLATION LEVEL READ COMMITTED"

// Acquire implements core.Store in one statement; under core.Config.Quota,
// a second round trip admits a new key's lock (see EnforcesQuota).
func (s *Store) Acquire(ctx context.Context, key string, lockTTL time.Duration) ([]byte, string, error) {
	token := newToken()
	var (
		taken  bool
		record []byte
	)
	_, err := s.run(ctx, "acquire", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		return c.QueryRow(ctx, s.sql.acquire, key, token, lockTTL, s.sql.keyLock).Scan(&taken, &record)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, "", core.ErrInFlight // a row committed after the snapshot
	case err != nil:
		return nil, "", err
	case taken:
		if scope, q, ok := core.QuotaFromContext(ctx); ok {
			if err := s.admit(ctx, key, token, scope, q); err != nil {
				return nil, "", err
			}
		}
		return nil, token, nil
	case record == nil:
		return nil, "", core.ErrInFlight
	}
	return record, "", nil
}

// Complete implements core.Store in one statement, with the late-store
// rule of core.Store: it stores if token owns the key's lock, expired or
// not, or if the key has no live lock and no live record.
func (s *Store) Complete(ctx context.Context, key, token string, record []byte, ttl time.Duration) error {
	if record == nil {
		record = []byte{} // a record, however empty, is not a lock
	}
	code := recordCode(record)
	_, err := s.run(ctx, "complete", func(ctx context.Context, c *pgxpool.Conn, again bool) error {
		var one int
		return c.QueryRow(ctx, s.sql.complete, key, token, record, code, ttl, again).Scan(&one)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return core.ErrLockLost
	}
	return err
}

// Release implements core.Store in one statement. A lock of token that had
// expired is deleted too, and reported as core.ErrLockLost.
func (s *Store) Release(ctx context.Context, key, token string) error {
	var live bool
	runs, err := s.run(ctx, "release", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		return c.QueryRow(ctx, s.sql.release, key, token).Scan(&live)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows) && runs > 1:
		return nil // deleted by the run whose reply was lost
	case errors.Is(err, pgx.ErrNoRows):
		return core.ErrLockLost
	case err != nil:
		return err
	case !live:
		return core.ErrLockLost
	}
	return nil
}

// Refresh implements core.Store in one statement.
func (s *Store) Refresh(ctx context.Context, key, token string, lockTTL time.Duration) error {
	var tag pgconn.CommandTag
	_, err := s.run(ctx, "refresh", func(ctx context.Context, c *pgxpool.Conn, _ bool) (err error) {
		tag, err = c.Exec(ctx, s.sql.refresh, key, token, lockTTL)
		return err
	})
	if err == nil && tag.RowsAffected() == 0 {
		return core.ErrLockLost
	}
	return err
}

// SaveStep implements core.Checkpointer in one statement, in the table
// <Table>_steps (Migrate creates it).
func (s *Store) SaveStep(ctx context.Context, key, token, step string, result []byte, ttl time.Duration) error {
	if result == nil {
		result = []byte{}
	}
	_, err := s.run(ctx, "save step", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		var one int
		return c.QueryRow(ctx, s.sql.saveStep, key, token, step, result, ttl).Scan(&one)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return core.ErrLockLost
	}
	return err
}

// LoadSteps implements core.Checkpointer in one statement.
func (s *Store) LoadSteps(ctx context.Context, key string) (map[string][]byte, error) {
	steps := map[string][]byte{}
	_, err := s.run(ctx, "load steps", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		clear(steps)
		rows, err := c.Query(ctx, s.sql.loadSteps, key)
		if err != nil {
			return err
		}
		var (
			step   string
			result []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&step, &result}, func() error {
			steps[step] = result
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return steps, nil
}

// maxRuns bounds the runs of a statement that keeps losing its connection.
const maxRuns = 3

// run runs f on a pooled connection, bounded by Options.Timeout, and runs
// it again, on another connection, when the connection died under it
// (PostgreSQL restarted, a proxy or the server closed it): up to maxRuns
// runs. again tells f that this is not the first run. Every statement of
// the Store is safe to run again (see buildStatements). The first lost
// connection resets the pool (see lost), so that a restart costs one run
// again, not one per pooled connection. run returns the number of runs.
func (s *Store) run(ctx context.Context, op string, f func(ctx context.Context, c *pgxpool.Conn, again bool) error) (int, error) {
	if _, ok := ctx.Deadline(); !ok && s.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
	}
	for runs := 1; ; runs++ {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return runs, storeError(op, runs, err)
		}
		err = f(ctx, c, runs > 1)
		dead := err != nil && ctx.Err() == nil && c.Conn().IsClosed()
		c.Release()
		switch {
		case err == nil, errors.Is(err, pgx.ErrNoRows):
			return runs, err
		case !dead || runs == maxRuns:
			return runs, storeError(op, runs, err)
		}
		s.lost()
	}
}

// lost resets the pool, at most once a second: when PostgreSQL restarts,
// every pooled connection is dead, and each would otherwise fail a
// statement before the pool replaced it (pgxpool pings only connections
// idle for over a second).
func (s *Store) lost() {
	now := time.Now().UnixNano()
	last := s.resetAt.Load()
	if now-last > int64(time.Second) && s.resetAt.CompareAndSwap(last, now) {
		s.pool.Reset()
	}
}

// storeError wraps an error of op, saying how many runs it took.
func storeError(op string, runs int, err error) error {
	if runs > 1 {
		return fmt.Errorf("pgstore: %s: %w (%d runs)", op, err, runs)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// recordCode returns the status code of an encoded core record for the
// status_code column, or nil if data is not one or is sealed.
func recordCode(data []byte) any {
	r, err := core.DecodeRecord(data)
	if err != nil || r.SealedBy != "" {
		return nil
	}
	return int32(r.Code)
}

// tokenPrefix makes tokens unique across processes; tokenSeq within one.
var (
	tokenPrefix = func() string {
		var b [12]byte
		rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails (Go 1.24+)
		return base64.RawURLEncoding.EncodeToString(b[:]) + "."
	}()
	tokenSeq atomic.Uint64
)

// newToken returns a fresh owner token: fencing needs tokens that never
// repeat, not tokens that cannot be guessed.
func newToken() string {
	return tokenPrefix + strconv.FormatUint(tokenSeq.Add(1), 36)
}
