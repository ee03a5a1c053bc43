-- fenced_read.lua: read a fenced value under a token, and make that token
-- the resource's floor: from then on fenced_set.lua refuses every older
-- token. The read of a read-modify-write, so that a holder paused past its
-- lease cannot write between a newer holder's read and its write.
--
-- KEYS[1]  the resource hash: field 'value', field 'fence' (highest token seen)
-- ARGV[1]  the reader's fencing token
--
-- Returns {1, value or nil, token} read (the fence is now the token);
-- {0, nil, fence} refused: the token is older than fence, nothing changed.
-- One HMGET reads both fields (and an HSET raises the fence when needed).
local tok = tonumber(ARGV[1])
local got = redis.call('HMGET', KEYS[1], 'value', 'fence')
local fence = tonumber(got[2] or '0')
if tok < fence then
    return {0, false, fence}
end
if tok > fence then
    redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
return {1, got[1], tok}
