-- pgstore's table of idempotency records. Migrate runs this file with the
-- configured schema and table names (see the package doc of pgstore).
CREATE TABLE IF NOT EXISTS idempotency_keys (
	key          text        PRIMARY KEY,  -- the Engine's key: scope, client key (and route), hashed
	status       text        NOT NULL CHECK (status IN ('processing', 'completed')),
	lock_token   text,                     -- the lock's owner; on a record, the request that stored it
	locked_until timestamptz,              -- the lock's expiry; NULL on a record
	record       bytea,                    -- the Engine's encoded record; NULL while processing
	status_code  integer,                  -- the stored HTTP status (or gRPC code)
	created_at   timestamptz NOT NULL DEFAULT now(),
	completed_at timestamptz,
	expires_at   timestamptz               -- the record's expiry; NULL while processing
);
-- The janitor's: records past their expiry.
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
-- Requests in flight, and rows stuck in processing: WHERE status = 'processing' AND locked_until < now().
CREATE INDEX IF NOT EXISTS idempotency_keys_processing_idx ON idempotency_keys (locked_until)
	WHERE status = 'processing';
