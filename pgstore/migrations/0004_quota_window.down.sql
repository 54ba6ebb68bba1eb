DROP INDEX IF EXISTS idempotency_keys_quota_window_idx;
