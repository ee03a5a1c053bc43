-- s_fenced_read.lua: fenced_read.lua for the string layout (the value
-- one string, s_fenced.luainc's form): read the value under a token and
-- make that token the key's fence, so that from then on a fenced write
-- refuses every older token. Raising the fence rewrites the string (its
-- TTL kept): "<token> <value>", or "<token>" when there is no value.
--
-- KEYS[1]  the value's key
-- ARGV[1]  the reader's fencing token (decimal, 1 to 2^53)
--
-- Returns {1, value or nil, token} read (the fence is now the token);
-- {0, nil, fence} refused: the token is older than fence, nothing
-- changed; {-2, nil, 0}: the key holds something else (the hash
-- layout's fenced value, or not a fenced value): nothing changed.
--@include s_fenced.luainc

local fence, value = fenced(KEYS[1])
if not fence then
    return {-2, false, 0}
end
local tok = tonumber(ARGV[1])
if tok < fence then
    return {0, false, fence}
end
if tok > fence then
    if value then
        redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. value, 'KEEPTTL')
    else
        redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
    end
end
return {1, value, tok}
