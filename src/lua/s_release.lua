-- s_release.lua: release one level of a lock of the string layout
-- (s_acquire.lua: the value "<owner> <count> <token>[ l]").
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence hash (written only with fence retention: r = the
--          last token released, so that a retried release is known)
-- ARGV[1]  owner id
-- ARGV[2]  the reentry count the client believes the owner has
-- ARGV[3]  the hold's token (0: not known, an undo of an attempt whose
--          answer was lost)
-- ARGV[4]  the lock's pub/sub channel
-- ARGV[5]  fence retention in ms, "0" for none
-- ARGV[6]  an id of this release request (published)
-- ARGV[7]  (optional) "1": SPUBLISH (Redis Cluster)
--
-- Returns as release.lua: 1 released (announced 'r ID' on ARGV[4] when
-- the hold was marked ' l'), 4 the same but the announcement was refused
-- (ACL), 2 one level given back, 3 a retry of a release already done, 0
-- not the owner (the lease expired, or another owner has it).
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
    return 0 -- not this layout's key: not ours
end
local owner = ARGV[1]
if v then
    local o, n, tok, marks = string.match(v, '^(%S+) (%d+) (%d+)(.*)$')
    if o == owner then
        if n == ARGV[2] then
            if n ~= '1' then
                redis.call('SET', KEYS[1],
                           o .. ' ' .. (tonumber(n) - 1) .. ' ' .. tok ..
                               marks, 'KEEPTTL')
                return 2
            end
            redis.call('DEL', KEYS[1])
            if ARGV[5] ~= '0' then
                redis.call('HSET', KEYS[2], 'r', tok)
            end
            if marks ~= '' then
                local r = redis.pcall(ARGV[7] == '1' and 'SPUBLISH' or
                                          'PUBLISH', ARGV[4], 'r ' .. ARGV[6])
                if type(r) == 'table' and r.err then
                    return 4
                end
            end
            return 1
        end
        if tonumber(n) == tonumber(ARGV[2]) - 1 then
            return 3
        end
        return 0
    end
end
if ARGV[5] ~= '0' and ARGV[2] == '1' and ARGV[3] ~= '0' and
    redis.call('HGET', KEYS[2], 'r') == ARGV[3] then
    return 3
end
return 0
