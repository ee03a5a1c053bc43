-- waiters.lua: how many processes wait for a lock by notification, for
-- dlock_lock_inspect().
--
-- KEYS[1]  the lock's release channel, "<prefix>:{NAME}:c" (a channel, not
--          a key: passed as a key so that it routes with the lock's slot)
--
-- Returns the number of subscribers of the channel (PUBSUB NUMSUB): a
-- waiting process keeps one subscription per lock, whatever its number of
-- waiting threads, and keeps it up to 2 s after its last waiter left.
local r = redis.call('PUBSUB', 'NUMSUB', KEYS[1])
return tonumber(r[2]) or 0
