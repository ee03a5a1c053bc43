-- fence_raise.lua: raise a lock's token counter to at least a given token
-- (Redlock: after winning a majority, make the chosen token the floor on a
-- majority so that any later winner, whose majority intersects this one,
-- sees it).
--
-- KEYS[1]  the fence hash
-- ARGV[1]  the token
-- ARGV[2]  the fence hash's retention, ms: its TTL is set to twice it,
--          as every renewal does (acquire.lua, field e)
--
-- Returns the counter after the call (>= ARGV[1]).
local want = tonumber(ARGV[1])
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
if n < want then
    redis.call('HSET', KEYS[1], 'n', ARGV[1])
    n = want
end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
return n
