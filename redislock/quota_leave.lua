-- quota_leave: a lock ends (Store.Complete, Store.Release): it no longer
-- counts in its scope. KEYS[1] the scope's admitted locks; ARGV[1] the token.
return redis.call("ZREM", KEYS[1], ARGV[1])
