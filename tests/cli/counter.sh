#!/usr/bin/env bash
# counter.sh - mutual exclusion: 8 concurrent workers each run 50
# read-modify-write increments of one shared file under `dlock run`; the
# counter must end at exactly 400. Every critical section also appends its
# DLOCK_FENCING_TOKEN to a log: in lock order the tokens must strictly
# increase. A run without dlock is shown for comparison (not checked: lost
# updates there are likely, not certain).
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
workers=8
rounds=50

# Read, yield, write: a wide window for lost updates without the lock.
incr='n=$(cat "$1/counter"); sleep 0.002; echo $((n + 1)) >"$1/counter"'
incr_logged=$incr'; echo "$DLOCK_FENCING_TOKEN" >>"$1/tokens"'

worker() {
    local i
    for ((i = 0; i < rounds; i++)); do
        "$DLOCK_BIN" run -w 120 counter -- sh -c "$incr_logged" sh "$T" ||
            echo "worker $1 round $i: status $?" >>"$T/errors"
    done
}

echo 0 >"$T/counter"
: >"$T/tokens"
pids=()
for ((w = 1; w <= workers; w++)); do
    spawn_bg worker "$w"
    pids+=("$BG")
done
for p in "${pids[@]}"; do
    wait_pid "$p" 240 || fail "worker $p did not finish in 240 s"
    [ "$WAIT_STATUS" = 0 ] || fail "worker $p: status $WAIT_STATUS"
done
total=$(cat "$T/counter")
check "counter is exactly $((workers * rounds)) (is $total)" \
    test "$total" = $((workers * rounds))
check "no dlock run failed" test ! -s "$T/errors"
[ ! -s "$T/errors" ] || head -5 "$T/errors" >&2
check "one token per critical section" \
    test "$(wc -l <"$T/tokens")" = $((workers * rounds))
check "tokens strictly increase in lock order" \
    awk 'NR > 1 && $1 <= prev { bad = 1 } { prev = $1 } END { exit bad }' \
    "$T/tokens"
check "the lock is free at the end" \
    test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{counter}')" = 0

# The same without the lock, for comparison.
echo 0 >"$T/counter"
pids=()
for ((w = 1; w <= workers; w++)); do
    spawn_bg bash -c 'for ((i = 0; i < $2; i++)); do sh -c "$3" sh "$1"; done' \
        bash "$T" "$rounds" "$incr"
    pids+=("$BG")
done
for p in "${pids[@]}"; do wait_pid "$p" 240; done
echo "info: without dlock the counter ended at $(cat "$T/counter")"

finish
