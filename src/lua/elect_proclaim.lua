-- elect_proclaim.lua: the leader writes (or changes) its value, and says so.
--
-- KEYS[1]  the lock hash    <prefix>:{<name>}     (field = owner id)
-- KEYS[2]  the leader hash  <prefix>:{<name>}:l   o = owner id, e = epoch,
--                                                 v = value, s = since
-- ARGV[1]  owner id of the leader
-- ARGV[2]  its epoch (the lock's fencing token)
-- ARGV[3]  the value
-- ARGV[4]  how long the leader hash is kept, ms (it is believed only while
--          its owner holds the lock, so it may outlive the lease); "0":
--          forget instead: a resigned leader without fence retention
--          deletes the leader hash if it is still its own (ARGV[2], [3],
--          [5] unused), whether or not it holds the lock (it has just
--          released it), and the script returns 1
-- ARGV[5]  the lock's channel, for "l EPOCH"
-- ARGV[6]  (optional) "1": announce with SPUBLISH (Redis Cluster's
--          sharded channels, where the waiters listen), else PUBLISH
--
-- Returns 1 written (also a retry), 0 the owner does not hold the lock.
-- since (s) is the server's Unix time in ms when this owner first
-- proclaimed this epoch; a later proclaim of the same (owner, epoch) keeps
-- it. Idempotent: a retry writes the same fields again.
if ARGV[4] == '0' then
    if redis.call('HGET', KEYS[2], 'o') == ARGV[1] then
        redis.call('DEL', KEYS[2])
    end
    return 1
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return 0
end
local since = nil
if redis.call('HGET', KEYS[2], 'o') == ARGV[1] and
    redis.call('HGET', KEYS[2], 'e') == ARGV[2] then
    since = redis.call('HGET', KEYS[2], 's')
end
if not since then
    local t = redis.call('TIME')
    since = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
redis.call('HSET', KEYS[2], 'o', ARGV[1], 'e', ARGV[2], 'v', ARGV[3], 's', since)
-- Observers wait for the leader's release (a resignation): mark its hold
-- so that release.lua announces it ('#l').
redis.call('HSET', KEYS[1], '#l', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call(ARGV[6] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[5],
           'l ' .. ARGV[2])
return 1
