-- holder_set.lua: record who holds a lock (holder info), right after a
-- fresh acquisition by a client that has holder info on.
--
-- KEYS[1]  the lock hash  <prefix>:{<name>}
-- KEYS[2]  the info hash  <prefix>:{<name>}:i
-- ARGV[1]  owner id of the hold
-- ARGV[2]  host name
-- ARGV[3]  pid
-- ARGV[4]  label (a command line or a user's text; may be empty)
-- ARGV[5]  dlock version
--
-- Writes the info hash {o = owner, h, p, l, v, s = server time in ms}
-- with the lock's own remaining lease, and only while ARGV[1] holds the
-- lock: a late or repeated call after the hold ended writes nothing, and
-- a repeat while it lasts only rewrites the same values (s aside), so it
-- is idempotent enough for the step layer's one retry.
--
-- Returns 1 written, 0 not the holder (nothing written).
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'o', ARGV[1], 'h', ARGV[2], 'p', ARGV[3],
    'l', ARGV[4], 'v', ARGV[5], 's', string.format('%d', now))
redis.call('PEXPIRE', KEYS[2], pttl)
return 1
