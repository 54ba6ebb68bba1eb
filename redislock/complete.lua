-- complete: store the record and drop the lock, fenced by the owner token.
-- KEYS[1] response key, KEYS[2] lock key
-- ARGV[1] owner token, ARGV[2] record, ARGV[3] record TTL in milliseconds
-- Returns 1, or 0 (and changes nothing) if the token no longer owns the lock.
-- A record equal to ARGV[2] is this very call's, retried after its reply was
-- lost (a record holds its completion time, so no other request's is
-- equal): done, 1 again.
if redis.call("GET", KEYS[2]) ~= ARGV[1] then
	if redis.call("GET", KEYS[1]) == ARGV[2] then
		return 1
	end
	return 0
end
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
redis.call("DEL", KEYS[2])
return 1
