#!/usr/bin/env bash
# lease.sh - renewal and the lost-lease policy of `dlock run`: a COMMAND
# that outlives several lease periods keeps the lock (a concurrent -n fails
# throughout); when the lock key is deleted or taken behind its back,
# --on-lost term sends SIGTERM (then SIGKILL after --grace), kill sends
# SIGKILL, ignore lets COMMAND finish; dlock exits with the lost code (75,
# or -L) in every case, also when the loss is only found at the release.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# --- renewal -------------------------------------------------------------
# The child marks its end ($T/finished) before it exits: an attempt that
# got the lock counts as a failure only if the child was still running
# when the attempt had ended (it may otherwise have overlapped the release).
# The shortest lease the tool accepts (0.1 s) is one the lock can use:
# acquire, run, release (the usage error below it is in usage.sh).
expect_status 0 "-l 0.1, the minimum, takes and releases the lock" \
    "$DLOCK_BIN" run -l 0.1 minlease -- true
expect_status 0 "acquire -l 0.1 too" "$DLOCK_BIN" acquire -l 0.1 minlease2

spawn_bg_err "$T/renew.err" "$DLOCK_BIN" run -l 1 renew -- \
    sh -c 'touch "$1/started"; sleep 3.5; touch "$1/finished"' sh "$T"
holder=$BG
wait_until 10 test -e "$T/started" || fail "the holder did not start"
tries=0
conflicts=0
maxpttl=0
while running "$holder" && [ ! -e "$T/finished" ]; do
    "$DLOCK_BIN" run -n renew -- true
    st=$?
    if [ "$st" = 1 ]; then
        tries=$((tries + 1))
        conflicts=$((conflicts + 1))
    elif [ ! -e "$T/finished" ]; then
        tries=$((tries + 1))
        echo "attempt $tries got status $st while the holder ran" >&2
    fi
    pttl=$(rcli "$P" PTTL 'dlock:{renew}')
    [ "${pttl:--2}" -gt "$maxpttl" ] && maxpttl=$pttl
    [ "$tries" -lt 400 ] || break
    sleep 0.1
done
wait_pid "$holder" 20
check "the holder kept the lock through 3.5 lease periods (status $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
[ "$WAIT_STATUS" = 0 ] || sed 's/^/  holder: /' "$T/renew.err" >&2
check "every -n attempt while it ran got the conflict code ($conflicts of $tries)" \
    test "$tries" -ge 5 -a "$conflicts" = "$tries"
check "the lease stayed at most 1 s (max PTTL $maxpttl)" \
    test "$maxpttl" -le 1000 -a "$maxpttl" -gt 0
expect_status 0 "the lock is free afterwards" "$DLOCK_BIN" run -n renew -- true

# A child that records SIGTERM ($1/term) and otherwise runs until killed.
trapper='trap "echo TERM >\"\$1/term\"; exit 143" TERM
echo $$ >"$1/child.pid"; touch "$1/started"; while :; do sleep 0.05; done'
# Same, but it ignores SIGTERM after noting it.
stubborn='trap "echo TERM >\"\$1/term\"" TERM
touch "$1/started"; while :; do sleep 0.05; done'

# lost_case NAME KEY DLOCK-OPTIONS... -- CHILD-SCRIPT: start the child under
# dlock (stderr in $T/NAME.err), delete the lock key once it runs, and wait
# for dlock (30 s). The lease (3 s) is long enough that it cannot lapse by
# itself on a loaded machine before the key is deleted.
lost_case() {
    local name=$1 key=$2 opts=() script
    shift 2
    while [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    script=$2
    rm -f "$T/started" "$T/term" "$T/done"
    spawn_bg_err "$T/$name.err" "$DLOCK_BIN" run -l 3 "${opts[@]}" "$key" \
        -- bash -c "$script" bash "$T"
    LOST_PID=$BG
    wait_until 10 test -e "$T/started" || fail "$name: the child did not start"
    sleep 0.3
    check "$name: the lock key exists" \
        test "$(rcli "$P" EXISTS "dlock:{$key}")" = 1
    rcli "$P" DEL "dlock:{$key}" >/dev/null
    wait_pid "$LOST_PID" 30 || fail "$name: dlock did not exit in 30 s"
}

lost_case "term" lk1 -- "$trapper"
check "term: dlock exits with the lost code 75 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75
check "term: the child got SIGTERM" file_has "$T/term" TERM
check "term: dlock says the lease was lost" \
    grep -q 'lease on "lk1".*was lost' "$T/term.err"

lost_case "L99" lk2 -L 99 -- "$trapper"
check "-L 99: exit status 99 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 99

lost_case "kill" lk3 --on-lost kill -- "$trapper"
check "kill: exit status 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
check "kill: the child got no SIGTERM" test ! -e "$T/term"
check "kill: dlock says SIGKILL" grep -q 'SIGKILL' "$T/kill.err"
check "kill: the child is gone" eval '! running "$(cat "$T/child.pid")"'

t0=$(now_ms)
lost_case "grace" lk4 --grace 1 -- "$stubborn"
t1=$(now_ms)
check "grace: exit status 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
check "grace: the child got SIGTERM first" file_has "$T/term" TERM
check "grace: then SIGKILL after the grace period" \
    grep -q 'still runs after the grace period' "$T/grace.err"
check "grace: not before 1 s ($((t1 - t0)) ms)" test $((t1 - t0)) -ge 1000

ignore_child='touch "$1/started"; sleep 2; echo done >"$1/done"; exit 4'
lost_case "ignore" lk5 --on-lost ignore -- "$ignore_child"
check "ignore: exit status 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
check "ignore: the child ran to its end" file_has "$T/done" done
check "ignore: dlock says COMMAND goes on" \
    grep -q 'goes on without the lock' "$T/ignore.err"
check "ignore: dlock reports COMMAND's own status" \
    grep -q "COMMAND's status was 4" "$T/ignore.err"

# Taken over: the key is deleted and another owner takes the lock.
rm -f "$T/started" "$T/term"
spawn_bg_err "$T/lk6.err" "$DLOCK_BIN" run -l 3 lk6 -- bash -c "$trapper" bash "$T"
pid=$BG
wait_until 10 test -e "$T/started" || fail "takeover: child did not start"
rcli "$P" DEL 'dlock:{lk6}' >/dev/null
expect_status 0 "takeover: another owner acquires" \
    "$DLOCK_BIN" acquire -n -l 5 lk6
wait_pid "$pid" 30
check "takeover: the first holder exits 75 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75
check "takeover: its child got SIGTERM" file_has "$T/term" TERM

# Lost just before COMMAND exits: found at the release at the latest.
expect_status 75 "deleted as COMMAND ends: the lost code" \
    "$DLOCK_BIN" run -l 30 lk7 -- \
    redis-cli -h 127.0.0.1 -p "$P" DEL 'dlock:{lk7}'
check "...and dlock says the work was not protected" \
    grep -Eq 'not protected|was lost' "$T/err"

# Expired while dlock was stopped (SIGSTOP: no renewal): lost on resume.
rm -f "$T/started" "$T/term"
spawn_bg_err "$T/lk8.err" "$DLOCK_BIN" run -l 0.5 lk8 -- bash -c "$trapper" bash "$T"
pid=$BG
wait_until 10 test -e "$T/started" || fail "stop: child did not start"
kill -STOP "$pid"
wait_until 10 key_gone "$P" 'dlock:{lk8}' ||
    fail "stop: the lease did not expire"
kill -CONT "$pid"
wait_pid "$pid" 30
check "stopped past the lease: exit 75 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75

# The server dies while COMMAND runs: renewals fail until the validity
# runs out, which is a lost lease as well.
start_redis
rm -f "$T/started" "$T/term"
spawn_bg_err "$T/down.err" "$DLOCK_BIN" run -s "$REDIS_URL" -l 2 down -- \
    bash -c "$trapper" bash "$T"
pid=$BG
wait_until 10 test -e "$T/started" || fail "server down: child did not start"
bash "$FIXTURE" stop "$REDIS_DIR"
wait_pid "$pid" 30
check "server gone while COMMAND runs: exit 75 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75
check "...after SIGTERM to COMMAND" file_has "$T/term" TERM
[ "$WAIT_STATUS" = 75 ] || sed 's/^/  dlock: /' "$T/down.err" >&2

finish
