-- acquire: replay a completed request, or lock a new one.
-- KEYS[1] response key, KEYS[2] lock key (one hash tag, one slot)
-- ARGV[1] new owner token, ARGV[2] lock TTL in milliseconds
-- Returns the stored record (a bulk string), 1 if the lock was taken,
-- or 0 if another request holds it.
local record = redis.call("GET", KEYS[1])
if record then
	return record
end
if redis.call("SET", KEYS[2], ARGV[1], "NX", "PX", ARGV[2]) then
	return 1
end
return 0
