-- acquire.lua: take or re-enter a lock, with a lease, in one step; in fair
-- mode, respecting (and optionally joining) the queue of waiters.
--
-- KEYS[1]  the lock hash  <prefix>:{<name>}      field = owner id, value = reentry count
-- KEYS[2]  the fence hash <prefix>:{<name>}:f    n = last token granted, r = last token released
-- KEYS[3]  the fair queue <prefix>:{<name>}:q    list of owner ids, oldest first
-- KEYS[4]  the fair queue deadlines <prefix>:{<name>}:qt   zset owner id -> server ms
--          after which the waiter counts as dead unless it refreshes
-- ARGV[1]  owner id ("<client id hex>:<thread id>")
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  reentry depth the client believes this owner has now (0: a fresh acquire)
-- ARGV[4]  how long the fence hash outlives the last acquisition, ms
-- ARGV[5]  a token the client proposes (Redlock: the same on every node, so
--          that nodes whose counters are behind agree; 0 for none). It can
--          only raise a token, never lower it below last + 1.
-- ARGV[6]  fair mode: waiter time-to-live in ms (by the server's clock);
--          plain mode sends only KEYS[1..2] and ARGV[1..5]
-- ARGV[7]  mode: "0" plain (ignores the queue), "1" fair try (respects the
--          queue, does not join it), "2" fair queue (joins it, or refreshes
--          its place, when the lock cannot be had)
-- ARGV[8]  "1": the caller is waiting (mode "0" sends ARGV[6..8] only
--          then), so readers holding the lock are to let no new reader in
--
-- Read-write locks (rw_*.lua): readers hold this hash under the field
-- '#r' (it exists, so a writer finds it busy). A waiting writer (ARGV[8]
-- "1", or mode "2") that finds readers sets '#w' = server ms until which
-- new readers stay out (writer preference), and a hash left holding only
-- that mark is free for a writer.
--
-- Returns
--   {1, token, depth}  acquired; depth = the owner's reentry count now (also
--                      when a fair handoff is found: this confirms it, the
--                      lease is set to ARGV[2])
--   {0, pttl}          not acquired (queued in mode 2); pttl = the holder's
--                      remaining lease in ms (-2: free, but a live waiter is
--                      ahead in the queue)
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
local mode = ARGV[7] or '0'

-- Grant a fresh acquisition to owner; returns the reply.
local function grant()
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

-- The common case first: a fresh acquire of a free lock nobody queues for.
local held = redis.call('EXISTS', KEYS[1]) == 1
if held and expect == 0 and redis.call('HLEN', KEYS[1]) == 1 and
    redis.call('HEXISTS', KEYS[1], '#w') == 1 then
    redis.call('DEL', KEYS[1]) -- only a waiting writer's mark: free
    held = false
end
if expect == 0 and not held and
    (mode == '0' or redis.call('EXISTS', KEYS[3]) == 0) then
    return grant()
end
local cur = 0
if held then
    cur = tonumber(redis.call('HGET', KEYS[1], owner) or '0')
end
if cur == expect + 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    if mode ~= '0' then
        redis.call('LREM', KEYS[3], 0, owner)
        redis.call('ZREM', KEYS[4], owner)
    end
    return {1, tonumber(redis.call('HGET', KEYS[2], 'n') or '0'), cur}
end
if cur ~= expect then
    return {-1, cur}
end
if cur > 0 then
    local depth = redis.call('HINCRBY', KEYS[1], owner, 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(redis.call('HGET', KEYS[2], 'n') or '0'), depth}
end

-- Busy: a waiting writer that finds readers marks itself (see the top).
local function busy()
    local pttl = redis.call('PTTL', KEYS[1])
    if (ARGV[8] == '1' or mode == '2') and
        redis.call('HEXISTS', KEYS[1], '#r') == 1 then
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        redis.call('HSET', KEYS[1], '#w', string.format('%d', now + pttl + 1000))
    end
    return {0, pttl}
end
if mode == '0' then
    return busy()
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not held then
    -- Free, but waiters are queued: those that stopped refreshing drop out
    -- when they reach the head; the first live one goes first. (While the
    -- lock is held, release.lua skips dead waiters when it hands over.)
    local head = redis.call('LINDEX', KEYS[3], 0)
    while head and head ~= owner do
        local dl = redis.call('ZSCORE', KEYS[4], head)
        if dl and tonumber(dl) >= now_ms then
            break
        end
        redis.call('LPOP', KEYS[3])
        redis.call('ZREM', KEYS[4], head)
        head = redis.call('LINDEX', KEYS[3], 0)
    end
    if not head or head == owner then
        if head then
            redis.call('LPOP', KEYS[3])
            redis.call('ZREM', KEYS[4], owner)
        end
        return grant()
    end
end
-- Join the queue, or refresh the place in it (ZADD counts new members).
if mode == '2' and
    redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[6]), owner) == 1 then
    redis.call('RPUSH', KEYS[3], owner)
end
if held then
    return busy()
end
return {0, -2}
