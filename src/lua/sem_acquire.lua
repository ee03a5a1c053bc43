-- sem_acquire.lua: take a permit of a counting semaphore (at most N
-- holders, each with its own lease by the server's clock), reaping
-- expired holders first; when none is free, optionally queue as a waiter.
--
-- KEYS[1]  the semaphore zset <prefix>:{<name>}: member '#' (score = the
--          limit N); holders (owner id -> deadline, server ms); released
--          holders as tombstones (owner id -> -(expiry), server ms)
-- KEYS[2]  the fence hash <prefix>:{<name>}:f: n = last token, k = 's'
--          (the name is a semaphore), t:<owner> = each holder's token
-- KEYS[3]  the waiters' queue <prefix>:{<name>}:q (list, oldest first)
-- KEYS[4]  the waiters' deadlines <prefix>:{<name>}:qt (zset owner ->
--          deadline in server ms * 2048 + the waiter's handoff lease)
-- ARGV[1]  owner id
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  the limit N the caller expects (1 .. 1000000)
-- ARGV[4]  how long the semaphore and its fence outlive their last use, ms
-- ARGV[5]  mode: '0' try (takes a free permit whatever the queue), '1' FIFO
--          try (free permits go to live queued waiters first), '2' like '0'
--          but joins (or refreshes its place in) the queue when none is
--          free, '3' like '1' and joins the queue
-- ARGV[6]  waiter time-to-live in ms (by the server's clock)
-- ARGV[7]  the handoff channel prefix <prefix>:{<name>}:c (a waiter of
--          client C listens on ARGV[7]:C)
-- ARGV[8]  this waiter's handoff lease in ms (< 2048: how long a permit
--          handed to it is held until it confirms)
-- ARGV[9]  (optional) '1': a later attempt of a waiting acquire; it waits
--          under whatever limit is stored now (a limit changed while it
--          waited serves it as any other waiter), never refused for it
--
-- Returns
--   {1, token, 1}   acquired (also: a retry of an applied acquire, or a
--                   permit handed to this owner, confirmed: lease ARGV[2]
--                   and a fresh token, see the confirmation below)
--   {0, pttl}       none free (queued in modes 2, 3); pttl = ms until the
--                   first holder's lease ends (-2: free permits are kept
--                   for live waiters ahead in the FIFO queue)
--   {0, pttl, n, ttl}  the same in modes 2, 3, with n = the last token
--                   granted, never below the server's time in us (a
--                   fence hash deleted without retention: sem_release.lua):
--                   a handoff whose token is not above n was made
--                   before this call (and has lapsed, or this call would
--                   have confirmed it), so the waiter must not take it;
--                   ttl = how long its queue place lasts (ms): refresh
--                   it within a third of that
--   {-2, limit}     the semaphore exists with another limit: nothing done
--                   (never to a waiter, ARGV[9], or a holder)
--   {-3, kind}      the name is used by another kind of lock ('lock'), or
--                   its key holds a value dlock did not write (a Redis
--                   type name: a zset without the limit member too):
--                   nothing done
--
-- Free permits left over are given to live queued waiters: FIFO modes hand
-- them over (the waiter becomes a holder with the handoff lease and a
-- token; 'h TOKEN OWNER' is published on ARGV[7]:<its client id>), the
-- other modes wake one waiter per free permit ('h 0 OWNER') to try again.
--@include next_token.luainc
local owner = ARGV[1]
local limit = tonumber(ARGV[3])
local mode = ARGV[5]
local fifo = mode == '1' or mode == '3'

local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'none' and ty ~= 'zset' then
    return {-3, ty == 'hash' and 'lock' or ty}
end
if ty == 'zset' and not redis.call('ZSCORE', KEYS[1], '#') then
    return {-3, 'zset'} -- no limit member: a zset dlock did not write
end
local kind = redis.call('HGET', KEYS[2], 'k')
if kind ~= 's' and redis.call('EXISTS', KEYS[2]) == 1 then
    return {-3, 'lock'}
end
local stored = redis.call('ZSCORE', KEYS[1], '#')
if stored and tonumber(stored) ~= limit then
    -- A holder, or a waiter a raised limit handed a permit to, goes on
    -- to the confirmation below whatever limit it expected; a waiter
    -- (ARGV[9]) that began under the old limit waits under the new one.
    -- Only a fresh acquire that expects another limit is refused.
    if ARGV[9] ~= '1' and not redis.call('ZSCORE', KEYS[1], owner) then
        return {-2, tonumber(stored)}
    end
    limit = tonumber(stored)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Reap: expired holders (their tokens with them) and old tombstones.
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '(1000000',
                        string.format('%d', now))
for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[1], m)
    redis.call('HDEL', KEYS[2], 't:' .. m)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], string.format('%d', -now), '(0')

-- Keep the semaphore and its fence for the retention (or the lease when
-- longer); never shorten them (another holder's lease may be longer).
local function keep(lease)
    local want = tonumber(ARGV[4])
    if lease > want then
        want = lease
    end
    for i = 1, 2 do
        if redis.call('PTTL', KEYS[i]) < want then
            redis.call('PEXPIRE', KEYS[i], want)
        end
    end
end

if not stored then
    redis.call('ZADD', KEYS[1], limit, '#')
    redis.call('HSET', KEYS[2], 'k', 's')
end

local function token()
    return next_token(t, nil)
end

-- Off the queue. A waiter is in KEYS[4] exactly while its place is in
-- KEYS[3] (a handoff pops both): no LREM, O(n), for one handed a permit.
local function unqueue(m)
    if redis.call('ZREM', KEYS[4], m) == 1 then
        redis.call('LREM', KEYS[3], 0, m)
    end
end

-- A permit handed to us, or a retry of an applied acquire: confirm it,
-- with a fresh token. Whoever gets here has not used the permit: a waiter
-- that read its handoff too late to use it (or whose attempt crossed the
-- handoff), or a retry whose first reply was lost. Meanwhile others may
-- have been granted permits (tokens above the handoff's) and used them;
-- a token issued now, when this holder can first act, keeps tokens in
-- the order in which holders could act (F9 in docs/reliability.md).
local mine = redis.call('ZSCORE', KEYS[1], owner)
if mine and tonumber(mine) > now then
    local lease = tonumber(ARGV[2])
    local tok = token()
    redis.call('ZADD', KEYS[1], now + lease, owner)
    redis.call('HSET', KEYS[2], 't:' .. owner, string.format('%d', tok))
    unqueue(owner)
    keep(lease)
    return {1, tok, 1}
end

local free = limit - redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now), '+inf')

-- Give free permits to live waiters at the head of the queue (not to
-- ourselves): hand them over (FIFO) or wake them. Returns what is left.
local function fill(n)
    local head = redis.call('LINDEX', KEYS[3], 0)
    while n > 0 and head and head ~= owner do
        redis.call('LPOP', KEYS[3])
        local sc = tonumber(redis.call('ZSCORE', KEYS[4], head) or '0')
        redis.call('ZREM', KEYS[4], head)
        if math.floor(sc / 2048) >= now then
            local tok = 0
            if fifo then
                tok = token()
                redis.call('ZADD', KEYS[1], now + sc % 2048, head)
                redis.call('HSET', KEYS[2], 't:' .. head, string.format('%d', tok))
            end
            redis.call('PUBLISH', ARGV[7] .. ':' .. string.sub(head, 1, 32),
                        'h ' .. string.format('%d', tok) .. ' ' .. head)
            n = n - 1
        end
        head = redis.call('LINDEX', KEYS[3], 0)
    end
    return n
end

if free > 0 and fifo then
    free = fill(free)
end
local ahead = fifo and redis.call('LINDEX', KEYS[3], 0)
if free > 0 and (not ahead or ahead == owner) then
    local lease = tonumber(ARGV[2])
    local tok = token()
    unqueue(owner)
    redis.call('ZADD', KEYS[1], now + lease, owner)
    redis.call('HSET', KEYS[2], 't:' .. owner, string.format('%d', tok))
    keep(lease)
    if free > 1 then
        fill(free - 1)
    end
    return {1, tok, 1}
end

-- A queued place lasts ARGV[6] ms, or 3 ms per queued waiter when the
-- queue is longer (waiters refresh at a third of it, the 4th element of
-- the reply): a queue of 10,000 refreshes ~1,000 times a second, not
-- 10,000 (a crashed waiter keeps its place longer: up to 3 ms per waiter).
local ttl = tonumber(ARGV[6])
if mode == '2' or mode == '3' then
    local qlen = redis.call('LLEN', KEYS[3])
    if qlen * 3 > ttl then
        ttl = qlen * 3
    end
    if redis.call('ZADD', KEYS[4], string.format('%d', (now + ttl) * 2048 + tonumber(ARGV[8])), owner) == 1 then
        redis.call('RPUSH', KEYS[3], owner)
    end
    redis.call('PEXPIRE', KEYS[3], ttl * 2)
    redis.call('PEXPIRE', KEYS[4], ttl * 2)
end
keep(0)
local function busy(pttl)
    if mode == '2' or mode == '3' then
        -- Never below the server's time in us: a client without fence
        -- retention deletes a free semaphore's fence hash (sem_release.lua),
        -- and every token granted before this call is at most that time,
        -- a handoff made after it above (as acquire.lua's waiter_floor).
        local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
        local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
        return {0, pttl, n > us and n or us, ttl}
    end
    return {0, pttl}
end
if free > 0 then
    return busy(-2)
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1],
                         '(' .. string.format('%d', now), '+inf',
                         'WITHSCORES', 'LIMIT', 0, 1)
if first[2] then
    return busy(tonumber(first[2]) - now)
end
return busy(-1)
