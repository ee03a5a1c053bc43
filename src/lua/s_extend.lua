-- s_extend.lua: renew the leases of locks of the string layout
-- (s_acquire.lua), as extend.lua for the hash layout.
--
-- KEYS[i]        lock key i
-- ARGV[2i-1]     owner id of lock i
-- ARGV[2i]       new lease of lock i in ms (> 0)
--
-- Returns an array: 1 for each lock the owner holds (its lease now
-- ARGV[2i] ms from now), 0 for one it does not.
local out = {}
for i = 1, #KEYS do
    local v = redis.pcall('GET', KEYS[i])
    local o = ARGV[2 * i - 1] .. ' '
    if type(v) == 'string' and string.sub(v, 1, #o) == o then
        redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
