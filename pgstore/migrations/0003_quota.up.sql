-- core.Config.Quota. A lock counts in its scope once admitted: quota_scope
-- is the scope's id and quota_token the token admitted, so that a lock
-- taken over later (another token) counts only once admitted itself.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS quota_scope text,
	ADD COLUMN IF NOT EXISTS quota_token text;
-- The admitted locks of a scope.
CREATE INDEX IF NOT EXISTS idempotency_keys_quota_scope_idx ON idempotency_keys (quota_scope, locked_until)
	WHERE status = 'processing' AND quota_scope IS NOT NULL;
-- The admissions of each scope's window, until they leave it; the janitor
-- deletes them after.
CREATE TABLE IF NOT EXISTS idempotency_keys_quota (
	scope text        NOT NULL,  -- the scope's id (core.QuotaFromContext)
	token text        NOT NULL,  -- the lock admitted
	until timestamptz NOT NULL,  -- when it leaves the window
	PRIMARY KEY (scope, token)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_quota_until_idx ON idempotency_keys_quota (until);
