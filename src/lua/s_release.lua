-- s_release.lua: release one level of a lock of the string layout
-- (s_acquire.lua: the value "<owner> <count> <token>", marks after a
-- space: 'l' listened for, 'q' a fair waiter queued behind it).
--
-- KEYS[1]  the lock key
-- KEYS[2]  with fence retention only: the fence hash (r = the last
--          token released, so that a retried release is known; n = the
--          last token granted, written by a hand-over)
-- ARGV[1]  owner id
-- ARGV[2]  the reentry count the client believes the owner has
-- ARGV[3]  the hold's token (0: not known, an undo of an attempt whose
--          answer was lost)
-- ARGV[4]  (optional) "1": announce with SPUBLISH (Redis Cluster)
--
-- The last level of a hold marked 'q' is handed to the first live waiter
-- of the fair queue (<key>:q, <key>:qt, s_place.luainc): it becomes the
-- owner with the lease its deadline carries (at most 2 s) and a new
-- token, and 'h TOKEN OWNER' is published on <key>:c:<its client id>.
-- Else a hold marked 'l' announces 'r TOKEN' on <key>:c (the token:
-- unique per hold on one server, which is what a waiter tells releases
-- apart by).
-- Returns as release.lua: 1 released (handed over, announced where
-- marked), 4 the same but the announcement was refused (ACL), 2 one
-- level given back, 3 a retry of a release already done, 0 not the owner
-- (the lease expired, or another owner has it; its queue place, if any,
-- is dropped).
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] .. ' 1 ' .. ARGV[3] and ARGV[2] == '1' then
    -- The common case: the last level of an unmarked hold.
    redis.call('DEL', KEYS[1])
    if KEYS[2] then
        redis.call('HSET', KEYS[2], 'r', ARGV[3])
    end
    return 1
end
if type(v) == 'table' and v.err then
    return 0 -- not this layout's key: not ours
end
local owner = ARGV[1]
local publish = ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH'
local q, qt = KEYS[1] .. ':q', KEYS[1] .. ':qt'

--@include announce.luainc

--@include s_place.luainc

-- Hand the lock (released with token tok, marks) to the first live
-- waiter; false when none is left.
local function hand(tok, marks)
    local tm = redis.call('TIME')
    local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
    while true do
        local r = redis.call('ZPOPMIN', q)
        local head = r[1]
        if not head then
            return false
        end
        local live, hl = place(head, r[2], now)
        if tonumber(r[2]) % 2 == 1 then
            redis.call('ZREM', qt, head)
        end
        if live then
            local t = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
            local function above(a)
                if a and (#a > #t or (#a == #t and a >= t)) then
                    t = string.format('%d', tonumber(a) + 1)
                end
            end
            above(tok)
            if KEYS[2] then
                above(redis.call('HGET', KEYS[2], 'n'))
                redis.call('HSET', KEYS[2], 'n', t, 'r', tok)
            end
            -- 'q': others may be queued behind it; 'l' kept.
            local m = string.find(marks, 'l', 1, true) and ' lq' or ' q'
            redis.call('SET', KEYS[1], head .. ' 1 ' .. t .. m, 'PX', hl)
            return announce(KEYS[1] .. ':c:' .. string.sub(head, 1, 32),
                            'h ' .. t .. ' ' .. head)
        end
    end
end

if v then
    local o, n, tok, marks = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
    if o == owner then
        if n == ARGV[2] then
            if n ~= '1' then
                redis.call('SET', KEYS[1],
                           o .. ' ' .. (tonumber(n) - 1) .. ' ' .. tok ..
                               marks, 'KEEPTTL')
                return 2
            end
            if string.find(marks, 'q', 1, true) then
                local r = hand(tok, marks)
                if r then
                    return r
                end
            end
            redis.call('DEL', KEYS[1])
            if KEYS[2] then
                redis.call('HSET', KEYS[2], 'r', tok)
            end
            if string.find(marks, 'l', 1, true) then
                return announce(KEYS[1] .. ':c', 'r ' .. tok)
            end
            return 1
        end
        if tonumber(n) == tonumber(ARGV[2]) - 1 then
            return 3
        end
        return 0
    end
end
if KEYS[2] and ARGV[2] == '1' and ARGV[3] ~= '0' and
    redis.call('HGET', KEYS[2], 'r') == ARGV[3] then
    return 3
end
-- Not the owner: a waiter that gave up may still be queued here.
if redis.call('ZREM', q, owner) == 1 then
    redis.call('ZREM', qt, owner)
end
return 0
