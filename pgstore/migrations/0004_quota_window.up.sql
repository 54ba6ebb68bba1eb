-- A scope's admissions in its window, oldest first: the quota's admission
-- reads no more of them than PerWindow, and none that left the window.
CREATE INDEX IF NOT EXISTS idempotency_keys_quota_window_idx ON idempotency_keys_quota (scope, until);
