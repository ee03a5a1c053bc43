-- kind.lua: what a name's key holds, for the message of an acquire the
-- servers refused with WRONGTYPE (src/hold/kind.c). Read-only.
--
-- KEYS[1]  the name's key <prefix>:{<name>}
-- KEYS[2]  its fence hash <prefix>:{<name>}:f
--
-- Returns {type, sem}: the Redis type of KEYS[1] ('none', 'hash', 'zset',
-- 'string', ...), and 1 when it is a semaphore dlock made (a zset with
-- the limit member '#' and a fence hash marked k = 's'), 2 when it is a
-- lock of the string layout (s_acquire.lua: "<owner> <count> <token>"),
-- else 0.
local ty = redis.call('TYPE', KEYS[1]).ok
local sem = 0
if ty == 'zset' and redis.call('ZSCORE', KEYS[1], '#') and
    redis.call('TYPE', KEYS[2]).ok == 'hash' and
    redis.call('HGET', KEYS[2], 'k') == 's' then
    sem = 1
elseif ty == 'string' and
    string.match(redis.call('GET', KEYS[1]) or '', '^%S+ %d+ %d+') then
    sem = 2
end
return {ty, sem}
