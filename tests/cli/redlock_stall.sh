#!/usr/bin/env bash
# redlock_stall.sh - Redlock over three servers while one of them is
# stopped (SIGSTOP: it accepts TCP connections but answers nothing, like a
# hung host or a server busy in DEBUG SLEEP). Every `dlock` process opens
# new connections; the stopped server must not hold up the two others,
# whichever place it has among the -s: run, acquire/release and status
# work on the majority, and mutual exclusion holds. Then the server is
# continued and takes part again.
. "$(dirname "$0")/common.bash"

start_redis
A_URL=$REDIS_URL
start_redis
B_URL=$REDIS_URL
start_redis
C_PORT=$REDIS_PORT C_PID=$REDIS_PID C_URL=$REDIS_URL

# The stopped server is continued whatever happens, so that the cleanup's
# SIGTERM reaches it.
trap 'kill -CONT "$C_PID" 2>/dev/null; cleanup' EXIT

expect_status 0 "Redlock run, every server up" \
    "$DLOCK_BIN" run -s "$A_URL" -s "$B_URL" -s "$C_URL" rs -- true

# Each dlock waits for the stopped server as long as its --timeout: 1 s
# rather than the default 2 s halves the test (the live servers answer in
# well under a millisecond).
export DLOCK_TIMEOUT=1
kill -STOP "$C_PID"

expect_status 0 "stopped server given last" \
    "$DLOCK_BIN" run -s "$A_URL" -s "$B_URL" -s "$C_URL" rs -- \
    touch "$T/ran-last"
check "the command ran" test -e "$T/ran-last"
[ -e "$T/ran-last" ] || sed 's/^/  dlock: /' "$T/err" >&2
expect_status 0 "stopped server given first" \
    "$DLOCK_BIN" run -s "$C_URL" -s "$A_URL" -s "$B_URL" rs -- \
    touch "$T/ran-first"
check "the command ran" test -e "$T/ran-first"
expect_status 0 "stopped server in the middle, servers from DLOCK_SERVERS" \
    env DLOCK_SERVERS="$A_URL,$C_URL,$B_URL" "$DLOCK_BIN" run rs -- true

# Mutual exclusion on the two live servers.
S=(-s "$C_URL" -s "$A_URL" -s "$B_URL")
"$DLOCK_BIN" acquire -l 60 "${S[@]}" rs-held >"$T/owner" 2>"$T/acq.err"
check "acquire with a stopped server (got: $(cat "$T/acq.err"))" \
    test -s "$T/owner"
expect_status 1 "-n while it is held" "$DLOCK_BIN" run -n "${S[@]}" rs-held \
    -- touch "$T/ran-twice"
check "nothing ran beside the holder" test ! -e "$T/ran-twice"
expect_status 0 "status with a stopped server" \
    "$DLOCK_BIN" status "${S[@]}" rs-held
check "status names the holder" \
    file_has "$T/out" "$(cut -d' ' -f1 "$T/owner")"
expect_status 0 "release with a stopped server" \
    "$DLOCK_BIN" release "${S[@]}" --owner "$(cut -d' ' -f1 "$T/owner")" \
    rs-held
expect_status 0 "free again after the release" \
    "$DLOCK_BIN" run -n "${S[@]}" rs-held -- true

kill -CONT "$C_PID"
expect_status 0 "the server continued: run" \
    "$DLOCK_BIN" run "${S[@]}" rs -- true
"$DLOCK_BIN" acquire -l 60 "${S[@]}" rs-back >/dev/null 2>&1 ||
    fail "acquire after the server continued"
check "the continued server holds its part of the lock" \
    test "$(rcli "$C_PORT" EXISTS 'dlock:{rs-back}')" = 1

finish
