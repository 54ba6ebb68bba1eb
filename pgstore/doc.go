// Package pgstore is a core.Store on PostgreSQL (pgx v5, pgxpool): durable
// idempotency records in one table that operators can query, shared by any
// number of API instances.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	if err := pgstore.Migrate(ctx, pool, nil); err != nil { ... }
//	store, err := pgstore.New(pool, nil)
//	...
//	defer store.Close()
//	eng, err := core.New(core.Config{Store: store})
//
// The table (default idempotency_keys) has one row per key: status
// 'processing' with lock_token and locked_until while a request runs,
// 'completed' with record, status_code and expires_at once stored;
// created_at and completed_at tell when. Rows stuck in processing:
//
//	SELECT key, created_at, locked_until FROM idempotency_keys
//	WHERE status = 'processing' AND locked_until < now();
//
// Each operation is one statement, one round trip: Acquire inserts the
// lock, takes over an expired lock or record, or returns the record;
// Complete is fenced by the owner token with core.Store's late-store rule;
// Release and Refresh are fenced too. Expiries are computed by PostgreSQL
// (now()), so instances whose clocks disagree still agree on them.
//
// A janitor started by New deletes expired rows in small batches, on a
// connection of its own, one instance at a time (an advisory lock); Close
// stops it. Migrate creates and upgrades the table; the same SQL is in
// Migrations for teams that run their own migration tool.
//
// Inbox applies consumed events exactly once: the event's effect and its
// mark in processed_events commit in one transaction (MigrateInbox creates
// the table).
//
// The Store does not implement core.Waiter: a request waiting for an
// in-flight key (core.Config.Wait) polls Acquire. The reasons, and the
// measurements, are in docs/pgstore.md of the repository.
package pgstore
