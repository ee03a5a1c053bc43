-- s_stamp.lua: the token of a hold of the string layout, issued lazily
-- (docs/design.md, "The string layout"): a fresh uncontended acquire
-- without fence retention is a plain SET NX PX of "<owner> 1 0" (no
-- script, hold/kind.c), its token 0 meaning "not issued yet". The first
-- thing that needs the token stamps the server's time in us into the
-- value, while the hold is still this owner's; so does a waiter that
-- marks the hold (s_acquire.lua). Exclusion orders the holds, so the
-- stamps increase across holds of a name while the server's clock does
-- not step back, as the script-issued tokens do.
--
-- KEYS[1]  the lock key
-- ARGV[1]  owner id
--
-- Returns {1, token} (the hold's token, stamped now if it had none) or
-- {0} when the owner does not hold the name (the lease ran out, or
-- another owner has it): no token for a hold that is gone.
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then
    return {0}
end
local o, n, tok, marks = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
if o ~= ARGV[1] then
    return {0}
end
if tok == '0' then
    local tm = redis.call('TIME')
    tok = tm[1] .. string.sub('00000', #tm[2]) .. tm[2]
    redis.call('SET', KEYS[1], o .. ' ' .. n .. ' ' .. tok .. marks, 'KEEPTTL')
end
return {1, tok}
