DROP TABLE IF EXISTS idempotency_keys_steps;
