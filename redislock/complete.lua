-- complete: store the record and drop the lock and the checkpoints of the
-- key's steps, fenced by the owner token.
-- KEYS[1] response key, KEYS[2] lock key, KEYS[3] steps key
-- ARGV[1] owner token, ARGV[2] record, ARGV[3] record TTL in milliseconds
-- Returns 1, or 0 (and changes nothing) if another request holds the lock
-- or stored a record.
local lock = redis.call("GET", KEYS[2])
if lock == ARGV[1] then
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
	redis.call("DEL", KEYS[2], KEYS[3])
	return 1
end
if lock then
	return 0
end
local record = redis.call("GET", KEYS[1])
if not record then
	-- The lock expired and no other request took the key: the handler ran
	-- once; storing its response late keeps a retry from running it again.
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
	redis.call("DEL", KEYS[3])
	return 1
end
-- A record equal to ARGV[2] is this very call's, retried after its reply
-- was lost (a record holds its completion time, so no other request's is
-- equal): done, 1 again.
if record == ARGV[2] then
	return 1
end
return 0
