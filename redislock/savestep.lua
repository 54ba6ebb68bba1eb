-- savestep: store a step's checkpoint, fenced by the owner token.
-- KEYS[1] lock key, KEYS[2] steps key (a hash: step name → result; one
-- hash tag, one slot)
-- ARGV[1] owner token, ARGV[2] step, ARGV[3] result, ARGV[4] TTL in
-- milliseconds
-- Returns 1, or 0 (and changes nothing) if the token does not hold the lock.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call("HSET", KEYS[2], ARGV[2], ARGV[3])
if redis.call("PTTL", KEYS[2]) < tonumber(ARGV[4]) then
	redis.call("PEXPIRE", KEYS[2], ARGV[4])
end
return 1
