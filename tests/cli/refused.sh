#!/usr/bin/env bash
# refused.sh - a server that refuses what dlock asks, whoever asks again
# (an ACL without EVALSHA/EVAL or without the lock's keys, a read-only
# replica, a database the server does not have), exits 77 like refused
# credentials, not 69 ("no server reachable"): a wrapper that retries on
# 69 must not retry a misconfiguration forever. COMMAND never runs. `dlock status` on the
# replica warns that it is one.
. "$(dirname "$0")/common.bash"

start_redis --conf "user noeval on >pw ~* &* +@all -eval -evalsha" \
    --conf "user nokeys on >pw ~other:* &* +@all"
P=$REDIS_PORT
start_redis --conf "replicaof 127.0.0.1 $P"
R=$REDIS_PORT

expect_status 77 "a database the server does not have (/99): 77" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$P/99" k -- touch "$T/ran"
check "the message names it" grep -q 'SELECT 99.*out of range' "$T/err"
expect_status 77 "acquire: the same" \
    "$DLOCK_BIN" acquire -s "redis://127.0.0.1:$P/99" k
expect_status 0 "a database the server has (/1)" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$P/1" k -- true
expect_status 77 "ACL without EVALSHA: 77" \
    env DLOCK_PASSWORD=pw "$DLOCK_BIN" run --user noeval \
    -s "redis://127.0.0.1:$P" k -- touch "$T/ran"
check "the message names the refusal" grep -q 'NOPERM' "$T/err"
expect_status 77 "ACL without the lock's keys: 77" \
    env DLOCK_PASSWORD=pw "$DLOCK_BIN" run --user nokeys \
    -s "redis://127.0.0.1:$P" k -- touch "$T/ran"
expect_status 77 "a read-only replica: 77" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$R" k -- touch "$T/ran"
check "the message says it is a replica" grep -Eq 'READONLY|is a replica' "$T/err"
expect_status 77 "acquire on a replica: 77" \
    "$DLOCK_BIN" acquire -s "redis://127.0.0.1:$R" k
check "COMMAND never ran" test ! -e "$T/ran"
expect_status 0 "status on the replica works" \
    "$DLOCK_BIN" status -s "redis://127.0.0.1:$R" k
check "status warns that it is a read-only replica" \
    grep -q "^warning: .*a read-only replica of 127.0.0.1:$P" "$T/out"
expect_status 0 "the default user still runs it" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$P" k -- true

finish
