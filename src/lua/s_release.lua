-- s_release.lua: release one level of a lock of the string layout
-- (s_acquire.lua: the value "<owner> <count> <token>[ l]").
--
-- KEYS[1]  the lock key
-- KEYS[2]  with fence retention only: the fence hash (r = the last
--          token released, so that a retried release is known)
-- ARGV[1]  owner id
-- ARGV[2]  the reentry count the client believes the owner has
-- ARGV[3]  the hold's token (0: not known, an undo of an attempt whose
--          answer was lost)
-- ARGV[4]  (optional) "1": announce with SPUBLISH (Redis Cluster)
--
-- A release of a hold marked ' l' announces 'r TOKEN' on the lock's
-- channel KEYS[1] .. ':c' (the token: unique per hold on one server,
-- which is what a waiter tells releases apart by).
-- Returns as release.lua: 1 released (and announced where marked), 4
-- the same but the announcement was refused (ACL), 2 one level given
-- back, 3 a retry of a release already done, 0 not the owner (the lease
-- expired, or another owner has it).
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] .. ' 1 ' .. ARGV[3] and ARGV[2] == '1' then
    -- The common case: the last level of an unmarked hold.
    redis.call('DEL', KEYS[1])
    if KEYS[2] then
        redis.call('HSET', KEYS[2], 'r', ARGV[3])
    end
    return 1
end
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
            if KEYS[2] then
                redis.call('HSET', KEYS[2], 'r', tok)
            end
            if marks ~= '' then
                local r = redis.pcall(ARGV[4] == '1' and 'SPUBLISH' or
                                          'PUBLISH', KEYS[1] .. ':c',
                                      'r ' .. tok)
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
if KEYS[2] and ARGV[2] == '1' and ARGV[3] ~= '0' and
    redis.call('HGET', KEYS[2], 'r') == ARGV[3] then
    return 3
end
return 0
