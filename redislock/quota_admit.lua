-- quota_admit: admit a new key of a scope under core.Config.Quota, after
-- acquire.lua took its lock (Store.Acquire). Times are Redis's (TIME), in ms.
-- KEYS[1] the scope's admitted locks (sorted set: token → lock expiry),
-- KEYS[2] its admissions (sorted set: token → time); one hash tag.
-- ARGV[1] the lock's token, ARGV[2] lock TTL, ARGV[3] InFlight, ARGV[4]
-- PerWindow (0: no bound), ARGV[5] Window.
-- Returns {1} (admitted), {0, 0} (too many in flight) or {0, ms} (the window
-- is full; room again in ms). A token already admitted is a run again of
-- this very call whose reply was lost: admitted again, counted once.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, ttl = ARGV[1], tonumber(ARGV[2])
local maxIn, maxWin, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if maxIn > 0 then
	redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
	if not redis.call("ZSCORE", KEYS[1], token) and redis.call("ZCARD", KEYS[1]) >= maxIn then
		return {0, 0}
	end
end
if maxWin > 0 then
	redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now - window)
	if not redis.call("ZSCORE", KEYS[2], token) then
		if redis.call("ZCARD", KEYS[2]) >= maxWin then
			local oldest = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
			return {0, math.max(tonumber(oldest[2]) + window - now, 1)}
		end
		redis.call("ZADD", KEYS[2], now, token)
	end
	redis.call("PEXPIRE", KEYS[2], window)
end
if maxIn > 0 then
	redis.call("ZADD", KEYS[1], now + ttl, token)
	if redis.call("PTTL", KEYS[1]) < ttl then
		redis.call("PEXPIRE", KEYS[1], ttl)
	end
end
return {1}
