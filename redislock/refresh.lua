-- refresh: extend the lock, fenced by the owner token.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] lock TTL in milliseconds
-- Returns 1, or 0 if the token no longer owns the lock.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
return redis.call("PEXPIRE", KEYS[1], ARGV[2])
