-- fenced_set.lua: write a value only for a token at least as new as every
-- token a fenced write to this key has carried.
--
-- KEYS[1]  the resource hash: field 'value', field 'fence' (highest token seen)
-- ARGV[1]  the writer's fencing token
-- ARGV[2]  the value
--
-- Returns {1, token} written, or {0, fence} refused: the token is older than
-- fence, and nothing changed.
local tok = tonumber(ARGV[1])
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tok < fence then
    return {0, fence}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
return {1, tok}
