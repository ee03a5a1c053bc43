-- release.lua: give back one reentry level; at zero, pass the lock on to
-- the first live fair-mode waiter if any are queued (hand it over, or wake
-- that waiter alone), else delete it and announce the release on the
-- lock's channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fence hash (n, r, d: see acquire.lua; x: below)
-- KEYS[3]  the fair queue (zset: owner id -> ticket, lowest served first)
-- KEYS[4]  the fair queue deadlines (zset: owner id -> server ms * 2048 +
--          the waiter's handoff lease; see acquire.lua)
-- ARGV[1]  owner id
-- ARGV[2]  the reentry depth the client believes the owner has (>= 1)
-- ARGV[3]  the lock's fencing token; "0" from a give-back of an attempt
--          whose answer was lost (the token is not known): with one
--          server such a release is never taken for a retry, and never
--          recorded as r
-- ARGV[4]  the pub/sub channel of the lock
-- ARGV[5]  handoff lease in ms: the first live waiter is made the owner
--          with this lease (or the shorter one its deadline carries, see
--          acquire.lua) until it confirms (extends) it; 0: the lock is
--          deleted and only that waiter is woken (Redlock: a waiter needs
--          a majority, which one node cannot hand it)
-- ARGV[6]  the fence hash's retention, ms: it lives at least this long
--          after the last grant, at most twice (acquire.lua, field d).
--          "0": none: the release deletes the fence hash with the lock,
--          unless the hold was granted beside one holding a token (the
--          lock hash's '#f'); a hand-over records its token in the fence
--          hash, with 7 days' retention, and in the lock hash ('#t', and
--          '#f'). So a name that was handed over keeps the fence hash for
--          7 to 14 days: a fair waiter of an earlier version tells a
--          lapsed hand-over from a live one by its n alone
--          (docs/design.md, "Clients of different versions")
-- ARGV[7]  an id of this release request, unique per client and request:
--          published so that a process hearing the same release from
--          several Redlock nodes wakes once
-- ARGV[8]  (optional) "1": announce with SPUBLISH (Redis Cluster's
--          sharded pub/sub), else PUBLISH
-- ARGV[9]  (optional) undo of a Redlock fair attempt short of a majority:
--          the owner's ticket, to put it back in the queue at its place
-- ARGV[10] (with ARGV[9]) the waiter time-to-live in ms
--
-- Messages (PUBLISH, or SPUBLISH with ARGV[8] "1")
--   'r ID'              on ARGV[4]: released, nobody queued; only when
--                       the hold carries the mark '#l' (a try or a
--                       notify waiter found it busy, a reader waits for
--                       it, an election's leader holds it: acquire.lua,
--                       rw_acquire.lua, elect_proclaim.lua): nobody else
--                       listens on ARGV[4]
--   'h TOKEN OWNER'     on ARGV[4]:<OWNER's client id>: handed to OWNER
--   'w ID OWNER'        on ARGV[4]:<OWNER's client id>: free, OWNER is first
-- Only the process of the waiter named listens on ARGV[4]:<client id>.
--
-- Returns
--   1  released (or handed over, or the waiter woken) and announced
--   4  the same, but the announcement was refused (the user may not
--      publish: ACL channel permissions); waiters find out by polling
--   2  one level given back, still held
--   3  already done: a retry of a release whose reply was lost
--   0  not the owner (the lease expired, or another owner has it); the
--      owner's queue entry, if it had one here, is dropped
local owner = ARGV[1]
local publish = ARGV[8] == '1' and 'SPUBLISH' or 'PUBLISH'
local t, sec, us, now_ms, handoff, retain

--@include announce.luainc

-- The lock is free and nobody queued: announce 'r ID' where the hold was
-- marked ('#l': someone found it busy and may be waiting for this; see
-- acquire.lua), else nothing (nobody listens: the announcement would only
-- cost the server a PUBLISH).
local heard
local function released()
    if heard then
        return announce(ARGV[4], 'r ' .. ARGV[7])
    end
    return 1
end

-- The handoff lease and the fence retention, converted when needed: each
-- tonumber of a string is a strtod, a good part of what a script costs
-- Redis beyond its calls (see acquire.lua: strings on the common paths).
local function args()
    handoff = handoff or tonumber(ARGV[5])
    retain = retain or tonumber(ARGV[6])
    if retain == 0 then
        retain = 604800000
    end
end

local function clock()
    if not t then
        t = redis.call('TIME')
        sec, us = tonumber(t[1]), tonumber(t[2])
        now_ms = sec * 1000 + math.floor(us / 1000)
    end
end

-- The lock is free here: hand it to (or wake) the first live waiter, or
-- announce the release. Returns 1 or 4, or 0 when nothing was announced
-- and quiet is set. unqueued: the hold was not marked '#q' (nobody
-- queued for it): the queue is not looked at.
local function pass_on(quiet, unqueued)
    local hand = ARGV[5] ~= '0'
    while not unqueued do
        local head
        if hand then
            head = redis.call('ZPOPMIN', KEYS[3])[1]
        else
            head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
        end
        if not head then
            break
        end
        clock()
        local dl = tonumber(redis.call('ZSCORE', KEYS[4], head) or '0')
        if math.floor(dl / 2048) >= now_ms then
            if head == owner then
                return 1 -- a requeued undo: the owner is first again
            end
            local ch = ARGV[4] .. ':' .. string.sub(head, 1, 32)
            if not hand then
                if ARGV[6] == '0' and
                    redis.call('HSETNX', KEYS[2], 'w', '1') == 1 then
                    -- The queue stays: keep its mark (acquire.lua).
                    redis.call('PEXPIRE', KEYS[2], '1209600000')
                end
                return announce(ch, 'w ' .. ARGV[7] .. ' ' .. head)
            end
            redis.call('ZREM', KEYS[4], head)
            args()
            local hl = dl % 2048
            if hl <= 0 or hl > handoff then
                hl = handoff
            end
            local tm = t
--@include text_token.luainc
            -- Above the released hold's token too: without retention it
            -- was kept in the lock hash, not the fence hash.
            local rt = ARGV[3]
            if #rt > #tok or (#rt == #tok and rt >= tok) then
                tok = string.format('%d', tonumber(rt) + 1)
            end
            -- '#q': others may be queued behind it.
            if ARGV[6] == '0' then
                redis.call('HSET', KEYS[1], head, '1', '#t', tok, '#f', '1',
                           '#q', '1')
            else
                redis.call('HSET', KEYS[1], head, '1', '#q', '1')
            end
            redis.call('PEXPIRE', KEYS[1], hl)
            -- r: the last token released; a give-back's 0 is none.
            local f = {'n', tok}
            if ARGV[3] ~= '0' then
                f = {'n', tok, 'r', ARGV[3]}
            end
            if renew then
                -- Renewed only when less than the retention is left (see
                -- acquire.lua: field d).
                f[#f + 1] = 'd'
                f[#f + 1] = string.format('%d',
                                          sec + math.floor(retain / 1000))
                redis.call('HSET', KEYS[2], unpack(f))
                redis.call('PEXPIRE', KEYS[2], 2 * retain)
            else
                redis.call('HSET', KEYS[2], unpack(f))
            end
            return announce(ch, 'h ' .. tok .. ' ' .. head)
        end
        if not hand then
            redis.call('ZREM', KEYS[3], head)
        end
        redis.call('ZREM', KEYS[4], head)
    end
    if quiet then
        return 0
    end
    if ARGV[6] == '0' then
        -- No retention: the fence hash is gone already, or must stay.
        return released()
    end
    if (ARGV[3] ~= '0' or ARGV[5] == '0') and
        redis.call('HSET', KEYS[2], 'r', ARGV[3]) == 1 then
        -- A new field: the fence hash may be new too (it expired under a
        -- hold longer than its retention): never leave it without a TTL.
        -- Twice the retention, as every renewal: never below its field d.
        args()
        redis.call('PEXPIRE', KEYS[2], 2 * retain)
    end
    return released()
end

-- (The counts compared as text first: both are plain decimals.) In the
-- same call the marks: '#l', someone may listen for the release (above),
-- '#q', someone may be queued (acquire.lua), and, without retention, '#f': the hold was granted beside a fence hash
-- holding a token (a hand-over's record), which must then stay (see the
-- top).
local f = redis.call('HMGET', KEYS[1], owner, '#f', '#l', '#q')
local cur, keepf = f[1] or '0', f[2]
heard = f[3]
if cur == ARGV[2] then
    if cur ~= '1' then
        redis.call('HINCRBY', KEYS[1], owner, -1)
        return 2
    end
    if ARGV[6] == '0' and not ARGV[9] and not keepf then
        -- No retention: the fence hash goes with the lock. None was
        -- there: nobody is queued (a queue always has one, acquire.lua),
        -- so only the announcement is left.
        if redis.call('DEL', KEYS[1], KEYS[2]) == 1 then
            return released()
        end
        return pass_on(false)
    end
    redis.call('DEL', KEYS[1])
    local ticket = ARGV[9] and tonumber(ARGV[9]) or 0
    if ticket > 0 then
        clock()
        redis.call('ZADD', KEYS[4],
                   string.format('%d', (now_ms + tonumber(ARGV[10])) * 2048),
                   owner)
        redis.call('ZADD', KEYS[3], 'NX', ARGV[9], owner)
        if ARGV[6] == '0' and
            redis.call('HSETNX', KEYS[2], 'w', '1') == 1 then
            redis.call('PEXPIRE', KEYS[2], '1209600000') -- the queue's mark
        end
    end
    -- With retention, a hold nobody queued for ('#q', acquire.lua) has
    -- no queue to look at.
    return pass_on(false, ARGV[6] ~= '0' and ticket == 0 and not f[4])
end
cur = tonumber(cur)
local expect = tonumber(ARGV[2])
if cur > 0 and cur == expect - 1 then
    return 3
end
-- A retry of the hold's last release: r is its token. With one server
-- not for token 0, a give-back of an attempt whose answer was lost (the
-- token is not known): it must take its owner out of the queue below. (It
-- used to match an r of "0", which such give-backs wrote, and left the
-- entry of a waiter that had gone: the next release handed the lock to
-- nobody, finding F6 in docs/reliability.md.) Redlock (ARGV[5] '0') as
-- before: its waiters keep their places under their ids (docs/design.md),
-- and taking them out there cost the fair Redlock chaos rows most of
-- their sections (fair_redlock_loss 19 and 30 against 113 and 132).
if cur == 0 and expect == 1 and (ARGV[3] ~= '0' or ARGV[5] == '0') and
    redis.call('HGET', KEYS[2], 'r') == ARGV[3] then
    return 3
end
-- Not the owner here. Redlock (ARGV[5] '0'), the hold's last level: note
-- its token as given up here (field x), so that a renewal's take-back of
-- this hold (retake.lua) that arrives after this release leaves the
-- server alone.
if cur == 0 and expect == 1 and ARGV[5] == '0' and ARGV[3] ~= '0' then
    local x = redis.call('HGET', KEYS[2], 'x')
    if not x or #x < #ARGV[3] or (#x == #ARGV[3] and x < ARGV[3]) then
        if redis.call('HSET', KEYS[2], 'x', ARGV[3]) == 1 then -- see r
            args()
            redis.call('PEXPIRE', KEYS[2], 2 * retain)
        end
    end
end
-- A Redlock waiter that won a majority elsewhere may still be queued on
-- this node: take it out, and if it was first of a free lock, wake the
-- next one.
if cur == 0 and redis.call('ZREM', KEYS[3], owner) == 1 then
    redis.call('ZREM', KEYS[4], owner)
    if ARGV[5] == '0' and redis.call('EXISTS', KEYS[1]) == 0 then
        pass_on(true)
    end
end
return 0
