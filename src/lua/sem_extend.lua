-- sem_extend.lua: renew semaphore permits (the watchdog batches every due
-- permit into one call per server; the same shape as extend.lua).
--
-- KEYS[i]     semaphore zset i
-- ARGV[2i-1]  owner id of permit i
-- ARGV[2i]    new lease of permit i in ms (> 0)
--
-- Returns an array: for each permit, 1 if the owner holds it with a lease
-- that has not run out (by the server's clock) and its deadline is now
-- ARGV[2i] ms from now, 0 if not (an expired permit is never revived:
-- another holder may have its place).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
    out[i] = 0
    if redis.call('TYPE', KEYS[i]).ok == 'zset' then
        local sc = redis.call('ZSCORE', KEYS[i], ARGV[2 * i - 1])
        if sc and tonumber(sc) > now then
            local lease = tonumber(ARGV[2 * i])
            redis.call('ZADD', KEYS[i], now + lease, ARGV[2 * i - 1])
            if redis.call('PTTL', KEYS[i]) < lease then
                redis.call('PEXPIRE', KEYS[i], lease)
            end
            out[i] = 1
        end
    end
end
return out
