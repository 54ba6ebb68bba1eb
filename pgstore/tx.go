package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-go/idem/core"
)

// ErrTxManaged is the error of Commit and Rollback called by a handler on
// the transaction Tx returns: the Engine commits it with the record, or
// rolls it back when the response is not stored (a 5xx, a panic).
var ErrTxManaged = errors.New("pgstore: the request's transaction is committed or rolled back by idem")

// ErrWorkAborted is the error of a transactional mode's commit whose
// handler answered with a success after one of its statements failed:
// PostgreSQL aborted the transaction, so none of the handler's writes is
// kept, nor its answer; the client gets 503 and its retry runs the handler
// again. A handler that answers a failed statement with a failure (a 4xx)
// has that answer stored, without its writes.
var ErrWorkAborted = errors.New("pgstore: a statement of the request failed and aborted its transaction: " +
	"its writes are lost, and its answer of success is not stored")

// TxStore is the transactional mode of the Store: a key is held by a
// transaction on the pool from the first request's start to its end, the
// handler writes its rows through that transaction (Tx), and the record
// commits with them. A key's effect and its stored response are committed
// together or not at all. See docs/pgstore.md for sizing and timeouts.
// Make one with NewTx; the zero value is not usable.
type TxStore struct {
	*Store
	keys    chan struct{} // keysOf(pool)
	oneConn bool          // no step can run
}

// poolKeys holds, by a weak pointer to each pool, a token per key held on
// it by any TxStore, at most one fewer than the pool's connections: a
// handler in a Step holds its key's connection and needs another, which
// none would get if every connection held a key. A pool's entry goes with
// the pool.
var poolKeys sync.Map

// keysOf returns the tokens of pool's keys.
func keysOf(pool *pgxpool.Pool) chan struct{} {
	wp := weak.Make(pool)
	if keys, ok := poolKeys.Load(wp); ok {
		return keys.(chan struct{})
	}
	keys, loaded := poolKeys.LoadOrStore(wp, make(chan struct{}, max(1, pool.Config().MaxConns-1)))
	if !loaded {
		runtime.AddCleanup(pool, func(wp weak.Pointer[pgxpool.Pool]) { poolKeys.Delete(wp) }, wp)
	}
	return keys.(chan struct{})
}

var _ core.TxStore = (*TxStore)(nil)

// NewTx returns a TxStore on the table that Migrate created; opts as for New.
// The TxStores on a pool hold at most one key fewer at once than it has
// connections (pool_max_conns), so that one connection is never a key's: a
// handler in a core.Step needs a second connection for as long as the step
// runs. Begin waits for a key to end as it would for a connection. Steps
// need a pool of two connections or more.
func NewTx(pool *pgxpool.Pool, opts *Options) (*TxStore, error) {
	s, err := New(pool, opts)
	if err != nil {
		return nil, err
	}
	return &TxStore{Store: s, keys: keysOf(pool), oneConn: pool.Config().MaxConns < 2}, nil
}

// Tx returns the transaction that holds the key of ctx's request, for the
// handler's writes, or nil if the request runs without one (no key, a store
// that is not a TxStore, unprotected after a store failure, or held by
// Redis's lock alone behind a tiered store whose PostgreSQL was down). Its Commit
// and Rollback return ErrTxManaged; a transaction begun in it (a savepoint)
// is the handler's to commit or roll back. Once idem has ended it, its
// statements return pgx.ErrTxClosed. Use it only from the handler's
// goroutine, within the handler: its connection then serves other
// requests (its Conn and LargeObjects are not guarded).
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey{}).(handlerTx)
	if tx.Tx == nil {
		return nil
	}
	if tx.taken != nil {
		tx.taken.Store(true)
	}
	return tx
}

type txKey struct{}

// Querier is what a handler's statements need, of a transaction or a pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxOr returns Tx(ctx), or pool if the request runs without a transaction,
// for a handler that writes through whichever it has.
func TxOr(ctx context.Context, pool *pgxpool.Pool) Querier {
	if tx := Tx(ctx); tx != nil {
		return tx
	}
	return pool
}

// savepoint follows the key's lock in its transaction: a statement of the
// handler that fails aborts the transaction, and Commit rolls back to it to
// store the record without giving up the lock.
const (
	savepoint         = "SAVEPOINT idem_handler"
	rollbackToHandler = "ROLLBACK TO SAVEPOINT idem_handler"
)

// handlerTx is the transaction as the handler gets it, or a savepoint the
// handler began in it (nested). ended is set when idem commits or rolls
// back the key's transaction (pgx does not see a COMMIT sent in a batch),
// after which its statements fail rather than run on a connection that
// serves another request.
type handlerTx struct {
	pgx.Tx
	ended  *atomic.Bool
	taken  *atomic.Bool // a step's: set once the step took it (Tx), and may have written through it
	nested bool         // the handler's own to commit or roll back
}

func (h handlerTx) Commit(ctx context.Context) error {
	if !h.nested {
		return ErrTxManaged
	}
	if h.ended.Load() {
		return pgx.ErrTxClosed
	}
	return h.Tx.Commit(ctx)
}

func (h handlerTx) Rollback(ctx context.Context) error {
	if !h.nested {
		return ErrTxManaged
	}
	if h.ended.Load() {
		return pgx.ErrTxClosed
	}
	return h.Tx.Rollback(ctx)
}

func (h handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if h.ended.Load() {
		return nil, pgx.ErrTxClosed
	}
	n, err := h.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return handlerTx{Tx: n, ended: h.ended, nested: true}, nil
}

func (h handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if h.ended.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return h.Tx.Exec(ctx, sql, args...)
}

func (h handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if h.ended.Load() {
		return closedRows{}, pgx.ErrTxClosed // pgx.CollectRows(tx.Query(...)) reads the error
	}
	return h.Tx.Query(ctx, sql, args...)
}

func (h handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if h.ended.Load() {
		return closedRows{}
	}
	return h.Tx.QueryRow(ctx, sql, args...)
}

func (h handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if h.ended.Load() {
		return closedBatch{}
	}
	return h.Tx.SendBatch(ctx, b)
}

func (h handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if h.ended.Load() {
		return 0, pgx.ErrTxClosed
	}
	return h.Tx.CopyFrom(ctx, table, columns, src)
}

func (h handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if h.ended.Load() {
		return nil, pgx.ErrTxClosed
	}
	return h.Tx.Prepare(ctx, name, sql)
}

// closedRows and closedBatch answer a handlerTx that has ended.
type (
	closedRows  struct{}
	closedBatch struct{}
)

func (closedRows) Close()                                       {}
func (closedRows) Err() error                                   { return pgx.ErrTxClosed }
func (closedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (closedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (closedRows) Next() bool                                   { return false }
func (closedRows) Scan(...any) error                            { return pgx.ErrTxClosed }
func (closedRows) Values() ([]any, error)                       { return nil, pgx.ErrTxClosed }
func (closedRows) RawValues() [][]byte                          { return nil }
func (closedRows) Conn() *pgx.Conn                              { return nil }
func (closedRows) TypeMap() *pgtype.Map                         { return nil }

func (closedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, pgx.ErrTxClosed }
func (closedBatch) Query() (pgx.Rows, error)         { return closedRows{}, pgx.ErrTxClosed }
func (closedBatch) QueryRow() pgx.Row                { return closedRows{} }
func (closedBatch) Close() error                     { return pgx.ErrTxClosed }
func (closedBatch) Tx() pgx.Tx                       { return nil }

// Begin implements core.TxStore: a transaction, begun in the same round
// trip, takes the key's advisory lock, which a concurrent duplicate fails
// to take (core.ErrInFlight) instead of waiting, and that PostgreSQL
// releases when the transaction ends, even if the process dies; then it
// reads the key's row. A completed record ends the transaction (a rollback: a
// replay commits nothing), so that a first request costs one commit. A
// working PostgreSQL without capacity for the key before ctx's deadline
// (every connection that may hold a key or of the pool in use, no
// connection slot left, the time spent waiting for them) returns an error
// wrapping core.ErrStoreBusy: refused, never run unprotected.
func (s *TxStore) Begin(ctx context.Context, key string, idle time.Duration) ([]byte, core.Tx, error) {
	if _, ok := ctx.Deadline(); !ok && s.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
	}
	inUse := s.pool.Stat().AcquiredConns() >= s.pool.Stat().MaxConns() // before admitWindow takes a connection
	record, undo, err := s.admitWindow(ctx, key)
	if err != nil || record != nil {
		return record, nil, err
	}
	for runs := 1; ; runs++ {
		record, t, err := s.begin(ctx, key, idle, inUse)
		if errors.Is(err, errDead) && runs < maxRuns {
			s.lost()
			continue
		}
		if t == nil {
			undo() // once: the retries above are the same admission
		}
		if err == nil || errors.Is(err, core.ErrInFlight) || errors.Is(err, core.ErrQuotaExceeded) {
			return record, t, err
		}
		return nil, nil, storeError("begin", runs, err)
	}
}

// tooManyConnections is PostgreSQL's SQLSTATE for a server out of
// connection slots (max_connections).
const tooManyConnections = "53300"

// errDead reports a connection that died under a statement: the pool is
// reset and the statement run again on another (see Store.run).
var errDead = errors.New("connection lost")

// begin is one try of Begin; waited reports that Begin found every
// connection of the pool in use. Busy (core.ErrStoreBusy, which the Engine
// refuses whatever Config.FailClosed says: run unprotected, the work would
// wait for a connection of the same pool for its writes, and a duplicate
// of a running call would run again) are: every key's connection held by
// a running handler until the deadline; PostgreSQL out of connection
// slots; and a deadline met after waiting for a key's connection, or with
// every connection of the pool in use. A PostgreSQL that refuses
// connections, or does not answer a request that found room, is down: a
// store error (the tiered store falls back to Redis's lock).
func (s *TxStore) begin(ctx context.Context, key string, idle time.Duration, waited bool) ([]byte, core.Tx, error) {
	queued := false
	select {
	case s.keys <- struct{}{}:
	default:
		queued = true
		select {
		case s.keys <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: waited for one of the %d connections that may hold a key: %w", core.ErrStoreBusy, cap(s.keys), context.Cause(ctx))
		}
	}
	before := s.pool.Stat()
	waited = waited || queued || before.AcquiredConns() >= before.MaxConns()
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		<-s.keys
		return nil, nil, busy(ctx, err, waited || s.saturated(before))
	}
	t := &txn{s: s, c: c, key: key}
	record, err := t.take(ctx, idle)
	if err == nil && record == nil {
		err = t.admit(ctx)
	}
	if err != nil || record != nil {
		switch {
		case err == nil:
		case t.c.Conn().IsClosed() && ctx.Err() == nil:
			err = fmt.Errorf("%w: %w", errDead, err)
		default:
			err = busy(ctx, err, waited)
		}
		// Bounded: PostgreSQL may stop answering between take and now.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		t.Rollback(rctx) //nolint:errcheck // ending the transaction is all that is left
		cancel()
		return record, nil, err
	}
	return nil, t, nil
}

// rollbackTimeout bounds the rollback of a transaction that takes no key,
// and taking an admission back.
const rollbackTimeout = time.Second

// busy returns err wrapped in core.ErrStoreBusy if it is PostgreSQL out of
// connection slots, or the deadline met after the call waited for a
// connection; a conflict or a quota refusal stays what it is.
func busy(ctx context.Context, err error, waited bool) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil, errors.Is(err, core.ErrInFlight), errors.Is(err, core.ErrQuotaExceeded):
		return err
	case errors.As(err, &pgErr) && pgErr.Code == tooManyConnections:
		return fmt.Errorf("%w: %w", core.ErrStoreBusy, err)
	case waited && ctx.Err() != nil:
		return fmt.Errorf("%w: the deadline met after waiting for a connection: %w", core.ErrStoreBusy, err)
	}
	return err
}

// saturated reports, after an Acquire that failed, whether it waited for a
// pool whose every connection was in use: so before it, or after it if
// the pool had no idle connection before (an idle one is health-checked
// inside Acquire, and counts as in use until it is destroyed: a
// PostgreSQL that stopped answering is not a pool in use). A connection
// released to another waiter just as the snapshot was taken is missed.
func (s *TxStore) saturated(before *pgxpool.Stat) bool {
	inUse := func(st *pgxpool.Stat) bool { return st.AcquiredConns() >= st.MaxConns() }
	return inUse(before) || before.IdleConns() == 0 && inUse(s.pool.Stat())
}

// txn is a key held by a transaction. Commit and Rollback end it; only the
// first call counts.
type txn struct {
	s     *TxStore
	c     *pgxpool.Conn
	tx    pgx.Tx
	key   string
	done  bool
	ended atomic.Bool // the handler's view of done (handlerTx)
}

// idleTimeout is idle in whole milliseconds for
// idle_in_transaction_session_timeout: rounded up (0 would mean no bound),
// at most the 24.8 days PostgreSQL accepts (math.MaxInt32 ms).
func idleTimeout(idle time.Duration) string {
	ms := int64(idle / time.Millisecond)
	if idle%time.Millisecond > 0 {
		ms++
	}
	return strconv.FormatInt(min(max(ms, 1), math.MaxInt32), 10)
}

// take begins the transaction, takes the key's advisory lock, bounding the
// transaction's idle time, then reads the key's row in a snapshot taken
// after the lock (a record committed by the transaction that held it), and
// sets the savepoint that Commit rolls back to if a statement of the
// handler fails: one round trip (pgx's Batch.BeginTx). READ COMMITTED,
// whatever default_transaction_isolation says: a REPEATABLE READ snapshot
// would be taken before the lock, and miss a record committed meanwhile.
func (t *txn) take(ctx context.Context, idle time.Duration) ([]byte, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	var (
		locked  bool
		idleSet string
	)
	b.Queue(t.s.sql.lock, idleTimeout(idle), t.s.sql.keyLock+t.key).
		QueryRow(func(r pgx.Row) error { return r.Scan(&idleSet, &locked) })
	var (
		record []byte
		held   bool
	)
	b.Queue(t.s.sql.held, t.key).QueryRow(func(r pgx.Row) error {
		err := r.Scan(&record, &held)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	b.Queue(savepoint)
	br := t.c.SendBatch(ctx, b)
	t.tx = br.Tx()
	if err := br.Close(); err != nil {
		return nil, err
	}
	switch {
	case held && record != nil:
		return record, nil // a duplicate that lost the lock replays too
	case !locked, held:
		return nil, core.ErrInFlight
	}
	return nil, nil
}

func (t *txn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, handlerTx{Tx: t.tx, ended: &t.ended})
}

// Commit implements core.Tx: the record is written over any row of the key
// (an expired one: the advisory lock keeps out live ones; a live one fails
// the commit, errKeyTaken) and committed with the handler's writes. If a
// statement of the handler failed, PostgreSQL has aborted the transaction,
// and none of the handler's writes can be kept. A failure's record (failed: a 4xx, a gRPC error), the handler's
// answer to that failure, commits after a rollback to the savepoint taken
// after the key's lock, under the lock it still holds (a rollback and a
// write on another connection would let a duplicate in between). A success
// would announce writes that are lost: it is rolled back with them, and
// Commit returns ErrWorkAborted.
func (t *txn) Commit(ctx context.Context, record []byte, ttl time.Duration, failed bool) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	t.ended.Store(true)
	var err error
	if t.c.Conn().PgConn().TxStatus() == 'E' {
		if !failed {
			t.tx.Rollback(ctx) //nolint:errcheck // the transaction is lost either way
			t.release()
			return ErrWorkAborted
		}
		// A round trip of its own: pgx prepares a batch's statements
		// before running it, which the aborted transaction refuses.
		_, err = t.tx.Exec(ctx, rollbackToHandler)
	}
	if err == nil {
		err = t.commit(ctx, record, ttl)
	}
	if err != nil {
		t.tx.Rollback(ctx) //nolint:errcheck // the commit's error says it
		if ctx.Err() == nil && t.c.Conn().IsClosed() {
			err = fmt.Errorf("%w: %w", errDead, err)
		}
		t.release()
		return storeError("commit", 1, err)
	}
	t.release()
	return nil
}

// release returns the key's connection to the pool, and its token.
func (t *txn) release() {
	t.c.Release()
	<-t.s.keys
}

// commit writes the record and commits in one round trip: the record's
// statement and COMMIT in one batch (pgx's Tx.Commit would be a round trip
// of its own). A COMMIT that PostgreSQL answers with ROLLBACK is an error.
func (t *txn) commit(ctx context.Context, record []byte, ttl time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(t.s.sql.commit, t.key, record, recordCode(record), ttl)
	b.Queue("COMMIT")
	br := t.tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == divisionByZero {
		// The record's statement, not COMMIT: a deferred trigger of the
		// handler's tables may divide by zero too.
		err = errKeyTaken
	}
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	return err
}

// divisionByZero is the SQLSTATE of the commit statement's refusal to
// write over a live row of its key.
const divisionByZero = "22012"

// errKeyTaken is a commit's error when a live row of its key appeared while
// its transaction held the key's advisory lock: another store took the key
// under another lock name.
var errKeyTaken = errors.New("another call stored the key's record or holds its lock, under another lock name: " +
	"do all the stores on this table write Options.Schema and Table alike?")

// Rollback implements core.Tx.
func (t *txn) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	t.ended.Store(true)
	if t.c.Conn().IsClosed() {
		// A statement was cut off (its context canceled, the network lost):
		// the session, and with it the transaction, is gone.
		t.release()
		return nil
	}
	err := t.tx.Rollback(ctx) // pgx closes the connection if it fails
	t.release()
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback: %w", err)
	}
	return nil
}

var _ core.StepTx = (*txn)(nil)

// RunStep implements core.StepTx: fn runs in a transaction on another of
// the pool's connections, which takes the lock of the key's steps and
// checks that the key's transaction still holds the key (pg_locks, by its
// backend's pid), and commits fn's writes with the checkpoint. If that
// transaction's session died while fn ran and fn did not take it (Tx), the
// checkpoint is saved in another (saveStep). A request running a step holds
// two connections.
func (t *txn) RunStep(ctx context.Context, step string, ttl time.Duration, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	if t.done {
		return nil, core.ErrLockLost
	}
	if t.s.oneConn {
		return nil, errOneConn
	}
	pid := t.c.Conn().PgConn().PID()
	actx := ctx
	if t.s.opts.Timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, t.s.opts.Timeout)
		defer cancel()
	}
	c, err := t.s.pool.Acquire(actx) // bounded: the key's transaction holds a connection already
	if err != nil {
		return nil, storeError("step", 1, err)
	}
	defer c.Release()
	tx, err := c.Begin(ctx)
	if err != nil {
		return nil, storeError("step", 1, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	var held bool
	b := &pgx.Batch{}
	b.Queue(t.s.sql.takeSteps, t.s.sql.stepsLock+t.key)
	b.Queue(t.s.sql.keyHeld, t.s.sql.keyLock+t.key, pid).QueryRow(func(r pgx.Row) error { return r.Scan(&held) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, storeError("step", 1, err)
	}
	if !held {
		return nil, core.ErrLockLost
	}
	var ended, taken atomic.Bool
	defer ended.Store(true)
	result, err := fn(context.WithValue(ctx, txKey{}, handlerTx{Tx: tx, ended: &ended, taken: &taken}))
	if err != nil {
		return nil, err
	}
	// fn's effect happened: its checkpoint commits even if the request
	// ends meanwhile (a client gone), as the lease mode's does, within
	// Options.Timeout.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.s.opts.Timeout)
	defer cancel()
	_, err = tx.Exec(sctx, t.s.sql.txSaveStep, t.key, step, result, ttl)
	if err == nil {
		err = tx.Commit(sctx)
	}
	if err != nil && c.Conn().IsClosed() && !taken.Load() {
		// The step's session died while fn ran (PostgreSQL restarted, the
		// backend terminated or idle too long), and fn wrote nothing
		// through it: its effect stands, and so must its checkpoint.
		return result, t.saveStep(sctx, pid, step, result, ttl)
	}
	if err != nil {
		return nil, storeError("step", 1, err)
	}
	return result, nil
}

// saveStep saves a step's checkpoint in a transaction of its own, if the
// key's transaction (of backend pid) still holds the key or no one does (no
// lock, no live record): a retry then finds it. If another request holds
// the key or completed it, it may have read the key's steps already, and
// run the step again: ErrLockLost, and a checkpoint of that request's is
// never overwritten.
func (t *txn) saveStep(ctx context.Context, pid uint32, step string, result []byte, ttl time.Duration) error {
	c, err := t.s.pool.Acquire(ctx)
	if err != nil {
		return storeError("step", 1, err)
	}
	defer c.Release()
	tx, err := c.Begin(ctx)
	if err != nil {
		return storeError("step", 1, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var ours bool
	b := &pgx.Batch{}
	b.Queue(t.s.sql.takeSteps, t.s.sql.stepsLock+t.key)
	b.Queue(t.s.sql.keyHeldOrFree, t.s.sql.keyLock+t.key, pid, t.key).QueryRow(func(r pgx.Row) error { return r.Scan(&ours) })
	b.Queue(t.s.sql.savedStep, t.key, step, result, ttl)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return storeError("step", 1, err)
	}
	if !ours {
		return core.ErrLockLost
	}
	if err := tx.Commit(ctx); err != nil {
		return storeError("step", 1, err)
	}
	return nil
}

// errOneConn is the error of a step on a pool of one connection, which the
// key's transaction holds.
var errOneConn = errors.New("pgstore: a step needs a second connection, and the pool has one (pool_max_conns)")

// LoadSteps implements core.Checkpointer in one round trip, once no step's
// transaction holds the lock of the key's steps: the step of a transaction
// that lost the key may still be committing its checkpoint.
func (s *TxStore) LoadSteps(ctx context.Context, key string) (map[string][]byte, error) {
	if s.oneConn {
		return nil, errOneConn
	}
	steps := map[string][]byte{}
	_, err := s.run(ctx, "load steps", func(ctx context.Context, c *pgxpool.Conn, _ bool) error {
		clear(steps)
		b := &pgx.Batch{}
		b.Queue(readCommitted) // the read's snapshot is taken after the lock
		b.Queue(s.sql.waitSteps, s.sql.stepsLock+key)
		b.Queue(s.sql.loadSteps, key).Query(func(rows pgx.Rows) error {
			var (
				step   string
				result []byte
			)
			_, err := pgx.ForEachRow(rows, []any{&step, &result}, func() error {
				steps[step] = result
				return nil
			})
			return err
		})
		b.Queue("COMMIT")
		return c.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, err
	}
	return steps, nil
}
