DROP TABLE IF EXISTS idempotency_keys_quota;
-- Its index goes with the column.
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS quota_scope, DROP COLUMN IF EXISTS quota_token;
