-- holder_extend.lua: extend.lua for a client that records holder info:
-- renew the leases of one or more locks and, with each, its info hash.
--
-- KEYS[i]        lock hash i (i = 1..n)
-- KEYS[n+i]      info hash of lock i, <prefix>:{<name>}:i
-- ARGV[2i-1]     owner id of lock i
-- ARGV[2i]       new lease of lock i in ms (> 0)
--
-- Returns what extend.lua returns: for each lock, 1 if the owner holds it
-- and its lease was set to ARGV[2i] ms from now, 0 if it does not. The
-- info hash gets the same lease only when it describes that owner's hold.
local n = #KEYS / 2
local out = {}
for i = 1, n do
    local owner = ARGV[2 * i - 1]
    if redis.call('HEXISTS', KEYS[i], owner) == 1 then
        redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
        if redis.call('HGET', KEYS[n + i], 'o') == owner then
            redis.call('PEXPIRE', KEYS[n + i], ARGV[2 * i])
        end
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
