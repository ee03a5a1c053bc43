-- sem_release.lua: give back a semaphore permit and pass the freed
-- permits on to queued waiters (no herd: one waiter per free permit).
--
-- KEYS[1]  the semaphore zset (see sem_acquire.lua)
-- KEYS[2]  the fence hash
-- KEYS[3]  the waiters' queue (list)
-- KEYS[4]  the waiters' deadlines (zset)
-- ARGV[1]  owner id
-- ARGV[2]  the handoff channel prefix <prefix>:{<name>}:c
-- ARGV[3]  unused (was the handoff lease; each waiter's is in KEYS[4])
-- ARGV[4]  '1': FIFO (hand the permit to the first live waiter), '0': wake
--          the first live waiter ('h 0 OWNER') to try again
-- ARGV[5]  how long the semaphore outlives its last use, ms
-- ARGV[6]  (optional) '1': the owner is a waiter giving up: it also
--          leaves the queue (a permit handed to it meanwhile is released
--          and passed on)
-- ARGV[7]  (optional) '0': no fence retention: a semaphore left with no
--          live holder and nobody queued is deleted (zset, fence hash,
--          deadlines): a released and free name keeps nothing (no
--          tombstone either: a retried release then answers 0)
--
-- Returns
--   1  released (the permit is passed on as ARGV[4] says)
--   3  already released: a retry whose first reply was lost (the holder
--      stays a tombstone for 60 s after its release)
--   0  not a holder: its lease had run out, or the name is not a semaphore
--@include next_token.luainc
--@include sem_pass.luainc
local owner = ARGV[1]
-- In the deadlines exactly while queued (a handoff pops both): the O(n)
-- LREM only for a waiter still in the queue.
if ARGV[6] == '1' and redis.call('ZREM', KEYS[4], owner) == 1 then
    redis.call('LREM', KEYS[3], 0, owner)
end
if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sc = redis.call('ZSCORE', KEYS[1], owner)
if sc and tonumber(sc) < 0 then
    return 3
end
local released = sc and tonumber(sc) > now
if released then
    redis.call('ZADD', KEYS[1], string.format('%d', -(now + 60000)), owner)
    redis.call('HDEL', KEYS[2], 't:' .. owner)
end

-- Reap expired holders and old tombstones.
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '(1000000',
                        string.format('%d', now))
for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], 't:' .. m)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], string.format('%d', -now), '(0')

-- Pass free permits on to live waiters, oldest first.
local limit = tonumber(redis.call('ZSCORE', KEYS[1], '#') or '0')
pass_permits(limit, now, t, ARGV[4], ARGV[2], ARGV[5])
if ARGV[7] == '0' and
    redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now), '+inf') == 0 and
    redis.call('LLEN', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
end
if released then
    return 1
end
return 0
