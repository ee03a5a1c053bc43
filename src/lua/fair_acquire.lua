-- fair_acquire.lua: acquire in arrival order. A caller that cannot have the
-- lock now is queued (or, already queued, has its place refreshed); the
-- release script hands the lock to the queue's first live waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fence hash
-- KEYS[3]  the fair queue (list of owner ids, oldest first)
-- KEYS[4]  the fair queue deadlines (zset: owner id -> server time ms after
--          which the waiter counts as dead unless it refreshes)
-- ARGV[1]  owner id
-- ARGV[2]  lease in ms
-- ARGV[3]  reentry depth the client believes the owner has (0 here)
-- ARGV[4]  how long the fence hash outlives the last acquisition, ms
-- ARGV[5]  unused (token hint of acquire.lua, kept for one argument layout)
-- ARGV[6]  waiter time-to-live in ms (by the server's clock)
-- ARGV[7]  "1": join (or refresh) the queue when the lock cannot be had;
--          "0": only try (respecting the queue), do not join
--
-- Returns like acquire.lua:
--   {1, token, depth}  acquired, or found handed over (the lease is then set
--                      to ARGV[2]: this call confirms the handoff)
--   {0, pttl}          not acquired (queued if ARGV[7] is "1"); pttl = the
--                      holder's remaining lease (-2: free but a live waiter
--                      is ahead)
--   {-1, depth}        the owner's count is not what the client believes
local owner = ARGV[1]
local expect = tonumber(ARGV[3])
local cur = tonumber(redis.call('HGET', KEYS[1], owner) or '0')
if cur == expect + 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('LREM', KEYS[3], 0, owner)
    redis.call('ZREM', KEYS[4], owner)
    return {1, tonumber(redis.call('HGET', KEYS[2], 'n') or '0'), cur}
end
if cur ~= expect then
    return {-1, cur}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Waiters that stopped refreshing drop out when they reach the head.
local head = redis.call('LINDEX', KEYS[3], 0)
while head do
    local dl = redis.call('ZSCORE', KEYS[4], head)
    if dl and tonumber(dl) >= now_ms and head ~= owner then
        break
    end
    if head == owner then
        break
    end
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], head)
    head = redis.call('LINDEX', KEYS[3], 0)
end
if redis.call('EXISTS', KEYS[1]) == 0 and (not head or head == owner) then
    if head then
        redis.call('LPOP', KEYS[3])
        redis.call('ZREM', KEYS[4], owner)
    end
    redis.call('HSET', KEYS[1], owner, 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local tok = tonumber(redis.call('HGET', KEYS[2], 'n') or '0') + 1
    if now > tok then
        tok = now
    end
    redis.call('HSET', KEYS[2], 'n', string.format('%d', tok))
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
    return {1, tok, 1}
end
if ARGV[7] ~= '1' then
    return {0, redis.call('PTTL', KEYS[1])}
end
if not redis.call('ZSCORE', KEYS[4], owner) then
    redis.call('RPUSH', KEYS[3], owner)
end
redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[6]), owner)
return {0, redis.call('PTTL', KEYS[1])}
