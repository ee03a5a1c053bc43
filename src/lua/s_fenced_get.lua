-- s_fenced_get.lua: read a value written by s_fenced_set.lua (the
-- string layout's fenced value, one string: s_fenced.luainc's form).
-- One GET: the client splits the fence from the value (a hash, the hash
-- layout's, answers WRONGTYPE). The blocking API and a loop over one
-- server send the GET itself; an engine loop sends this script.
--
-- KEYS[1]  the value's key
--
-- Returns the string, or nil when the key does not exist.
return redis.call('GET', KEYS[1])
