-- extend.lua: renew the leases of one or more locks of one owner each.
--
-- KEYS[i]        lock hash i
-- ARGV[2i-1]     owner id of lock i
-- ARGV[2i]       new lease of lock i in ms (> 0)
--
-- Returns an array: for each lock, 1 if the owner holds it and its lease was
-- set to ARGV[2i] ms from now, 0 if it does not (expired or taken).
-- The watchdog batches every lock it renews on one server into one call.
local out = {}
for i = 1, #KEYS do
    if redis.call('HEXISTS', KEYS[i], ARGV[2 * i - 1]) == 1 then
        redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
