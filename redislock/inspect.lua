-- inspect: what a key holds, for operators (Store.Inspect).
-- KEYS[1] response key, KEYS[2] lock key
-- Returns {record PTTL, record or "", lock PTTL, lock or ""}: a PTTL of -2
-- is a missing key, -1 one without a TTL.
return {
	redis.call("PTTL", KEYS[1]), redis.call("GET", KEYS[1]) or "",
	redis.call("PTTL", KEYS[2]), redis.call("GET", KEYS[2]) or "",
}
