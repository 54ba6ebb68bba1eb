-- The checkpoints of core.Step: one row per step of a key whose handler
-- runs steps, written while the key's lock is held, deleted when its record
-- is stored or by the janitor once expired.
CREATE TABLE IF NOT EXISTS idempotency_keys_steps (
	key        text        NOT NULL,  -- the key of idempotency_keys
	step       text        NOT NULL,  -- the step's name
	result     bytea       NOT NULL,  -- the step's result, as the Engine encoded it
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, step)
);
-- The janitor's: checkpoints past their expiry.
CREATE INDEX IF NOT EXISTS idempotency_keys_steps_expires_at_idx ON idempotency_keys_steps (expires_at);
