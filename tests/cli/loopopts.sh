#!/usr/bin/env bash
# loopopts.sh - the client options that kept `dlock run` / `acquire` on the
# blocking API (a watchdog thread beside a holding dlock, a canceler
# thread beside a waiting one) are the event loop's now on one server:
# --wait-replicas, --lock-delay, --prefer-readers and --metrics-file. Each
# holding or waiting dlock has one thread (counted in /proc/PID/task), and
# each option still does what it says: the replica has the lock when
# COMMAND starts, too few replicas fail the grant (69, nothing left) or
# are ridden out by a wait, a reader that prefers readers gets in while a
# writer waits, the metrics file counts the loop's acquire and wait. And
# `dlock leader --watch` waits on the loop too (no canceler thread).
. "$(dirname "$0")/common.bash"

start_redis
M_URL=$REDIS_URL
MP=$REDIS_PORT
start_redis
R_PID=$REDIS_PID
RP=$REDIS_PORT
rcli "$RP" REPLICAOF 127.0.0.1 "$MP" >/dev/null
S=(-s "$M_URL")

# threads PID: how many threads the process has.
threads() {
    ls "/proc/$1/task" 2>/dev/null | wc -l
}

# linked: the master's WAIT counts the replica.
linked() {
    [ "$(rcli "$MP" WAIT 1 100)" = 1 ]
}
wait_until 20 linked || fail "the replica did not link"

# queued_is KEY N: N fair waiters are queued for KEY (status --json).
queued_is() {
    [ "$("$DLOCK_BIN" status --json "${S[@]}" "$1" |
        sed -n 's/.*"fair_queue":\([0-9-]*\).*/\1/p')" = "$2" ]
}

# A COMMAND that touches $1, then runs until $2 exists.
until_go='touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done'

# holding NAME ARGS...: `dlock run ARGS -- until_go` in the background
# until COMMAND started; one thread; HOLDER its pid.
holding() {
    local name=$1
    shift
    rm -f "$T/held" "$T/go"
    spawn_bg_err "$T/$name.err" "$DLOCK_BIN" run "$@" -- sh -c "$until_go" \
        sh "$T/held" "$T/go"
    HOLDER=$BG
    wait_until 30 test -e "$T/held" ||
        fail "$name: COMMAND did not start: $(cat "$T/$name.err")"
    check "$name: a holding dlock run has one thread (got $(threads \
"$HOLDER"))" test "$(threads "$HOLDER")" = 1
}

# marked: a waiting writer's mark keeps new readers of rw out.
marked() {
    [ "$(rcli "$MP" HEXISTS 'dlock:{rw}' '#w')" = 1 ]
}

# let_go: end the holder's COMMAND; its status in WAIT_STATUS.
let_go() {
    touch "$T/go"
    wait_pid "$HOLDER" 30
}

# ---- --wait-replicas 1: WAIT before COMMAND runs; one thread.
# (A generous WAIT timeout: WAIT answers as soon as the replica has it.)
holding replicas -l 60 "${S[@]}" --wait-replicas 1 \
    --wait-replicas-timeout 10 lk
check "the replica has the lock when COMMAND runs" \
    test "$(rcli "$RP" EXISTS 'dlock:{lk}')" = 1
let_go
check "the run exits 0 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0

# ---- the replica stopped: a try fails (69, given back, nothing left); a
# wait rides it out (one thread meanwhile) and gets the lock once the
# replica is back.
kill -STOP "$R_PID"
expect_status 69 "a try with the replica stopped" \
    "$DLOCK_BIN" run "${S[@]}" --wait-replicas 1 \
    --wait-replicas-timeout 0.2 -n lk -- true
check "says the grant was given back" file_has "$T/err" "given back"
check "no lock left on the master" key_gone "$MP" 'dlock:{lk}'
spawn_bg_err "$T/ride.err" "$DLOCK_BIN" run "${S[@]}" --wait-replicas 1 \
    --wait-replicas-timeout 0.2 -w 60 lk -- touch "$T/rode"
rider=$BG
wait_until 30 file_has "$T/ride.err" "trying again while the wait lasts" ||
    fail "the wait did not say it rides too few replicas: $(cat \
"$T/ride.err")"
check "a wait riding too few replicas has one thread (got $(threads \
"$rider"))" test "$(threads "$rider")" = 1
kill -CONT "$R_PID"
wait_pid "$rider" 30
check "it got the lock once the replica was back (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0 -a -e "$T/rode"

# ---- --lock-delay: one thread.
holding delay -l 60 "${S[@]}" --lock-delay 5 dk
let_go

# ---- --prefer-readers: a reader gets in while a writer waits.
expect_status 0 "a reader of rw" "$DLOCK_BIN" acquire -l 60 --shared \
    "${S[@]}" rw
reader=$(cut -d' ' -f1 "$T/out")
spawn_bg "$DLOCK_BIN" run -w 60 "${S[@]}" rw -- true
writer=$BG
wait_until 30 marked || fail "the writer did not mark its wait"
expect_status 1 "a plain reader's try is kept out" \
    "$DLOCK_BIN" run --shared "${S[@]}" -n rw -- true
holding prefer -l 60 --shared --prefer-readers "${S[@]}" rw
let_go
check "the reader that prefers readers ran (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
expect_status 0 "the first reader released" "$DLOCK_BIN" release \
    "${S[@]}" rw --owner "$reader"
wait_pid "$writer" 30
check "then the writer ran (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0

# ---- --metrics-file: a waiting run has one thread; the file counts the
# loop's wait and acquire.
holding mholder -l 60 "${S[@]}" mk
spawn_bg "$DLOCK_BIN" run -w 60 -l 60 "${S[@]}" --metrics-file "$T/m.prom" \
    mk -- true
mwaiter=$BG
wait_until 30 queued_is mk 1 ||
    fail "the metrics run did not queue"
check "a waiting run with --metrics-file has one thread (got $(threads \
"$mwaiter"))" test "$(threads "$mwaiter")" = 1
let_go
wait_pid "$mwaiter" 30
check "the metrics run exits 0 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
check "the file counts one acquisition" \
    file_has "$T/m.prom" '^dlock_acquisitions_total{lock="mk"} 1$'
check "the file counts one wait" \
    file_has "$T/m.prom" '^dlock_waits_total{lock="mk"} 1$'
check "the file counts one hold" \
    file_has "$T/m.prom" '^dlock_hold_seconds_count{lock="mk"} 1$'

# ---- `dlock leader --watch`: one thread (no canceler); a line now and
# one per change; SIGTERM ends it (143).
spawn_bg "$DLOCK_BIN" leader --watch "${S[@]}" ld >"$T/watch.out"
watcher=$BG
wait_until 30 file_has "$T/watch.out" '^none$' || fail "no first line"
check "a watching dlock leader has one thread (got $(threads "$watcher"))" \
    test "$(threads "$watcher")" = 1
# Its subscription first: a leader that came and went before it would be
# missed (its first line was printed before it subscribed).
subscribed() { [ "$(rcli "$MP" PUBSUB NUMSUB 'dlock:{ld}:c' | tail -1)" = 1 ]; }
wait_until 30 subscribed || fail "the watch did not subscribe"
expect_status 0 "a leader of ld comes and goes" "$DLOCK_BIN" elect \
    "${S[@]}" --value v1 ld -- true
wait_until 30 file_has "$T/watch.out" ' v1$' ||
    fail "the watch did not print the new leader"
kill -TERM "$watcher"
wait_pid "$watcher" 30
check "SIGTERM ends the watch: 143 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 143

finish
