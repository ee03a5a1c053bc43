-- elect_leader.lua: who leads an election now.
--
-- KEYS[1]  the lock hash    <prefix>:{<name>}
-- KEYS[2]  the leader hash  <prefix>:{<name>}:l
-- KEYS[3]  the fence hash   <prefix>:{<name>}:f   n = last token granted
--
-- Returns
--   {0}                               nobody holds the lock
--   {1, owner, epoch, value, since, pttl}  the leader hash's owner holds the
--                                     lock: it leads with that value
--   {2, owner, last token, pttl}      the lock is held, but its holder has
--                                     not proclaimed (it has just won, or
--                                     the name is held by a plain lock); the
--                                     last token granted is its epoch
-- A leader hash whose owner no longer holds the lock is stale and ignored.
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
    return {0}
end
-- The holder: the first field that is not a mark ('#t': the hold's token
-- without fence retention; '#r', '#w': a read-write lock's).
local fields = redis.call('HKEYS', KEYS[1])
local holders = {}
for _, f in ipairs(fields) do
    if string.sub(f, 1, 1) ~= '#' then
        holders[#holders + 1] = f
    end
end
if #holders == 0 then
    return {0}
end
local l = redis.call('HMGET', KEYS[2], 'o', 'e', 'v', 's')
if l[1] and redis.call('HEXISTS', KEYS[1], l[1]) == 1 then
    return {1, l[1], l[2] or '0', l[3] or '', l[4] or '0', pttl}
end
local n = redis.call('HGET', KEYS[3], 'n') or '0'
local held = redis.call('HGET', KEYS[1], '#t')
if held and tonumber(held) > tonumber(n) then
    n = held
end
return {2, holders[1], n, pttl}
