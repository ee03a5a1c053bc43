-- s_acquire.lua: take or re-enter an exclusive lock in the string layout
-- (dlock_client_set_layout, DLOCK_LAYOUT_STRING; docs/design.md, "The
-- string layout"). One server or a Cluster; no fair queue.
--
-- KEYS[1]  the lock key <prefix>:{<name>}, a STRING while held:
--          "<owner> <count> <token>" and, once someone found it busy and
--          may wait for its release, " l" (the listeners' mark); its TTL
--          is the lease
-- KEYS[2]  with fence retention only: the fence hash <prefix>:{<name>}:f
--          (n = last token granted, d = the server second from which a
--          grant renews its TTL, as acquire.lua)
-- ARGV[1]  owner id (no spaces)
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  reentry depth the client believes this owner has now (0: a
--          fresh acquire)
-- ARGV[4]  with fence retention only: the retention in ms. Without
--          (neither KEYS[2] nor ARGV[4] sent) the token is the server's
--          time in us and nothing but the lock key is touched. (Every key
--          and argument costs Redis about 1k instructions a call:
--          docs/benchmarks.md.)
--
-- Returns as acquire.lua:
--   {1, token, depth}  acquired (or a retry of an applied acquire found)
--   {0, pttl}          held by another owner (the hold is marked " l":
--                      its release announces 'r ID' on the lock channel)
--   {-1, depth}        the owner's count is not what the client believes
--   {-3, kind}         the key is not this layout's: 'lock-hash' (a lock
--                      of the hash layout: another client, or an earlier
--                      version), or the Redis type of a value dlock did
--                      not write; nothing changed
-- The fresh, uncontended acquire is TIME and SET NX PX (with retention
-- also the fence hash's HMGET and HSET): the lock key exists while a hold
-- does, so SET NX alone decides.
local owner, keep = ARGV[1], ARGV[4]
if ARGV[3] == '0' then
    local tm = redis.call('TIME')
    local tok = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
    local renew = false
    if keep then
        local fence = redis.call('HMGET', KEYS[2], 'n', 'd')
        local last = fence[1]
        if last and (#last > #tok or (#last == #tok and last >= tok)) then
            tok = string.format('%d', tonumber(last) + 1)
        end
        renew = not fence[2] or tm[1] >= fence[2]
    end
    if redis.call('SET', KEYS[1], owner .. ' 1 ' .. tok, 'NX', 'PX',
                  ARGV[2]) then
        if renew then
            redis.call('HSET', KEYS[2], 'n', tok, 'd',
                       string.format('%d', tonumber(tm[1]) +
                                           math.floor(tonumber(keep) / 1000)))
            redis.call('PEXPIRE', KEYS[2], 2 * tonumber(keep))
        elseif keep then
            redis.call('HSET', KEYS[2], 'n', tok)
        end
        return {1, tok, 1}
    end
end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
    local ty = redis.call('TYPE', KEYS[1]).ok
    return {-3, ty == 'hash' and 'lock-hash' or ty}
end
if not v then
    return {-1, 0} -- a reentry whose hold is gone
end
local o, n, tok, marks = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
if not o then
    return {-3, 'string'}
end
local expect = tonumber(ARGV[3])
if o ~= owner then
    if marks == '' then
        -- Someone may wait for the release: mark the hold (its release
        -- publishes only then). A waiter subscribes before its next
        -- attempt, which marks again whatever hold it finds.
        redis.call('SET', KEYS[1], v .. ' l', 'KEEPTTL')
    end
    if expect > 0 then
        return {-1, 0}
    end
    return {0, redis.call('PTTL', KEYS[1])}
end
local cur = tonumber(n)
if cur == expect + 1 then
    -- A retry of an applied acquire: confirm, with the lease asked.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tok, cur}
end
if cur ~= expect then
    return {-1, cur}
end
cur = cur + 1
redis.call('SET', KEYS[1], o .. ' ' .. cur .. ' ' .. tok .. marks, 'PX',
           ARGV[2])
return {1, tok, cur}
