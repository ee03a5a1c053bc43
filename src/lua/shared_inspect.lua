-- shared_inspect.lua: what a semaphore or a read-write lock's readers look
-- like now, for status tools and adopting a permit or a reader.
--
-- KEYS[1]  the lock hash or the semaphore zset <prefix>:{<name>}
-- KEYS[2]  the fence hash
-- KEYS[3]  the waiters' deadlines (semaphore: zset owner -> deadline in
--          server ms * 2048 + handoff lease, see sem_acquire.lua)
-- KEYS[4]  the readers' zset (read-write lock)
-- ARGV[1]  at most this many holders are listed
-- ARGV[2]  an owner id to look for beyond that list ("" for none)
--
-- Returns {kind, limit, count, {owner, ms left, token, ...}, queued,
--          last token, ms left of a waiting writer's mark, found, its token}
--   kind   0 nothing there, 1 a lock or read-write lock, 2 a semaphore
--   limit  the semaphore's N (0 for a lock)
--   count  live holders: permits (semaphore) or readers (lock)
--   queued live waiters in the semaphore's queue (deadline not passed)
--   found  ms left of ARGV[2]'s permit or read lease, -1 if it has none
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local snow = '(' .. string.format('%d', now)
local ty = redis.call('TYPE', KEYS[1]).ok
local kind, limit, set = 0, 0, KEYS[4]
if ty == 'zset' then
    kind, set = 2, KEYS[1]
    limit = tonumber(redis.call('ZSCORE', KEYS[1], '#') or '0')
elseif ty == 'hash' or redis.call('EXISTS', KEYS[4]) == 1 then
    kind = 1
elseif redis.call('HGET', KEYS[2], 'k') == 's' then
    kind = 2
end
local list = {}
local count = 0
local found, ftok = -1, 0
if redis.call('TYPE', set).ok == 'zset' then
    count = redis.call('ZCOUNT', set, snow, '+inf')
    local m = redis.call('ZRANGEBYSCORE', set, snow, '+inf', 'WITHSCORES',
                         'LIMIT', 0, tonumber(ARGV[1]))
    for i = 1, #m, 2 do
        list[#list + 1] = m[i]
        list[#list + 1] = tonumber(m[i + 1]) - now
        list[#list + 1] = tonumber(redis.call('HGET', KEYS[2], 't:' .. m[i]) or '0')
    end
    if ARGV[2] ~= '' then
        local sc = redis.call('ZSCORE', set, ARGV[2])
        if sc and tonumber(sc) > now then
            found = tonumber(sc) - now
            ftok = tonumber(redis.call('HGET', KEYS[2], 't:' .. ARGV[2]) or '0')
        end
    end
end
local mark = 0
if ty == 'hash' then
    mark = tonumber(redis.call('HGET', KEYS[1], '#w') or '0') - now
    if mark < 0 then
        mark = 0
    end
end
local queued = 0
if kind == 2 then
    queued = redis.call('ZCOUNT', KEYS[3], string.format('%d', now * 2048),
                        '+inf')
end
return {kind, limit, count, list, queued,
        tonumber(redis.call('HGET', KEYS[2], 'n') or '0'), mark, found, ftok}
