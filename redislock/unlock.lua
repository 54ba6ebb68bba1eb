-- unlock: drop the lock whoever holds it (Store.Unlock, for operators).
-- KEYS[1] lock key. Returns 1 (deleted) or 0 (no lock).
return redis.call("DEL", KEYS[1])
