-- rw_acquire.lua: take a read-write lock shared (a reader), each reader
-- with its own lease by the server's clock. The writer side is the plain
-- lock (acquire.lua) on the same hash: readers mark the hash so that a
-- writer finds it held, and a waiting writer marks it so that new readers
-- stay out (writer preference).
--
-- KEYS[1]  the lock hash <prefix>:{<name>}: a writer's owner id -> depth;
--          '#r' while readers hold it; '#w' = server ms until which a
--          waiting writer keeps new readers out (the latest of the
--          writers' own marks '#w:<owner>', see rw_leave.lua). Its TTL is the longest
--          live reader's lease left (rw_cover.luainc): an expired reader
--          never keeps a writer out.
-- KEYS[2]  the fence hash <prefix>:{<name>}:f: n = last token (shared by
--          readers and writers, so a resource can order them),
--          t:<owner> = a reader's token
-- KEYS[3]  the readers <prefix>:{<name>}:r: zset owner id -> deadline
--          (server ms); released readers as tombstones -> -(expiry)
-- ARGV[1]  owner id
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  how long the fence hash outlives the last acquisition, ms
-- ARGV[4]  a token the client proposes (Redlock; 0 for none): it can only
--          raise a token
-- ARGV[5]  '0': respect a waiting writer's mark (writer preference);
--          '1': ignore it (reader preference, or this thread reads
--          already: waiting would deadlock it)
--
-- Returns
--   {1, token, 1}  acquired (also a retry of an applied acquire)
--   {0, pttl}      a writer holds it, or a writer waits (ARGV[5] '0'):
--                  pttl = ms until its lease or mark runs out
--   {-3, kind}     the name is a semaphore, or its key holds a value
--                  dlock did not write (kind: its Redis type)
--@include next_token.luainc
--@include rw_cover.luainc
local owner = ARGV[1]
local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'none' and ty ~= 'hash' then
    -- A semaphore's zset has its limit member '#'; any other value is
    -- not dlock's (its Redis type is returned).
    if ty == 'zset' and redis.call('ZSCORE', KEYS[1], '#') then
        ty = 'semaphore'
    end
    return {-3, ty}
end
if redis.call('HGET', KEYS[2], 'k') == 's' then
    return {-3, 'semaphore'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Reap expired readers (and their tokens) and old tombstones.
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '(0', string.format('%d', now))
for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[3], m)
    redis.call('HDEL', KEYS[2], 't:' .. m)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], string.format('%d', -now), '(0')

local lease = tonumber(ARGV[2])
-- The hash lives as long as the longest live reader, the readers' set
-- 60 s more.
local function cover()
    rw_cover(KEYS[1], KEYS[3], now)
end

local mine = redis.call('ZSCORE', KEYS[3], owner)
if mine and tonumber(mine) > now then
    redis.call('ZADD', KEYS[3], now + lease, owner)
    cover()
    return {1, tonumber(redis.call('HGET', KEYS[2], 't:' .. owner) or '0'), 1}
end

local pttl = redis.call('PTTL', KEYS[1])
local fields = redis.call('HKEYS', KEYS[1])
for _, f in ipairs(fields) do
    if string.sub(f, 1, 1) ~= '#' then
        -- A writer holds it: mark its hold ('#l') so that its release
        -- announces itself (release.lua publishes only for marked holds);
        -- a waiting reader subscribes before its next attempt, which
        -- marks again.
        for _, g in ipairs(fields) do
            if g == '#l' then
                return {0, pttl}
            end
        end
        redis.call('HSET', KEYS[1], '#l', '1')
        return {0, pttl}
    end
end
local mark = tonumber(redis.call('HGET', KEYS[1], '#w') or '0')
if mark > now and ARGV[5] ~= '1' then
    -- Kept out by a waiting writer: mark the hash ('#l') so that the hold
    -- that writer takes keeps the mark (acquire.lua) and its release
    -- announces itself; the mark alone would keep this reader asleep
    -- until it ran out (the readers' lease + 1 s).
    redis.call('HSET', KEYS[1], '#l', '1')
    if pttl < 0 or mark - now < pttl then
        pttl = mark - now
    end
    return {0, pttl}
end
if mark > 0 and mark <= now then
    rw_unmark(KEYS[1])
end

local want = next_token(t, tonumber(ARGV[4] or '0'))
redis.call('HSET', KEYS[2], 't:' .. owner, string.format('%d', want))
-- Twice the retention, as every renewal (acquire.lua, field e).
redis.call('PEXPIRE', KEYS[2], 2 * tonumber(ARGV[3]))
redis.call('ZADD', KEYS[3], now + lease, owner)
redis.call('HSET', KEYS[1], '#r', '1')
cover()
return {1, want, 1}
