-- s_acquire.lua: take or re-enter an exclusive lock in the string layout
-- (dlock_client_set_layout, DLOCK_LAYOUT_STRING; docs/design.md, "The
-- string layout"). One server, a Cluster or Redlock (plain and notify
-- or spin waits; the fair modes over one server or a Cluster only).
--
-- KEYS[1]  the lock key <prefix>:{<name>}, a STRING while held:
--          "<owner> <count> <token>" and marks after a space: 'l' someone
--          found it busy and may wait for its release (the release
--          publishes 'r TOKEN' on the lock channel), 'q' a fair waiter
--          queued behind it (the release hands it over); its TTL is the
--          lease. Token 0: not issued yet (a fresh uncontended acquire
--          without retention is a plain SET NX PX of "<owner> 1 0", no
--          script: hold/kind.c); s_stamp.lua issues it when first asked,
--          and mark() below when a waiter marks the hold
-- KEYS[2]  with fence retention (or a fair mode) only: the fence hash
--          <prefix>:{<name>}:f (n = last token granted, d = the server
--          second from which a grant renews its TTL, as acquire.lua)
-- ARGV[1]  owner id (no spaces)
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  reentry depth the client believes this owner has now (0: a
--          fresh acquire)
-- ARGV[4]  (optional) the fence retention in ms, "0" for none. Not sent
--          (nor KEYS[2]) for a plain acquire without retention: the token
--          is the server's time in us and nothing but the lock key is
--          touched. (Every key and argument costs Redis about 1k
--          instructions a call: docs/benchmarks.md.)
-- ARGV[5]  (optional) mode: "1" fair try (busy while anyone is queued;
--          does not join), "2" fair queue (joins the queue, or refreshes
--          its place; takes a free lock as the first live waiter)
-- ARGV[6]  mode 2: the waiter time-to-live in ms ("0" otherwise)
-- ARGV[7]  (optional) Redlock: the client's proposed token (its wall
--          clock in us plus a second): a fresh grant's token is the
--          highest of it, the server's time and the fence's n + 1, so
--          that nodes agree without a raise round when their counters
--          and clocks are below it (hold/kind.c token_hint)
-- The fair queue: <key>:q (owner -> ticket, twice the server's time in
-- us at its first queueing, odd when <key>:qt holds its deadline) and
-- <key>:qt (owner -> deadline ms * 2048 + the lease a handoff gives it),
-- named from KEYS[1] (the same hash slot); s_place.luainc.
--
-- Returns as acquire.lua:
--   {1, token, depth}  acquired (or a retry of an applied acquire, or a
--                      handoff found and confirmed, with the lease asked)
--   {0, pttl}          not acquired (pttl -2: free, but a live waiter is
--                      queued first)
--   {0, pttl, n, ttl}  mode 2: queued; pttl -1 (held: not read, the
--                      release hands over) or -2 (free, a live waiter
--                      first); n = the last token granted, never below
--                      the server's time in us (a handoff whose token is
--                      not above n was made before this call); ttl = how
--                      long the place lasts (ms): refresh at a third
--   {-1, depth}        the owner's count is not what the client believes
--   {-3, kind}         the key is not this layout's: 'lock-hash' (a lock
--                      of the hash layout: another client, or an earlier
--                      version), or the Redis type of a value dlock did
--                      not write; nothing changed
-- The fresh, uncontended plain acquire is TIME and SET NX PX (with
-- retention also the fence hash's HMGET and HSET); a fair try adds the
-- EXISTS of the queue: a queue outlives a holder that died (its key
-- expires), and its waiters go first.
local owner, keep, mode = ARGV[1], ARGV[4], ARGV[5] or '0'
if keep == '0' then
    keep = nil
end
local tm
-- The common case first, before anything else is set up (every closure
-- and string made costs Redis instructions on every call): a fresh plain
-- acquire, or a fresh fair try where nobody is queued. (A queued attempt,
-- mode 2, found the lock busy before and rarely finds it free now.)
if ARGV[3] == '0' and (mode == '0' or (mode == '1' and
    redis.call('EXISTS', KEYS[1] .. ':q') == 0)) then
    tm = redis.call('TIME')
--@include s_token.luainc
    if redis.call('SET', KEYS[1], owner .. ' 1 ' .. tok, 'NX', 'PX',
                  ARGV[2]) then
--@include s_record.luainc
        return {1, tok, 1}
    end
end
local q, qt = KEYS[1] .. ':q', KEYS[1] .. ':qt'

-- The token of a fresh grant and whether the fence hash's TTL is due.
local function token()
    tm = tm or redis.call('TIME')
--@include s_token.luainc
    return tok, renew
end

-- Record a grant's token in the fence hash (with retention).
local function record(tok, renew)
--@include s_record.luainc
end

local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
    local ty = redis.call('TYPE', KEYS[1]).ok
    return {-3, ty == 'hash' and 'lock-hash' or ty}
end
local expect = tonumber(ARGV[3])
local o, n, tok, marks
if v then
    o, n, tok, marks = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
    if not o then
        return {-3, 'string'}
    end
elseif expect > 0 then
    return {-1, 0} -- a reentry whose hold is gone
end

if o == owner then
    local cur = tonumber(n)
    if cur == expect + 1 then
        -- A retry of an applied acquire, or a handoff found: confirm,
        -- with the lease asked.
        -- (A handoff took the waiter out of the queue.)
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return {1, tok, cur}
    end
    if cur ~= expect then
        return {-1, cur}
    end
    cur = cur + 1
    redis.call('SET', KEYS[1], o .. ' ' .. cur .. ' ' .. tok .. marks, 'PX',
               ARGV[2])
    return {1, tok, cur}
end
if o and expect > 0 then
    return {-1, 0}
end

-- The time now, in ms.
local function now_ms()
    tm = tm or redis.call('TIME')
    return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end

-- Mark the hold (o, n, tok, marks) with the letter m unless it has it.
-- A hold taken by the plain SET (token 0: not issued yet, s_stamp.lua)
-- gets its token now, while it is still its owner's: its release then
-- announces a token unique to the hold, which is what waiters tell
-- releases apart by.
local function mark(m)
    local stamp = tok == '0'
    if stamp then
        tm = tm or redis.call('TIME')
        tok = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
    end
    if stamp or not string.find(marks, m, 1, true) then
        if not string.find(marks, m, 1, true) then
            marks = (marks == '' and ' ' or marks) .. m
        end
        redis.call('SET', KEYS[1], o .. ' ' .. n .. ' ' .. tok .. marks,
                   'KEEPTTL')
    end
end

if mode ~= '2' then
    if o then
        if mode == '0' then
            -- Someone may wait for the release: mark the hold (its
            -- release publishes only then). A waiter subscribes before
            -- its next attempt, which marks again whatever hold it finds.
            mark('l')
        end
        return {0, redis.call('PTTL', KEYS[1])}
    end
    if mode == '1' then
        return {0, -2} -- free, but waiters are queued: they go first
    end
    -- A plain acquire of a name free again (a SET NX raced? not within a
    -- script): take it.
    local t2, renew = token()
    redis.call('SET', KEYS[1], owner .. ' 1 ' .. t2, 'PX', ARGV[2])
    record(t2, renew)
    return {1, t2, 1}
end

-- Mode 2: a queued waiter's attempt.
local now = now_ms()
--@include s_place.luainc
if not o then
    -- Free with waiters queued: those that stopped refreshing drop out
    -- when they reach the head; the first live one goes first.
    local r = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    while r[1] and r[1] ~= owner and not place(r[1], r[2], now) do
        redis.call('ZREM', q, r[1])
        redis.call('ZREM', qt, r[1])
        r = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    end
    if not r[1] or r[1] == owner then
        if r[1] then
            redis.call('ZREM', q, owner)
            redis.call('ZREM', qt, owner)
        end
        local t2, renew = token()
        -- 'q': others may be queued behind.
        local m = redis.call('EXISTS', q) == 1 and ' q' or ''
        redis.call('SET', KEYS[1], owner .. ' 1 ' .. t2 .. m, 'PX', ARGV[2])
        record(t2, renew)
        return {1, t2, 1}
    end
end
-- Join the queue (NX: a ticket never moves), or refresh the place held.
-- A join with the defaults writes its ticket only (s_place.luainc); a
-- refresh, or a join with other values, also its deadline, and makes its
-- ticket odd (one more than the even one: the order stays). A refreshed
-- place lasts ARGV[6] ms, or 3 ms per queued waiter when the queue is
-- longer (the 4th element of the reply: the waiter refreshes at a third
-- of it), as sem_acquire.lua's.
local hl = tonumber(ARGV[2])
if hl > 2000 then
    hl = 2000 -- DLOCK__FAIR_HANDOFF_MS (hold/held.h)
end
local ttl = tonumber(ARGV[6])
local plain = ttl == 3000 and hl == 2000 -- DLOCK__WAITER_TTL_MS
local us = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
if redis.call('ZADD', q, 'NX', string.format('%d', tonumber(us) * 2 +
                                                (plain and 0 or 1)),
              owner) == 0 then
    local len = redis.call('ZCARD', q)
    if len * 3 > ttl then
        ttl = len * 3
    end
    plain = false
    local s = redis.call('ZSCORE', q, owner)
    if tonumber(s) % 2 == 0 then
        redis.call('ZINCRBY', q, 1, owner)
    end
end
if not plain then
    redis.call('ZADD', qt, string.format('%d', (now + ttl) * 2048 + hl),
               owner)
end
-- The last token granted, never below the server's time in us.
local floor = us
local function above(a)
    if a and (#a > #floor or (#a == #floor and a > floor)) then
        floor = a
    end
end
above(tok)
if keep then
    above(redis.call('HGET', KEYS[2], 'n'))
end
if o then
    -- Held: its release hands over (the mark), and a holder that died is
    -- found at the next refresh (no PTTL: -1, not known).
    mark('q')
    return {0, -1, floor, ttl}
end
return {0, -2, floor, ttl}
