-- inspect.lua: what a lock looks like now, for status tools.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fence hash
-- KEYS[3]  the fair-mode queue (zset of waiter ids)
-- KEYS[4]  optional: the holder info hash (holder_set.lua)
--
-- Returns {pttl, {owner, count, ...}, last token, queue length}, and with
-- KEYS[4] a fifth element: the info hash's fields and values, with
-- "age" = server ms since the hold started, when the info describes an
-- owner that holds the lock now; {} otherwise (no info, or the info of an
-- earlier hold: never shown as the holder's).
-- pttl is -2 when the lock is free.
local pttl = redis.call('PTTL', KEYS[1])
local fields, held = {}, 0
if redis.call('TYPE', KEYS[1]).ok == 'string' then
    -- A lock of the string layout (s_acquire.lua), shown as the hash
    -- layout's fields: owner -> count, '#t' the token, '#l' its mark.
    local o, c, t, m = string.match(redis.call('GET', KEYS[1]),
                                    '^(%S+) (%d+) (%d+)(.*)$')
    if o then
        fields = {o, c, '#t', t}
        if m ~= '' then
            fields[5], fields[6] = '#l', '1'
        end
        held = tonumber(t)
    end
elseif pttl ~= -2 then
    fields = redis.call('HGETALL', KEYS[1])
    held = tonumber(redis.call('HGET', KEYS[1], '#t') or '0')
end
-- The last token: the fence hash's n, or the hold's '#t' in the lock hash
-- (kept there without fence retention; fields starting with '#' are
-- marks, not owners), the higher.
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
if held > n then
    n = held
end
local out = {pttl, fields, n, redis.call('ZCARD', KEYS[3])}
if KEYS[4] then
    local info = {}
    local o = redis.call('HGET', KEYS[4], 'o')
    if o and redis.call('TYPE', KEYS[1]).ok == 'hash' and
        redis.call('HEXISTS', KEYS[1], o) == 1 then
        info = redis.call('HGETALL', KEYS[4])
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local s = tonumber(redis.call('HGET', KEYS[4], 's') or now)
        info[#info + 1] = 'age'
        info[#info + 1] = string.format('%d', now - s)
    end
    out[5] = info
end
return out
