#!/usr/bin/env bash
# sameserver.sh - a Redlock majority never comes from one server: `-s A -s
# A -s DEAD`, another db of A, or A under another name (localhost) exit 64
# with both entries named, and COMMAND does not run; three independent
# servers work.
. "$(dirname "$0")/common.bash"

start_redis
A=$REDIS_PORT
start_redis
B=$REDIS_PORT
start_redis
C=$REDIS_PORT
start_redis
D=$REDIS_PORT
bash "$FIXTURE" stop "$REDIS_DIR" >/dev/null 2>&1 # D now refuses connections

a=redis://127.0.0.1:$A
dead=redis://127.0.0.1:$D
expect_status 64 "A A DEAD: 64" \
    "$DLOCK_BIN" run -s "$a" -s "$a" -s "$dead" k -- touch "$T/ran"
check "both entries are named" grep -q 'servers 1 (.*) and 2 (.*) are the same Redis server' "$T/err"
expect_status 64 "A A/1 DEAD: 64" \
    "$DLOCK_BIN" run -s "$a" -s "$a/1" -s "$dead" k -- touch "$T/ran"
expect_status 64 "A localhost:A DEAD: 64 (told by the run_id)" \
    "$DLOCK_BIN" run -s "$a" -s "redis://localhost:$A" -s "$dead" k -- touch "$T/ran"
check "both entries are named" grep -q 'servers 1 (.*) and 2 (localhost.*) are the same Redis server' "$T/err"
check "COMMAND never ran" test ! -e "$T/ran"
check "nothing stays held on A" key_gone "$A" 'dlock:{k}'
expect_status 0 "three independent servers" \
    "$DLOCK_BIN" run -s "$a" -s "redis://127.0.0.1:$B" -s "redis://127.0.0.1:$C" k -- true

finish
