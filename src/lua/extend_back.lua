-- extend_back.lua: give back an extension that did not count (too few
-- replicas acknowledged it: a failover could lose it): set the lease
-- back to what the holder still counts on, never longer than it is now.
--
-- KEYS[1]  the lock hash (a lock, a reader's lock; a lock's string in
--          the string layout, s_acquire.lua), or the semaphore
-- KEYS[2]  a reader: the readers' zset (see rw_acquire.lua)
-- ARGV[1]  owner id
-- ARGV[2]  the lease left that the holder counts on, ms (> 0)
-- ARGV[3]  the kind: 'l' a lock, 'p' a semaphore permit, 'r' a reader
--
-- Returns 1 when the lease was shortened to ARGV[2] ms from now, 0 when
-- the owner does not hold it here or its lease is no longer than that.
--@include rw_cover.luainc
local owner, left, kind = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if kind == 'l' then
    local ty = redis.call('TYPE', KEYS[1]).ok
    if ((ty == 'hash' and redis.call('HEXISTS', KEYS[1], owner) == 1) or
        (ty == 'string' and
         string.sub(redis.call('GET', KEYS[1]), 1, #owner + 1) ==
         owner .. ' ')) and
        redis.call('PTTL', KEYS[1]) > left then
        redis.call('PEXPIRE', KEYS[1], left)
        return 1
    end
    return 0
end
local z = kind == 'r' and KEYS[2] or KEYS[1]
if redis.call('TYPE', z).ok ~= 'zset' then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sc = tonumber(redis.call('ZSCORE', z, owner) or '0')
if sc <= now + left then
    return 0
end
redis.call('ZADD', z, 'XX', string.format('%d', now + left), owner)
if kind == 'r' then
    rw_cover(KEYS[1], z, now)
end
return 1
