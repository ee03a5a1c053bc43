#!/usr/bin/env bash
# loopwait.sh - `dlock run`, `dlock acquire` and `dlock elect` wait, and
# hold, on libdlock's event loop (issue 30): one thread, no canceler
# thread beside a waiting dlock and no watchdog thread beside a holding
# one (counted in /proc/PID/task); a SIGTERM during a fair wait gives its
# queue place back before dlock exits (the queue in Redis is empty the
# moment the waiter is gone); a lease shorter than COMMAND is renewed by
# the loop; several servers (Redlock) on the loop too.
. "$(dirname "$0")/common.bash"

start_redis
S=(-s "$REDIS_URL")
P=$REDIS_PORT

# threads PID: how many threads the process has.
threads() {
    ls "/proc/$1/task" 2>/dev/null | wc -l
}

# queued KEY: the number of fair waiters queued for KEY (status --json).
queued() {
    "$DLOCK_BIN" status --json "${S[@]}" "$1" |
        sed -n 's/.*"fair_queue":\([0-9-]*\).*/\1/p'
}

# queued_is KEY N: N fair waiters are queued for KEY (for wait_until).
queued_is() {
    [ "$(queued "$1")" = "$2" ]
}

# waiting WHAT PID KEY SIG STATUS: PID (dlock WHAT) queues for KEY with
# one thread; signal SIG ends its wait with STATUS, and its queue place
# is given back by the time it has exited.
waiting() {
    local what=$1 pid=$2 key=$3 sig=$4 want=$5
    wait_until 10 queued_is "$key" 1 || fail "$what did not queue"
    check "a waiting $what has one thread, no canceler (got $(threads \
"$pid"))" test "$(threads "$pid")" = 1
    kill -"$sig" "$pid"
    wait_pid "$pid" 30
    check "SIG$sig during $what's wait: $want (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = "$want"
    check "$what's queue place is given back (got $(queued "$key"))" \
        test "$(queued "$key")" = 0
}

# A COMMAND that touches $1, then runs until $2 exists.
until_go='touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done'

# ---- a holding `dlock run`: one thread (the loop renews, no watchdog).
spawn_bg "$DLOCK_BIN" run -l 60 "${S[@]}" lw -- sh -c "$until_go" sh \
    "$T/held" "$T/go"
HOLDER=$BG
wait_until 10 test -e "$T/held" || fail "the holder did not start"
check "a holding dlock run has one thread (got $(threads "$HOLDER"))" \
    test "$(threads "$HOLDER")" = 1

# ---- a waiting `dlock run` (fair by default): queued, one thread;
# SIGTERM ends the wait (143) and gives its queue place back before dlock
# exits.
spawn_bg_err "$T/w.err" "$DLOCK_BIN" run -w 60 "${S[@]}" lw -- \
    touch "$T/ran-w"
waiter=$BG
waiting "dlock run" "$waiter" lw TERM 143
check "the queue's key is gone" key_gone "$P" 'dlock:{lw}:q'
check "nothing ran" test ! -e "$T/ran-w"
touch "$T/go"
wait_pid "$HOLDER" 30

# ---- `dlock acquire -w` waiting: one thread; SIGHUP gives its place back
# (not SIGINT: a background job of a script starts with it ignored).
expect_status 0 "a holder of la" "$DLOCK_BIN" acquire -l 60 "${S[@]}" la
owner=$(cut -d' ' -f1 "$T/out")
spawn_bg "$DLOCK_BIN" acquire -w 60 "${S[@]}" la
waiter=$BG
waiting "dlock acquire" "$waiter" la HUP 129
expect_status 0 "la released" "$DLOCK_BIN" release "${S[@]}" la \
    --owner "$owner"

# ---- `dlock elect`: a follower waits with one thread; the leader leads
# with one thread.
rm -f "$T/leading" "$T/go-el"
spawn_bg "$DLOCK_BIN" elect -l 60 "${S[@]}" lw-el -- sh -c "$until_go" sh \
    "$T/leading" "$T/go-el"
leader=$BG
wait_until 10 test -e "$T/leading" || fail "the leader did not start"
check "a leading dlock elect has one thread (got $(threads "$leader"))" \
    test "$(threads "$leader")" = 1
spawn_bg "$DLOCK_BIN" elect -w 60 "${S[@]}" lw-el -- touch "$T/ran-f"
follower=$BG
waiting "dlock elect follower" "$follower" lw-el TERM 143
touch "$T/go-el"
wait_pid "$leader" 30
check "the leader exits with COMMAND's status (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0

# ---- the loop renews: a lease of 0.3 s outlives a COMMAND of 1 s, with
# the holder info renewed beside it (COMMAND reads it after 3 leases).
expect_status 0 "renewed on the loop: COMMAND's status 0" \
    "$DLOCK_BIN" run -l 0.3 --label renewed "${S[@]}" lr -- sh -c \
    'sleep 1; redis-cli -h 127.0.0.1 -p "$1" HGET "dlock:{lr}:i" l >"$2"' \
    sh "$P" "$T/info"
check "the holder info outlived 3 leases ($(cat "$T/info" 2>/dev/null))" \
    test "$(cat "$T/info" 2>/dev/null)" = renewed

# ---- several KEYs, the second busy: the try gives the first back, and
# the wait (on the loop, where the name is the loop's until that release
# is answered) then queues for the second and runs once it is free.
expect_status 0 "a holder of k2" "$DLOCK_BIN" acquire -l 60 "${S[@]}" k2
owner=$(cut -d' ' -f1 "$T/out")
spawn_bg_err "$T/k.err" "$DLOCK_BIN" run -w 60 "${S[@]}" k1 k2 -- \
    touch "$T/ran-k"
waiter=$BG
check "the waiter for k1 k2 queues for k2" wait_until 10 queued_is k2 1
expect_status 0 "k2 released" "$DLOCK_BIN" release "${S[@]}" k2 \
    --owner "$owner"
wait_pid "$waiter" 30
check "then it runs with both (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
check "its command ran" test -e "$T/ran-k"

# ---- several servers (Redlock): the loop serves them too (issue 30).
# A holding run is one thread (the loop renews through the engine); a
# waiting one is the loop's thread and the client's notifier (the
# subscriber of the release and handoff channels), no canceler and no
# watchdog thread; SIGTERM gives its queue place back on every server.
start_redis
S2=(-s "$REDIS_URL")
P2=$REDIS_PORT
start_redis
S3=(-s "$REDIS_URL")
P3=$REDIS_PORT
RL=("${S[@]}" "${S2[@]}" "${S3[@]}")
expect_status 0 "Redlock: run" "$DLOCK_BIN" run "${RL[@]}" lrl -- true
rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run -l 60 "${RL[@]}" lrh -- sh -c "$until_go" sh \
    "$T/held" "$T/go"
RHOLDER=$BG
wait_until 10 test -e "$T/held" || fail "the Redlock holder did not start"
check "a holding Redlock dlock run has one thread (got $(threads \
"$RHOLDER"))" test "$(threads "$RHOLDER")" = 1

# rqueued: the fair waiters queued for lrh, summed over the 3 servers.
rqueued() {
    local n=0 p
    for p in "$P" "$P2" "$P3"; do
        n=$((n + $(redis-cli -p "$p" ZCARD 'dlock:{lrh}:q')))
    done
    echo "$n"
}
rqueued_is() {
    [ "$(rqueued)" = "$1" ]
}
spawn_bg "$DLOCK_BIN" run -w 60 "${RL[@]}" lrh -- true
RWAITER=$BG
wait_until 10 rqueued_is 3 || fail "the Redlock waiter did not queue"
check "a waiting Redlock dlock run has two threads, its loop's and the \
notifier's (got $(threads "$RWAITER"))" test "$(threads "$RWAITER")" = 2
kill -TERM "$RWAITER"
wait_pid "$RWAITER" 30
check "SIGTERM during a Redlock wait: 143 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 143
check "its queue place is given back on every server (got $(rqueued))" \
    test "$(rqueued)" = 0
touch "$T/go"
wait_pid "$RHOLDER" 30
check "the Redlock holder ends well (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0

finish
