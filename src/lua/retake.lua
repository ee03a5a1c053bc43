-- retake.lua: Redlock: put a held lock back on a server that lost it or
-- never got it (a restart without data, an acquire that reached only a
-- majority), after a renewal confirmed that a majority still holds it for
-- this owner (hold/renew.c). Never takes it from another owner.
--
-- KEYS[2i-1]  lock hash i
-- KEYS[2i]    fence hash i (n, r, x: see acquire.lua and release.lua)
-- ARGV[1]     the fence hash's retention, ms (its TTL is set to twice it,
--             as by every script that sets it)
-- ARGV[4i-2]  owner id of lock i
-- ARGV[4i-1]  lease of lock i, ms (> 0)
-- ARGV[4i]    the owner's reentry depth (>= 1)
-- ARGV[4i+1]  the lock's fencing token
--
-- Returns an array: for each lock
--   1  the owner holds it here: its lease set (as extend.lua)
--   2  it was free here: taken back for the owner at its depth, with the
--      lease; the fence counter n raised to at least the token, so that a
--      later grant here issues a greater one
--   0  left alone: another owner (or a reader) holds it here, or this
--      hold was released here already (r or x >= the token: a take-back
--      that arrives after the hold's release must not bring it back)
--
-- The fair queue is not looked at: the lock is held (by a majority), so
-- the waiters queued here wait for it like those queued elsewhere, and the
-- release wakes the first of them here as on every node.

-- a >= b for decimal strings without leading zeros.
local function ge(a, b)
    return #a > #b or (#a == #b and a >= b)
end

local out = {}
for i = 1, #KEYS / 2 do
    local key, fkey = KEYS[2 * i - 1], KEYS[2 * i]
    local owner, lease = ARGV[4 * i - 2], ARGV[4 * i - 1]
    local depth, tok = ARGV[4 * i], ARGV[4 * i + 1]
    if redis.call('HEXISTS', key, owner) == 1 then
        redis.call('PEXPIRE', key, lease)
        out[i] = 1
    elseif redis.call('EXISTS', key) == 1 then
        out[i] = 0
    else
        local f = redis.call('HMGET', fkey, 'n', 'r', 'x')
        if (f[2] and ge(f[2], tok)) or (f[3] and ge(f[3], tok)) then
            out[i] = 0
        else
            -- '#q': waiters may be queued here (acquire.lua)
            redis.call('HSET', key, owner, depth, '#q', '1')
            redis.call('PEXPIRE', key, lease)
            if not f[1] or not ge(f[1], tok) then
                redis.call('HSET', fkey, 'n', tok)
            end
            redis.call('PEXPIRE', fkey, 2 * tonumber(ARGV[1]))
            out[i] = 2
        end
    end
end
return out
