-- sem_limit.lua: set a semaphore's limit N (creating the semaphore when
-- the name is unused); a raised limit passes the new permits on to queued
-- waiters as a release does. Holders above a lowered limit keep their
-- permits; new ones are granted only below it.
--
-- KEYS[1]  the semaphore zset (see sem_acquire.lua)
-- KEYS[2]  the fence hash
-- KEYS[3]  the waiters' queue (list)
-- KEYS[4]  the waiters' deadlines (zset)
-- ARGV[1]  the new limit (1 .. 1000000)
-- ARGV[2]  how long the semaphore outlives its last use, ms
-- ARGV[3]  the handoff channel prefix <prefix>:{<name>}:c
-- ARGV[4]  unused (was the handoff lease; each waiter's is in KEYS[4])
-- ARGV[5]  '1': FIFO handoffs, '0': wake waiters
--
-- Returns {1, old limit (0: new)} or {-3, kind}: the name is used by
-- another kind of lock (nothing done).
--@include next_token.luainc
--@include sem_pass.luainc
local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'none' and ty ~= 'zset' then
    return {-3, ty == 'hash' and 'lock' or ty}
end
if redis.call('HGET', KEYS[2], 'k') ~= 's' and
    redis.call('EXISTS', KEYS[2]) == 1 then
    return {-3, 'lock'}
end
local old = tonumber(redis.call('ZSCORE', KEYS[1], '#') or '0')
local limit = tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], limit, '#')
redis.call('HSET', KEYS[2], 'k', 's')
local keep = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < keep then
    redis.call('PEXPIRE', KEYS[1], keep)
end
redis.call('PEXPIRE', KEYS[2], keep)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
pass_permits(limit, now, t, ARGV[5], ARGV[3], keep)
return {1, old}
