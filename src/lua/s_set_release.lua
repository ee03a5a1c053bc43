-- s_set_release.lua: a fenced set of a value, then the release of the
-- lock whose token fences it, in one script (the string layout; the
-- lock key and the value's key on one server). The event loop's
-- dlock_loop_fenced_set_release (src/loop/fenced.c) and the blocking
-- dlock_lock_fenced_set_release (src/api/lock.c).
--
-- KEYS     as s_release.lua's (the lock key, the fence hash with
--          retention), then the value's key (s_fenced_set.lua's: one
--          string "<fence> <value>", s_fenced.luainc) last
-- ARGV[1]  the lock's value as the hold left it: "<owner> 1 <token>"
--          (the token as the client knows it: 0 when not issued yet);
--          s_release.lua's owner, depth and token in one argument
-- ARGV[2]  the value
--
-- The value is written only while the owner holds the lock: its token
-- is the hold's (stamped now from the server's time when not issued yet,
-- as s_stamp.lua does), and it must be at least the value's fence.
-- Then the lock is released exactly as s_release.lua does (a hand-over
-- to a queued waiter, an announcement to a listening one).
--
-- Returns {stored, t, r}, or from the common case's path the same as
-- one string "<stored> <t> <r>" (cheaper to answer than a table), or
-- there, when the value's key did not exist (one SETNX wrote it), the
-- token "<t>" alone for stored 1 and released 1 (no string to make):
-- stored 1 (written, t the token) or 0 (t is
-- the fence, newer than the hold's token: nothing written), -1 with
-- t 0: the owner does not hold the lock (lease expired, another owner):
-- nothing written, or -2 with t 0: the value's key holds something else
-- (the hash layout's fenced value, or not a fenced value): nothing
-- written; r is s_release.lua's answer (1 or 4 released, 0 not the
-- owner).
--@include s_fenced.luainc

local v = redis.pcall('GET', KEYS[1]) -- the release's too (unchanged)

-- The common case first (the gateway's, issue 30): no fence hash (KEYS
-- the lock and the value's key), an unmarked hold of depth 1 whose
-- token the client knows ('0': not issued yet). Only what it needs:
-- tokens compared as decimal strings (canonical: no leading zeros), no
-- tonumber, t answered as a string; the same outcomes as below. The
-- value's key is read only when a SETNX finds it there (a gateway's first
-- result: it is not), and each command's answer is an integer or a
-- string where one can be (issue 30: TIME's table costs the server more
-- than the rest of the script's Lua).
if #KEYS == 2 and v == ARGV[1] then
    local tok
    if string.sub(v, -2) == ' 0' then
        local tm = redis.call('TIME')
        local us = tm[2]
        if #us < 6 then
            us = string.sub('00000', #us) .. us
        end
        tok = tm[1] .. us
    else
        tok = string.match(v, ' (%d+)$')
    end
    local nv = tok .. ' ' .. ARGV[2]
    if redis.call('SETNX', KEYS[2], nv) == 1 then
        redis.call('DEL', KEYS[1])
        return tok -- stored and released: the token alone, no string to make
    end
    local stored, t = '1', tok
    local s = redis.pcall('GET', KEYS[2])
    local f = type(s) == 'string' and string.match(s, '^[1-9]%d*')
    if not f or (#s > #f and string.byte(s, #f + 1) ~= 32) then
        stored, t = '-2', '0'
    elseif #f > #tok or (#f == #tok and f > tok) then
        stored, t = '0', f
    else
        redis.call('SET', KEYS[2], nv)
    end
    redis.call('DEL', KEYS[1])
    return stored .. ' ' .. t .. ' 1' -- a string: no table to convert
end

-- Otherwise s_release.luainc's arguments: owner, depth 1, token.
local rkey = table.remove(KEYS)
local value = ARGV[2]
ARGV[1], ARGV[2], ARGV[3] = string.match(ARGV[1], '^(%S+) (1) (%d+)$')
local stored, t = -1, 0
if type(v) == 'string' then
    local o, tok = string.match(v, '^(%S+) %d+ (%d+)')
    if o == ARGV[1] then
        if tok == '0' then
            local tm = redis.call('TIME')
            tok = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
        end
        local fence = fenced(rkey)
        if not fence then
            stored = -2
        elseif fence > tonumber(tok) then
            stored, t = 0, fence
        else
            redis.call('SET', rkey, tok .. ' ' .. value)
            stored, t = 1, tonumber(tok)
        end
    end
end

local function release()
--@include s_release.luainc
end

return {stored, t, release()}
