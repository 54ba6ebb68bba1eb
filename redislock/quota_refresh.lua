-- quota_refresh: move an admitted lock's expiry with its lock's refresh
-- (Store.Refresh). KEYS[1] the scope's admitted locks; ARGV[1] the token,
-- ARGV[2] lock TTL in ms. A lock no longer counted (it expired) stays out.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
	return 0
end
redis.call("ZADD", KEYS[1], now + ttl, ARGV[1])
if redis.call("PTTL", KEYS[1]) < ttl then
	redis.call("PEXPIRE", KEYS[1], ttl)
end
return 1
