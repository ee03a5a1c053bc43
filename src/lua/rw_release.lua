-- rw_release.lua: a reader leaves a read-write lock. The last reader out
-- frees the lock for writers and announces it on the lock's channel (only
-- the last: writers have nothing to gain from the others).
--
-- KEYS[1]  the lock hash (see rw_acquire.lua)
-- KEYS[2]  the fence hash
-- KEYS[3]  the readers (zset)
-- KEYS[4]  (optional) the lock's fair queue (zset, see acquire.lua): the
--          last reader out wakes its first writer ('w ID OWNER' on
--          ARGV[2]:<OWNER's client id>), which then takes the lock
-- ARGV[1]  owner id
-- ARGV[2]  the lock's pub/sub channel
-- ARGV[3]  an id of this release request ('r ID' is published)
-- ARGV[4]  (optional) '0': no fence retention: the last reader out of a
--          name nobody else holds, marks or queues for deletes the
--          readers' zset and the fence hash (their tombstones and tokens
--          too: a retried release then answers 0)
--
-- Returns
--   1  released
--   3  already released: a retry whose first reply was lost (a tombstone
--      stays 60 s)
--   0  not a reader: its lease had run out
-- While readers remain, the hash lives as long as the longest of them
-- (rw_cover.luainc): the one leaving may have had the longest lease.
--@include rw_cover.luainc
local owner = ARGV[1]
if redis.call('TYPE', KEYS[3]).ok ~= 'zset' then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sc = redis.call('ZSCORE', KEYS[3], owner)
if sc and tonumber(sc) < 0 then
    return 3
end
if not sc or tonumber(sc) <= now then
    return 0
end
redis.call('ZADD', KEYS[3], string.format('%d', -(now + 60000)), owner)
redis.call('HDEL', KEYS[2], 't:' .. owner)
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '(0', string.format('%d', now))
for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[3], m)
    redis.call('HDEL', KEYS[2], 't:' .. m)
end
if redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%d', now), '+inf') == 0 then
    -- The last reader: the lock is the writers'. A waiting writer's mark
    -- stays (acquire.lua takes a hash holding only the mark as free) so
    -- that readers woken by the same message do not get in first.
    -- (With a writer's marks a downgrade of an earlier version left.)
    redis.call('HDEL', KEYS[1], '#r', '#l', '#q')
    local mark = tonumber(redis.call('HGET', KEYS[1], '#w') or '0')
    if mark <= now then
        rw_unmark(KEYS[1])
    end
    redis.call('PUBLISH', ARGV[2], 'r ' .. ARGV[3])
    local head = KEYS[4] and redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if head then
        redis.pcall('PUBLISH', ARGV[2] .. ':' .. string.sub(head, 1, 32),
                    'w ' .. ARGV[3] .. ' ' .. head)
    elseif ARGV[4] == '0' and redis.call('EXISTS', KEYS[1]) == 0 then
        -- Without retention, free and nobody waiting: nothing stays.
        redis.call('DEL', KEYS[2], KEYS[3])
    end
else
    rw_cover(KEYS[1], KEYS[3], now)
end
return 1
