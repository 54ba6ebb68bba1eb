-- loadsteps: a key's checkpoints. KEYS[1] steps key.
-- Returns {step, result, step, result, ...}.
return redis.call("HGETALL", KEYS[1])
