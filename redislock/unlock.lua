-- unlock: drop the lock whoever holds it (Store.Unlock, for operators).
-- KEYS[1] lock key. Returns the token of the lock dropped, or false (no
-- lock): the caller ends its count in its quota scope, another slot.
local token = redis.call("GET", KEYS[1])
if token then
	redis.call("DEL", KEYS[1])
end
return token
