-- rw_extend.lua: renew readers' leases (the watchdog batches every due
-- reader into one call per server).
--
-- KEYS[2i-1]  lock hash of reader i
-- KEYS[2i]    the readers' zset of that lock
-- ARGV[2i-1]  owner id of reader i
-- ARGV[2i]    new lease in ms (> 0)
--
-- Returns an array: for each reader, 1 if it still reads (its lease has
-- not run out by the server's clock, and the hash still says readers hold
-- it) and its deadline is now ARGV[2i] ms from now; else 0 (never
-- revived: a writer may have taken the lock). The hash then lives as
-- long as its longest live reader (rw_cover.luainc).
--@include rw_cover.luainc
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS / 2 do
    local h, r = KEYS[2 * i - 1], KEYS[2 * i]
    local owner, lease = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
    out[i] = 0
    if redis.call('TYPE', r).ok == 'zset' and
        redis.call('TYPE', h).ok == 'hash' then
        local sc = redis.call('ZSCORE', r, owner)
        if sc and tonumber(sc) > now and
            redis.call('HEXISTS', h, '#r') == 1 then
            redis.call('ZADD', r, now + lease, owner)
            rw_cover(h, r, now)
            out[i] = 1
        end
    end
end
return out
