-- acquire.lua: take or re-enter a lock, with a lease, in one step.
--
-- KEYS[1]  the lock hash  <prefix>:{<name>}      field = owner id, value = reentry count
-- KEYS[2]  the fence hash <prefix>:{<name>}:f    n = last token granted, r = last token released
-- ARGV[1]  owner id ("<client id hex>:<thread id>")
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  reentry depth the client believes this owner has now (0: a fresh acquire)
-- ARGV[4]  how long the fence hash outlives the last acquisition, ms
-- ARGV[5]  a token the client proposes (Redlock: the same on every node, so
--          that nodes whose counters are behind agree; 0 for none). It can
--          only raise a token, never lower it below last + 1.
--
-- Returns
--   {1, token, depth}  acquired; depth = the owner's reentry count now
--   {0, pttl}          held by another owner; pttl = its remaining lease in ms
--   {-1, depth}        the owner's count on the server is not what the client
--                      believes (0: its earlier hold expired): nothing changed
--
-- Idempotent: a retry of the same request after a lost reply finds the count
-- one above ARGV[3] and reports success again without counting twice.
-- Tokens: last + 1 while the fence hash lives; when it does not (new name,
-- or idle for ARGV[4] ms) the server time in microseconds, which is above
-- every token issued before (each acquisition takes more than a
-- microsecond). ARGV[5] can raise a token, never lower it.
local owner = ARGV[1]
local expect = tonumber(ARGV[3])
-- The common case first: a fresh acquire of a free lock.
if expect == 0 and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('HSET', KEYS[1], owner, 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local tok = redis.call('HINCRBY', KEYS[2], 'n', 1)
    local want = tok
    if tok == 1 then
        local t = redis.call('TIME')
        want = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    local hint = tonumber(ARGV[5] or '0')
    if hint > want then
        want = hint
    end
    if want ~= tok then
        redis.call('HSET', KEYS[2], 'n', string.format('%d', want))
    end
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
    return {1, want, 1}
end
local cur = tonumber(redis.call('HGET', KEYS[1], owner) or '0')
if cur == expect + 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(redis.call('HGET', KEYS[2], 'n') or '0'), cur}
end
if cur ~= expect then
    return {-1, cur}
end
if cur == 0 then
    return {0, redis.call('PTTL', KEYS[1])}
end
local depth = redis.call('HINCRBY', KEYS[1], owner, 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, tonumber(redis.call('HGET', KEYS[2], 'n') or '0'), depth}
