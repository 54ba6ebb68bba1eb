-- release: drop the lock without storing, fenced by the owner token.
-- KEYS[1] lock key; ARGV[1] owner token
-- Returns 1 (deleted), 0 if another token holds the lock, or 2 if there is
-- no lock: it expired, or this very call deleted it and its reply was lost
-- (the Store tells the two apart by whether it ran the script again).
local lock = redis.call("GET", KEYS[1])
if lock == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
if lock then
	return 0
end
return 2
