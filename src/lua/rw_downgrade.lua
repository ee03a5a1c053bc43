-- rw_downgrade.lua: a writer becomes a reader of the same lock in one
-- step (no other writer can get in between), keeping its owner id and
-- token; readers waiting are told (the lock's channel).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fence hash
-- KEYS[3]  the readers (zset)
-- ARGV[1]  owner id
-- ARGV[2]  the writer's token
-- ARGV[3]  the reader's lease in ms
-- ARGV[4]  the lock's pub/sub channel
-- ARGV[5]  an id of this request ('r ID' is published)
--
-- Returns 1 done (also a retry of a done downgrade), 0 not the writer (its
-- lease ran out), -1 the writer holds it more than once (reentered: a
-- downgrade would leave the other levels without a lock). The hash then
-- lives as long as its longest live reader (rw_cover.luainc), not the
-- writer's lease.
--@include rw_cover.luainc
local owner = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
local depth = tonumber(redis.call('HGET', KEYS[1], owner) or '0')
if depth == 0 then
    local sc = redis.call('ZSCORE', KEYS[3], owner)
    if sc and tonumber(sc) > now then
        return 1
    end
    return 0
end
if depth > 1 then
    return -1
end
-- The writer's field goes, and its token's ('#t', '#f', kept there
-- without fence retention: acquire.lua) and its marks ('#l', '#q':
-- this script announces, the readers' last release wakes the queue), or
-- the hash would outlive the readers.
redis.call('HDEL', KEYS[1], owner, '#t', '#f', '#l', '#q')
redis.call('HSET', KEYS[1], '#r', '1')
redis.call('ZADD', KEYS[3], now + lease, owner)
rw_cover(KEYS[1], KEYS[3], now)
redis.call('HSET', KEYS[2], 't:' .. owner, ARGV[2])
redis.call('PUBLISH', ARGV[4], 'r ' .. ARGV[5])
return 1
