-- acquire.lua: take or re-enter a lock, with a lease, in one step; in fair
-- mode, respecting (and optionally joining) the queue of waiters.
--
-- KEYS[1]  the lock hash  <prefix>:{<name>}      field = owner id, value = reentry count
-- KEYS[2]  the fence hash <prefix>:{<name>}:f    n = last token granted, r = last token released,
--          d = the server second from which a grant renews its TTL (below)
-- KEYS[3]  fair modes: the queue <prefix>:{<name>}:q   zset owner id -> ticket,
--          served lowest first
-- KEYS[4]  fair queue mode: the queue deadlines <prefix>:{<name>}:qt   zset owner
--          id -> (server ms after which the waiter counts as dead unless it
--          refreshes) * 2048 + the lease a handoff gives it, min(its lease,
--          2000), which release.lua reads back (a waiter that dies while
--          being handed the lock holds it no longer than it asked for)
-- ARGV[1]  owner id ("<client id hex>:<thread id>:<hold>")
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  reentry depth the client believes this owner has now (0: a fresh acquire)
-- ARGV[4]  mode (default "0"): "0" plain (ignores the queue), "1" fair try
--          (busy while anyone is queued; does not join), "2" fair queue
--          (joins the queue, or refreshes its place, when the lock cannot
--          be had; takes a free lock when first among the live waiters);
--          "a", "b", "c": the same without fence retention (as ARGV[9]
--          "0", which is then not sent)
-- ARGV[5]  (optional) a token the client proposes (Redlock: the same on
--          every node, so that nodes agree; 0 for none). It can only raise
--          a token.
-- ARGV[6]  mode 2: waiter time-to-live in ms (by the server's clock)
-- ARGV[7]  mode 2: the waiter's ticket (its place; Redlock: the same on
--          every node, so that every node serves the waiters in one
--          order), 0 (one server) for the server's time in us
-- ARGV[8]  (optional) "1": the caller is a waiting writer (modes "0" and
--          "1" send ARGV[4..8] only then), so readers holding the lock are
--          to let no new reader in
-- ARGV[9]  (optional) the fence retention in ms, sent (with ARGV[4..8])
--          only when it is neither the default 7 days nor 0 (modes "a",
--          "b", "c" say 0); "0" (as those modes): none, the token
--          of a hold is kept in the lock hash's field '#t' instead of the
--          fence hash (grant.luainc), and release.lua deletes the fence
--          hash with the lock unless a token was on record at the grant
--          ('#f')
-- The arguments that are rarely needed come last and are left off: a
-- plain single-server acquire is 2 keys and 3 arguments, a fair try 3
-- keys and 4 (Redis refuses commands of more than 10 words before AUTH,
-- and a short command is cheaper to parse on every acquisition).
-- The fence hash lives at least RETAIN (7 days, DLOCK__FENCE_RETENTION_MS
-- in hold/held.h) after the last acquisition, and at most twice that: a grant
-- at or after its field d (the server second from which less than RETAIN
-- is left, as the last renewal set it) renews it to 2 * RETAIN and sets d
-- to RETAIN from now, so only about one grant in RETAIN pays for the
-- PEXPIRE. Every script that sets the fence hash's TTL sets 2 * RETAIN,
-- never less, so d is never later than it should be. (Versions before
-- kept the field e, the TTL's end in ms, instead: a hash written by them
-- has no d and is renewed by the next grant.)
-- Text throughout the common paths: turning text into a number (strtod)
-- or back (sprintf) is a large part of what a script costs Redis beyond
-- its calls, so counts are compared as text, the token is made as text
-- (text_token.luainc; replies carry it as a bulk string), and numbers are
-- made only where arithmetic is needed. The fresh grant (grant.luainc) is
-- put in twice, at the top for the common case and as grant() for the
-- rest, so that the common case sets up nothing else.
--
-- Read-write locks (rw_*.lua): readers hold this hash under the field
-- '#r' (it exists, so a writer finds it busy). A waiting writer (ARGV[8]
-- "1", or mode "2") that finds readers sets '#w' = server ms until which
-- new readers stay out (writer preference), and '#w:<owner>' the same,
-- its own mark, which rw_leave.lua removes when the writer gives up; a
-- hash left holding only marks is free for a writer.
--
-- The queue's mark: a queued waiter's attempt (mode "2") that finds a
-- writer's hold sets its field '#q' = '1', and so do a hand-over
-- (release.lua) and a grant that may have waiters behind it (a plain
-- acquire's, which does not read the queue, and one taken from the head
-- of the queue); with fence retention release.lua looks at the queue
-- only for a hold so marked (without, the fence hash's existence tells
-- it: see ARGV[9]).
--
-- Listeners: a plain try (mode "0": a notify waiter's attempts too) that
-- finds a writer's hold sets its field '#l' = '1'; release.lua announces
-- a release ('r ID' on the lock's channel) only for a hold so marked, so
-- an uncontended cycle publishes nothing. A waiter subscribes before its
-- next attempt, and that attempt marks whatever hold it finds, so a
-- release between the mark and the subscription is seen by the attempt
-- and a later one is heard.
--
-- Returns
--   {1, token, depth}  acquired; depth = the owner's reentry count now (also
--                      when a fair handoff is found: this confirms it, the
--                      lease is set to ARGV[2])
--   {0, pttl}          not acquired (queued in mode 2); pttl = the holder's
--                      remaining lease in ms (-2: free, but a live waiter is
--                      ahead in the queue)
--   {0, pttl, n, ttl}  the same in mode 2, with n = the last token granted,
--                      never below the server's time in us (waiter_floor):
--                      a handoff whose token is not above n was made before
--                      this call (and has lapsed, or this call would have
--                      confirmed it), so the waiter must not take it; ttl
--                      = how long the place lasts (ms): refresh at a third
--   {-1, depth}        the owner's count on the server is not what the client
--                      believes (0: its earlier hold expired): nothing changed
--
-- Idempotent: a retry of the same request after a lost reply finds the count
-- one above ARGV[3] and reports success again without counting twice.
-- Tokens: max(last + 1, the server's time in us, ARGV[5]) on every grant:
-- strictly above every token this node issued while it kept its fence hash,
-- and above every token issued before by any node whose clock was not ahead
-- of this one's (a promoted replica that missed the last increments, or a
-- fence hash that expired).
-- Without fence retention (modes "a" to "c"), the common case first: a
-- fresh acquire of a free name with nothing beside it (no queue, no
-- fence hash: while anyone is queued the fence hash exists, see the
-- mark below) takes the lock with the server's time as its token, in
-- four calls. (Not for a queued waiter's attempt, mode 2: it found the
-- lock busy before, and rarely finds it free now.)
-- The mode, and whether the fence hash is kept: modes "a", "b", "c" are
-- "0", "1", "2" without fence retention (one argument, where the "0" of
-- ARGV[9] took six: every argument costs Redis about 1k instructions a
-- call, docs/benchmarks.md).
local mode = ARGV[4] or '0'
local none = ARGV[9] == '0'
if mode > '9' then
    none = true
    mode = mode == 'a' and '0' or mode == 'b' and '1' or '2'
end
-- Whether a grant marks its hold '#q' (release.lua then looks at the
-- queue): set below where waiters may be queued.
local qm = false
-- Whether a grant marks its hold '#l' (release.lua then announces it):
-- set below when the hash it replaces held only marks and one was '#l' (a
-- reader kept out by a waiting writer's mark listens for that writer).
local lm = false
if none and ARGV[3] == '0' and mode ~= '2' and
    redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3] or KEYS[2]) == 0 then
    local tm = redis.call('TIME')
    local tok = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
    local hint = ARGV[5]
    if hint and hint ~= '0' and
        (#hint > #tok or (#hint == #tok and hint > tok)) then
        tok = hint
    end
    redis.call('HSET', KEYS[1], ARGV[1], '1', '#t', tok)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tok, 1}
end
-- The common case first, before anything else is set up: a fresh fair
-- try of a free lock nobody queues for (one EXISTS of lock and queue).
-- (Without retention the one above has looked already.)
if ARGV[3] == '0' and mode == '1' and not none and
    redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
    local tm = redis.call('TIME')
--@include grant.luainc
end

local owner = ARGV[1]
local expect = ARGV[3]
local t

local function now()
    if not t then
        t = redis.call('TIME')
    end
    return t
end

-- Grant a fresh acquisition to owner; returns the reply (the token as
-- text: see text_token.luainc).
local function grant()
    local tm = now()
--@include grant.luainc
end

local pttl = redis.call('PTTL', KEYS[1])
-- The fields the rest needs, in one call: this owner's count, a waiting
-- writer's mark, readers, the hold's token when it is kept in the lock
-- hash (absent fields are false).
local cur, readers, wmark, held_tok, lmark, qmark = 0, false, false, false,
                                                    false, false
if pttl ~= -2 then
    local f = redis.call('HMGET', KEYS[1], owner, '#w', '#r', '#t', '#l', '#q')
    cur = f[1] and tonumber(f[1]) or 0
    wmark, readers, held_tok, lmark, qmark = f[2], f[3], f[4], f[5], f[6]
    if expect == '0' and f[2] and not readers then
        -- Only marks (waiting writers' '#w', '#w:<owner>', and a
        -- listener's '#l' or a queue's '#q' beside them): free. (A
        -- hold's '#l' and '#q' go with it: release deletes the hash,
        -- rw_downgrade.lua and rw_release.lua the marks.)
        local only = true
        for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
            if string.sub(k, 1, 2) ~= '#w' and k ~= '#l' and k ~= '#q' then
                only = false
                break
            end
        end
        if only then
            redis.call('DEL', KEYS[1])
            pttl = -2
            lm = lmark and true or false
        end
    end
end
if expect == '0' and pttl == -2 and
    (mode == '0' or redis.call('EXISTS', KEYS[3]) == 0) then
    -- A plain acquire does not see the queue (it has no key of it):
    -- its hold is marked, so that its release looks.
    qm = mode == '0'
    return grant()
end

-- The larger of two tokens as decimal text (either may be false).
local function maxtok(a, b)
    if not a then
        return b
    end
    if b and (#b > #a or (#b == #a and b > a)) then
        return b
    end
    return a
end

-- The fence hash's n (false: none), read once.
local fence_n_val
local function fence_n()
    if fence_n_val == nil then
        fence_n_val = redis.call('HGET', KEYS[2], 'n') or false
    end
    return fence_n_val
end

-- The last token granted on this name: the fence hash's n, or the hold's
-- own ('#t', kept in the lock hash without fence retention), the higher.
local function last_token()
    return maxtok(fence_n(), held_tok) or '0'
end

-- The same for a queued waiter's reply, never below the server's time
-- in us: without fence retention the fence hash may be gone (deleted by
-- a release) while a handoff it recorded has lapsed, and every token
-- granted before this call is at most the server's time now, while a
-- handoff made after it has one above (docs/design.md, "Fence
-- retention").
local function waiter_floor()
    local tm = now()
    return maxtok(last_token(), tm[1] .. string.sub('00000', #tm[2]) .. tm[2])
end
expect = tonumber(expect)
if cur == expect + 1 then
    -- A retry of an applied acquire, or a fair handoff found: confirm.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, last_token(), cur}
end
if cur ~= expect then
    return {-1, cur}
end
if cur > 0 then
    local depth = redis.call('HINCRBY', KEYS[1], owner, 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, last_token(), depth}
end

-- Busy: a waiting writer that finds readers marks itself (see the top):
-- '#w' for readers, '#w:<owner>' its own, which it takes away when it
-- gives up (rw_leave.lua).
local qttl -- mode 2: how long the queue keeps the place (ms)
local function busy()
    if mode == '0' and not readers and not lmark then
        -- A plain try or a notify waiter's attempt may wait for the
        -- release's announcement: mark the hold ('#l'), so that its
        -- release publishes (an unmarked release announces nothing:
        -- nobody listens). A waiter subscribes before its next attempt,
        -- which marks again whatever hold it finds, so no release it
        -- waits for goes unannounced. (Readers' holds are always
        -- announced by their last release; queued waiters are served
        -- through the queue.)
        redis.call('HSET', KEYS[1], '#l', '1')
    end
    if mode == '2' and not readers and not qmark then
        -- A queued waiter marks the hold, so that its release looks at
        -- the queue (a release with retention that finds no mark does
        -- not: nobody is queued). Without retention too: the hold may be
        -- a client's with retention (one setting per name is the advice,
        -- but a deployment switching to 0 mixes them for a while).
        redis.call('HSET', KEYS[1], '#q', '1')
    end
    if (ARGV[8] == '1' or mode == '2') and readers then
        local bt = now()
        local bms = tonumber(bt[1]) * 1000 + math.floor(tonumber(bt[2]) / 1000)
        local m = bms + pttl + 1000
        local w = wmark and tonumber(wmark) or 0 -- '#w': the latest mark
        redis.call('HSET', KEYS[1], '#w', string.format('%d', w > m and w or m),
                   '#w:' .. owner, string.format('%d', m))
    end
    if mode == '2' then
        return {0, pttl, waiter_floor(), qttl}
    end
    return {0, pttl}
end
if mode == '0' or (mode == '1' and pttl ~= -2) then
    return busy()
end
if mode == '1' then
    return {0, -2} -- free, but waiters are queued: they go first
end

local tm = now()
local sec, us = tonumber(tm[1]), tonumber(tm[2])
local now_ms = sec * 1000 + math.floor(us / 1000)
if pttl == -2 then
    -- Free, but waiters are queued: those that stopped refreshing drop out
    -- when they reach the head; the first live one goes first. (While the
    -- lock is held, release.lua skips dead waiters when it hands over.)
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    while head and head ~= owner do
        local dl = redis.call('ZSCORE', KEYS[4], head)
        if dl and math.floor(tonumber(dl) / 2048) >= now_ms then
            break
        end
        redis.call('ZREM', KEYS[3], head)
        redis.call('ZREM', KEYS[4], head)
        head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    end
    if not head or head == owner then
        if head then
            redis.call('ZREM', KEYS[3], owner)
            redis.call('ZREM', KEYS[4], owner)
        end
        qm = true -- others may be queued behind
        return grant()
    end
end
-- Join the queue at the ticket's place, or refresh the deadline of the
-- place held (NX: a ticket never moves).
if mode == '2' then
    local hl = tonumber(ARGV[2])
    if hl > 2000 then
        hl = 2000
    end
    local ticket = ARGV[7]
    if not ticket or ticket == '0' then
        ticket = string.format('%d', sec * 1000000 + us)
    end
    -- A place refreshed lasts ARGV[6] ms, or 3 ms per queued waiter when
    -- the queue is longer (the reply's 4th element: the waiter refreshes
    -- at a third of it), as sem_acquire.lua's.
    qttl = tonumber(ARGV[6])
    if redis.call('ZADD', KEYS[3], 'NX', ticket, owner) == 0 then
        local len = redis.call('ZCARD', KEYS[3])
        if len * 3 > qttl then
            qttl = len * 3
        end
    end
    redis.call('ZADD', KEYS[4],
               string.format('%d', (now_ms + qttl) * 2048 + hl), owner)
    -- Without fence retention, a queue is never without the fence hash:
    -- its mark 'w' tells release.lua to look at the queue (a release
    -- that finds no fence hash skips it). One holding a token is there.
    if none and not fence_n() and
        redis.call('HSETNX', KEYS[2], 'w', '1') == 1 then
        redis.call('PEXPIRE', KEYS[2], '1209600000')
    end
end
if pttl ~= -2 then
    return busy()
end
return {0, -2, waiter_floor(), qttl}
