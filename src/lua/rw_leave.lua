-- rw_leave.lua: a waiting writer gives up (its wait ran out, or it was
-- cancelled, or it failed): it takes its writer-waiting mark with it, so
-- that new readers are kept out only for writers that still wait.
--
-- KEYS[1]  the lock hash (see rw_acquire.lua): '#w:<owner>' = server ms
--          until which that waiting writer keeps new readers out;
--          '#w' = the latest of them (what readers and inspect read)
-- ARGV[1]  owner id of the writer
-- ARGV[2]  the lock's pub/sub channel
-- ARGV[3]  an id of this request ('r ID' is published)
-- ARGV[4]  '1': publish with SPUBLISH (Redis Cluster), else PUBLISH
--
-- Returns 1 when the writer's mark was removed (readers waiting on it are
-- woken when no live mark remains), 0 when it had none here.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or
    redis.call('HDEL', KEYS[1], '#w:' .. ARGV[1]) == 0 then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HGETALL', KEYS[1])
local top = 0
for i = 1, #f, 2 do
    if string.sub(f[i], 1, 3) == '#w:' then
        local m = tonumber(f[i + 1]) or 0
        if m > now then
            if m > top then
                top = m
            end
        else
            redis.call('HDEL', KEYS[1], f[i])
        end
    end
end
if top > 0 then
    redis.call('HSET', KEYS[1], '#w', string.format('%d', top))
    return 1
end
redis.call('HDEL', KEYS[1], '#w')
if redis.call('HEXISTS', KEYS[1], '#r') == 1 or
    redis.call('HEXISTS', KEYS[1], '#l') == 1 then
    -- Readers hold it, or one kept out by the mark listens ('#l',
    -- rw_acquire.lua): those kept out may enter now.
    redis.pcall(ARGV[4] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2],
                'r ' .. ARGV[3])
end
return 1
