package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// serializationFailure is PostgreSQL's SQLSTATE serialization_failure.
const serializationFailure = "40001"

// DefaultInboxTable is the table of an Inbox made without InboxOptions.Table.
const DefaultInboxTable = "processed_events"

// ErrEmptyEventID reports Inbox.Process called without an event id.
var ErrEmptyEventID = errors.New("pgstore: empty event id")

// InboxOptions configures an Inbox and MigrateInbox. A nil *InboxOptions
// means the defaults.
type InboxOptions struct {
	// Schema holds the table. Optional. Default: none, the connection's
	// search_path (public, usually).
	Schema string
	// Table is the table's name, at most 40 bytes and not ending in _steps
	// or _quota (a store's tables, as Options.Table says). Optional.
	// Default: DefaultInboxTable.
	Table string
}

func (o *InboxOptions) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c.Schema, c.Table = o.Schema, o.Table
	}
	if c.Table == "" {
		c.Table = DefaultInboxTable
	}
	return c.withDefaults()
}

// MigrateInbox creates or upgrades the inbox's table, as Migrate does the
// store's (same advisory lock, same version table).
func MigrateInbox(ctx context.Context, pool *pgxpool.Pool, opts *InboxOptions) error {
	if pool == nil {
		return ErrNilPool
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	return migrate(ctx, pool, &o, "migrations/inbox", DefaultInboxTable, o.Table)
}

// Inbox applies events exactly once: each event's effect and the mark that
// it was applied (a row of processed_events) commit in one PostgreSQL
// transaction, so a consumer killed at any instant either applied the
// event and marked it, or did neither, and a redelivery is applied or
// skipped accordingly. Delete old marks yourself once no redelivery can
// come (processed_at is indexed).
type Inbox struct {
	pool   *pgxpool.Pool
	insert string
}

// NewInbox returns an Inbox on the table that MigrateInbox created. opts
// may be nil.
func NewInbox(pool *pgxpool.Pool, opts *InboxOptions) (*Inbox, error) {
	if pool == nil {
		return nil, ErrNilPool
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Inbox{pool: pool, insert: "INSERT INTO " + o.ident(o.Table) +
		" (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING"}, nil
}

// Process runs fn in a transaction that first marks eventID as processed,
// and commits both, unless the event was processed before: then it
// returns false without running fn. A duplicate processed concurrently
// waits for the first one's transaction (the mark's primary key), and is
// skipped if it committed, run if it rolled back. An error of fn rolls
// everything back and is returned with false; so is a failure of
// PostgreSQL. A panic of fn rolls everything back and goes on up. fn must
// do its work through tx.
func (in *Inbox) Process(ctx context.Context, eventID string, fn func(ctx context.Context, tx pgx.Tx) error) (applied bool, err error) {
	if eventID == "" {
		return false, ErrEmptyEventID
	}
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("pgstore: inbox: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	tag, err := tx.Exec(ctx, in.insert, eventID)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == serializationFailure:
		// Under REPEATABLE READ or SERIALIZABLE (the server's
		// default_transaction_isolation), the mark of a duplicate that
		// committed while this one waited on it is not in this
		// transaction's snapshot: PostgreSQL refuses the insert rather
		// than skip it. The mark is the transaction's first statement, so
		// that is the only conflict it can meet: processed before.
		return false, nil
	case err != nil:
		return false, fmt.Errorf("pgstore: inbox: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // processed before
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("pgstore: inbox: commit: %w", err)
	}
	return true, nil
}
