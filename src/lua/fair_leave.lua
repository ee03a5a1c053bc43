-- fair_leave.lua: a fair-mode waiter gives up (deadline or cancellation).
--
-- KEYS[1]  the lock hash (or the string of the string layout)
-- KEYS[2]  the fence hash
-- KEYS[3]  the fair queue (zset)
-- KEYS[4]  the fair queue deadlines
-- ARGV[1]  owner id
--
-- Returns {1, token} when the lock had been handed to this waiter in the
-- meantime (the client then releases it, which hands it on), else {0}.
local owner = ARGV[1]
redis.call('ZREM', KEYS[3], owner)
redis.call('ZREM', KEYS[4], owner)
if redis.call('TYPE', KEYS[1]).ok == 'string' then
    -- A lock of the string layout (s_acquire.lua): "<owner> <count>
    -- <token>[ marks]".
    local o, t = string.match(redis.call('GET', KEYS[1]), '^(%S+) %d+ (%d+)')
    if o == owner then
        return {1, tonumber(t)}
    end
    return {0}
end
if redis.call('HEXISTS', KEYS[1], owner) == 1 then
    -- The hold's token: the fence hash's n, or the lock hash's '#t' (kept
    -- there without fence retention), the higher.
    local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
    local h = tonumber(redis.call('HGET', KEYS[1], '#t') or '0')
    if h > n then
        n = h
    end
    return {1, n}
end
return {0}
