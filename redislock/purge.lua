-- purge: delete the record while the purge holds the key's lock (taken with
-- bsm/redislock's Obtain, so that no request starts on the key meanwhile).
-- KEYS[1] response key, KEYS[2] lock key; ARGV[1] the purge's lock token
-- Returns 1 (deleted), 0 (no record), or -1 if the purge lost its lock.
if redis.call("GET", KEYS[2]) ~= ARGV[1] then
	return -1
end
return redis.call("DEL", KEYS[1])
