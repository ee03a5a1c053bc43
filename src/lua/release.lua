-- release.lua: give back one reentry level; at zero, hand the lock to the
-- first live fair-mode waiter if any are queued, else delete it; either way
-- announce it on the lock's channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fence hash
-- KEYS[3]  the fair queue (list of owner ids, oldest first)
-- KEYS[4]  the fair queue deadlines (zset: owner id -> server ms)
-- ARGV[1]  owner id
-- ARGV[2]  the reentry depth the client believes the owner has (>= 1)
-- ARGV[3]  the lock's fencing token
-- ARGV[4]  the pub/sub channel of the lock
-- ARGV[5]  handoff lease in ms: what a waiter handed the lock gets until it
--          confirms (extends) it
-- ARGV[6]  how long the fence hash lives, ms
-- ARGV[7]  an id of this release request, unique per client and request:
--          published with 'r' so that a process hearing the same release
--          from several Redlock nodes wakes once
--
-- Returns
--   1  released (published 'r ID'), or handed over (published 'h TOKEN OWNER'
--      on ARGV[4]:<the new owner's client id>, heard by its process only)
--   2  one level given back, still held
--   3  already done: a retry of a release whose reply was lost
--   0  not the owner (the lease expired, or another owner has it)
local owner = ARGV[1]
local publish = ARGV[8] == '1' and 'SPUBLISH' or 'PUBLISH'
local expect = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[1], owner) or '0')
if cur == expect then
    if cur > 1 then
        redis.call('HINCRBY', KEYS[1], owner, -1)
        return 2
    end
    redis.call('DEL', KEYS[1])
    local head = redis.call('LPOP', KEYS[3])
    if head then
        local t = redis.call('TIME')
        local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        while head do
            local dl = redis.call('ZSCORE', KEYS[4], head)
            redis.call('ZREM', KEYS[4], head)
            if dl and tonumber(dl) >= now_ms then
                redis.call('HSET', KEYS[1], head, 1)
                redis.call('PEXPIRE', KEYS[1], ARGV[5])
                local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
                local tok = tonumber(redis.call('HGET', KEYS[2], 'n') or '0') + 1
                if now > tok then
                    tok = now
                end
                local stok = string.format('%d', tok)
                redis.call('HSET', KEYS[2], 'r', ARGV[3], 'n', stok)
                redis.call('PEXPIRE', KEYS[2], ARGV[6])
                -- Only the new owner's process listens on this channel:
                -- <channel>:<client id> (the owner id's first 32 chars).
                redis.call(publish, ARGV[4] .. ':' .. string.sub(head, 1, 32),
                           'h ' .. stok .. ' ' .. head)
                return 1
            end
            head = redis.call('LPOP', KEYS[3])
        end
    end
    redis.call('HSET', KEYS[2], 'r', ARGV[3])
    redis.call(publish, ARGV[4], 'r ' .. (ARGV[7] or ''))
    return 1
end
if cur > 0 and cur == expect - 1 then
    return 3
end
if cur == 0 and expect == 1 and redis.call('HGET', KEYS[2], 'r') == ARGV[3] then
    return 3
end
return 0
