-- s_fenced_set.lua: fenced_set.lua for the string layout: write a value
-- only for a token at least as new as every token a fenced write or read
-- of this key has carried. The value is one string (s_fenced.luainc's
-- form "<fence> <value>"), written with one SET.
--
-- KEYS[1]  the value's key
-- ARGV[1]  the writer's fencing token (decimal, 1 to 2^53)
-- ARGV[2]  the value
--
-- Returns {1, token} written, {0, fence} refused: the token is older
-- than fence, and nothing changed; {-2, 0}: the key holds something else
-- (the hash layout's fenced value, or not a fenced value): nothing
-- changed.
--@include s_fenced.luainc

local fence = fenced(KEYS[1])
if not fence then
    return {-2, 0}
end
local tok = tonumber(ARGV[1])
if tok < fence then
    return {0, fence}
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2])
return {1, tok}
