#!/usr/bin/env bash
# redlock.sh - `dlock run` over three independent servers (repeated -s, or
# DLOCK_SERVERS): the lock is on a majority, mutual exclusion holds, one
# server down still works, two down is exit 69 (no quorum), and the child
# inherits none of the three connections.
. "$(dirname "$0")/common.bash"

start_redis
A_DIR=$REDIS_DIR A_PORT=$REDIS_PORT A_URL=$REDIS_URL
start_redis
B_DIR=$REDIS_DIR B_PORT=$REDIS_PORT B_URL=$REDIS_URL
start_redis
C_DIR=$REDIS_DIR C_PORT=$REDIS_PORT C_URL=$REDIS_URL
S=(-s "$A_URL" -s "$B_URL" -s "$C_URL")

# count_holding KEY: on how many servers the lock key exists.
count_holding() {
    local n=0 p
    for p in "$A_PORT" "$B_PORT" "$C_PORT"; do
        [ "$(rcli "$p" EXISTS "dlock:{$1}" 2>/dev/null)" = 1 ] && n=$((n + 1))
    done
    echo "$n"
}

expect_status 0 "Redlock run" "$DLOCK_BIN" run -v "${S[@]}" rl -- \
    sh -c 'echo "$DLOCK_FENCING_TOKEN"'
check "-v says Redlock with quorum 2" grep -q 'quorum 2' "$T/err"
tok1=$(cat "$T/out")
rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run "${S[@]}" rl -- sh -c \
    'touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done' sh "$T"
holder=$BG
wait_until 10 test -e "$T/held" || fail "holder did not start"
n=$(count_holding rl)
check "the lock is on a majority of the servers ($n of 3)" test "$n" -ge 2
expect_status 1 "-n while held (Redlock)" "$DLOCK_BIN" run -n "${S[@]}" rl -- true
expect_status 1 "-n while held, servers from DLOCK_SERVERS" \
    env DLOCK_SERVERS="$A_URL, $B_URL,$C_URL" "$DLOCK_BIN" run -n rl -- true
expect_status 0 "status over three servers" "$DLOCK_BIN" status "${S[@]}" rl
check "status shows the nodes" grep -Eq '^nodes: *[23] of 3' "$T/out"
touch "$T/go"
wait_pid "$holder" 20
check "holder exits 0 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
check "released on every server" test "$(count_holding rl)" = 0
expect_status 0 "token" "$DLOCK_BIN" run "${S[@]}" rl -- \
    sh -c 'echo "$DLOCK_FENCING_TOKEN"'
check "tokens increase under Redlock ($tok1 < $(cat "$T/out"))" \
    test "$(cat "$T/out")" -gt "${tok1:-0}"

# No inherited sockets with three connections open.
expect_status 0 "child's fds (Redlock)" \
    "${CLOSED_EXEC[@]}" "$DLOCK_BIN" run "${S[@]}" rfd -- \
    sh -c 'ls /proc/$$/fd; :'
fds=$(sort -n "$T/out" | tr '\n' ' ')
check "the child has only fds 0 1 2 (has: $fds)" test "$fds" = "0 1 2 "

# Mutual exclusion over Redlock: 4 workers x 15 increments.
echo 0 >"$T/counter"
incr='n=$(cat "$1/counter"); sleep 0.002; echo $((n + 1)) >"$1/counter"'
pids=()
for w in 1 2 3 4; do
    spawn_bg bash -c 'for i in $(seq 15); do "$1" run -w 60 "${@:3}" rc -- \
        sh -c "$2" sh "'"$T"'" || echo "status $?" >>"'"$T"'/errors"; done' \
        bash "$DLOCK_BIN" "$incr" "${S[@]}"
    pids+=("$BG")
done
for p in "${pids[@]}"; do wait_pid "$p" 120 || fail "Redlock worker timed out"; done
check "Redlock counter is exactly 60 (is $(cat "$T/counter"))" \
    test "$(cat "$T/counter")" = 60
check "no Redlock run failed" test ! -s "$T/errors"

# One server down: 2 of 3 is a majority.
bash "$FIXTURE" stop "$C_DIR"
expect_status 0 "one server of three down" "$DLOCK_BIN" run "${S[@]}" rl -- true
# A holder loses its lease when a second server goes: renewals can no
# longer reach a majority.
rm -f "$T/started" "$T/term"
spawn_bg_err "$T/rl-lost.err" "$DLOCK_BIN" run -l 2 "${S[@]}" rlost -- bash -c \
    'trap "echo TERM >$1/term; exit 143" TERM; touch "$1/started"
     while :; do sleep 0.05; done' bash "$T"
pid=$BG
wait_until 10 test -e "$T/started" || fail "Redlock holder did not start"
# Two down: no quorum.
bash "$FIXTURE" stop "$B_DIR"
wait_pid "$pid" 30
check "Redlock: quorum gone while COMMAND runs: exit 75 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75
check "...after SIGTERM to COMMAND" file_has "$T/term" TERM
[ "$WAIT_STATUS" = 75 ] || sed 's/^/  dlock: /' "$T/rl-lost.err" >&2
expect_status 69 "two servers of three down: no quorum" \
    "$DLOCK_BIN" run "${S[@]}" rl -- touch "$T/ran"
check "nothing ran" test ! -e "$T/ran"
check "no lock is left on the live server" test "$(rcli "$A_PORT" EXISTS 'dlock:{rl}')" = 0
expect_status 69 "no quorum with -w" \
    "$DLOCK_BIN" run -w 1 "${S[@]}" rl -- touch "$T/ran"
expect_status 69 "acquire: no quorum" "$DLOCK_BIN" acquire "${S[@]}" rl

finish
