-- purge: delete the record while the purge holds the key's lock (taken with
-- bsm/redislock's Obtain, so that no request starts on the key meanwhile),
-- and tell every process's replay cache (core.Invalidator).
-- KEYS[1] response key, KEYS[2] lock key; ARGV[1] the purge's lock token,
-- ARGV[2] the invalidation channel, ARGV[3] the store key.
-- Returns 1 (deleted), 0 (no record), or -1 if the purge lost its lock;
-- deleted but not published (an ACL user without the channel's right), the
-- error of PUBLISH as a string: a script's writes stay when it fails, so
-- failing there would report a purge that did delete.
if redis.call("GET", KEYS[2]) ~= ARGV[1] then
	return -1
end
local n = redis.call("DEL", KEYS[1])
if n == 1 then
	local published = redis.pcall("PUBLISH", ARGV[2], ARGV[3])
	if type(published) == "table" and published.err then
		return published.err
	end
end
return n
