-- acquire: replay a completed request, or lock a new one.
-- KEYS[1] response key, KEYS[2] lock key (one hash tag, one slot)
-- ARGV[1] new owner token, ARGV[2] lock TTL in milliseconds
-- Returns the stored record (a bulk string), 1 if the lock was taken,
-- or 0 if another request holds it. A lock already holding ARGV[1] is a
-- retry of this very call whose reply was lost (go-redis retries after a
-- read timeout or EOF): it is ours, so 1 again.
local record = redis.call("GET", KEYS[1])
if record then
	return record
end
local lock = redis.call("GET", KEYS[2])
if lock == ARGV[1] then
	return 1
end
if lock then
	return 0
end
redis.call("SET", KEYS[2], ARGV[1], "PX", ARGV[2])
return 1
