-- fenced_get.lua: read a value written by fenced_set.lua.
--
-- KEYS[1]  the resource hash
--
-- Returns {value or nil, highest token seen or nil}.
return redis.call('HMGET', KEYS[1], 'value', 'fence')
