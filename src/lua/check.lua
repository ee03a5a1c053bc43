-- check.lua: is a token the fencing token of a live hold of this name?
-- (dlock_lock_check, src/api/check.c). Read-only.
--
-- KEYS[1]  the lock hash (the string of the string layout), or the
--          semaphore's zset <prefix>:{<name>}
-- KEYS[2]  the fence hash: n = the last token granted; t:<owner> = the
--          token of a reader or a permit
-- KEYS[3]  the readers' zset (read-write lock)
-- ARGV[1]  the token, in decimal
--
-- Returns {holds, held, n}:
--   holds  1 when ARGV[1] is the token of a live hold here: the writer's
--          (a lock held by an owner: its token is n), or a live reader's
--          or permit's own token (each has one: n is only the latest);
--          without fence retention the writer's token is the lock hash's
--          '#t', and n is the higher of the two; a string lock whose
--          token is not issued yet counts as the server's time now
--   held   1 when anything holds the name here (writer, reader, permit)
--   n      the last token granted (0: none)
local tok = ARGV[1]
local n = redis.call('HGET', KEYS[2], 'n') or '0'
local holds, held = 0, 0
local function live(z)
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    -- Deadlines in server ms: a semaphore's limit member '#' (score at
    -- most 10^6) and tombstones (negative) are never above now.
    local m = redis.call('ZRANGEBYSCORE', z, '(' .. string.format('%d', now),
                         '+inf')
    for _, o in ipairs(m) do
        held = 1
        if redis.call('HGET', KEYS[2], 't:' .. o) == tok then
            holds = 1
            return
        end
    end
end
local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'hash' then
    -- A writer's token kept in the lock hash ('#t', without fence
    -- retention: acquire.lua) when it is above n.
    local ht = redis.call('HGET', KEYS[1], '#t')
    if ht and (#ht > #n or (#ht == #n and ht > n)) then
        n = ht
    end
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
        if string.sub(f, 1, 1) ~= '#' then
            held = 1 -- a writer: its token is the last granted
            if n == tok then
                holds = 1
            end
        end
    end
    if holds == 0 and redis.call('HEXISTS', KEYS[1], '#r') == 1 and
        redis.call('TYPE', KEYS[3]).ok == 'zset' then
        live(KEYS[3])
    end
elseif ty == 'zset' then
    live(KEYS[1])
elseif ty == 'string' then
    -- A lock of the string layout (s_acquire.lua): its value carries the
    -- holder's token.
    local v = string.match(redis.call('GET', KEYS[1]), '^%S+ %d+ (%d+)')
    if v == '0' then
        -- Its token is not issued yet (a plain SET, s_stamp.lua): when it
        -- is, it will be at least the server's time now, above every
        -- token granted before; so a token below that is an earlier
        -- hold's (stale), one above it nobody's yet.
        local tm = redis.call('TIME')
        v = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
    end
    if v then
        held = 1
        if #v > #n or (#v == #n and v > n) then
            n = v
        end
        if v == tok then
            holds = 1
        end
    end
end
return {holds, held, tonumber(n)}
