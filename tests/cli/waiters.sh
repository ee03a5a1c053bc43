#!/usr/bin/env bash
# waiters.sh - `dlock status` counts the processes that wait: with a holder
# and two `dlock run -w` processes waiting (they queue in the library's
# default fair mode, one entry each: "fair_queue":2), the text says
# "waiters:  2 (2 queued in fair mode)" and --json "waiters":2, never 0, on every look while they
# wait.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL

rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run wk -- sh -c \
    'touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done' sh "$T"
holder=$BG
wait_until 20 test -e "$T/held" || fail "the holder did not start"
waiters=()
for i in 1 2; do
    spawn_bg_err "$T/w$i.err" "$DLOCK_BIN" run -v -w 60 wk -- true
    waiters+=("$BG")
done
for i in 1 2; do
    wait_until 20 grep -q 'waiting for "wk"' "$T/w$i.err" ||
        fail "waiter $i does not wait"
done

fq2() {
    "$DLOCK_BIN" status --json wk 2>/dev/null | grep -q '"fair_queue":2'
}
check "the two waiters are queued (fair_queue 2)" wait_until 20 fq2
# "waiting for" is said before the library has subscribed: give the
# subscriptions a moment (bounded) before the looks.
counted() {
    "$DLOCK_BIN" status wk 2>/dev/null | grep -q '^waiters: *2\( \|$\)'
}
wait_until 10 counted || fail "the status never counted the 2 waiters"

for look in 1 2 3; do
    expect_status 0 "look $look: status" "$DLOCK_BIN" status wk
    check "look $look: the text does not claim 0 waiters" \
        eval '! grep -q "^waiters: *0" "$T/out"'
    check "look $look: the text says 2" \
        grep -q '^waiters: *2\( \|$\)' "$T/out"
    expect_status 0 "look $look: status --json" "$DLOCK_BIN" status --json wk
    check "look $look: JSON does not claim 0 waiters ($(cat "$T/out"))" \
        eval '! grep -q "\"waiters\":0" "$T/out"'
    check "look $look: JSON says 2" grep -q '"waiters":2,' "$T/out"
    check "look $look: JSON says 2 in the fair queue" \
        grep -q '"fair_queue":2' "$T/out"
    for i in 1 2; do
        check "look $look: waiter $i still waits" running "${waiters[$((i - 1))]}"
    done
done

touch "$T/go"
wait_pid "$holder" 20
check "the holder exits 0 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
for i in 1 2; do
    wait_pid "${waiters[$((i - 1))]}" 60
    check "waiter $i got the lock in turn (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = 0
done

finish
