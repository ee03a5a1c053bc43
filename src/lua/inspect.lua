-- inspect.lua: what a lock looks like now, for status tools.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fence hash
-- KEYS[3]  the fair-mode queue (zset of waiter ids)
--
-- Returns {pttl, {owner, count, ...}, last token, queue length}
-- pttl is -2 when the lock is free.
local pttl = redis.call('PTTL', KEYS[1])
local fields = redis.call('HGETALL', KEYS[1])
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
return {pttl, fields, n, redis.call('ZCARD', KEYS[3])}
