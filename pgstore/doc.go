// Package pgstore is idem's PostgreSQL store (pgx v5, pgxpool): durable
// idempotency records in one table that operators can query, shared by any
// number of API instances.
//
// Migrate creates and upgrades the tables (Migrations holds the same SQL
// for a migration tool of your own); New makes the Store for
// core.Config.Store and starts a janitor that deletes expired rows, one
// instance at a time (Close stops it). Each operation is one statement,
// fenced by the lock's owner token. The Store also implements core.Admin,
// core.Invalidator and core.Checkpointer; it is no core.Waiter (a waiting
// request polls Acquire).
//
// NewTx is the transactional mode: the key is held by a transaction the
// handler writes through (Tx), and the record commits with its rows, or
// nothing does. Inbox applies consumed events exactly once: the effect and
// its mark in processed_events commit in one transaction (MigrateInbox).
//
// See Example; the table, the statements, the janitor, the transactional
// mode and the reasons for each are in [docs/pgstore.md].
//
// [docs/pgstore.md]: https://github.com/idem-go/idem/blob/main/docs/pgstore.md
package pgstore
