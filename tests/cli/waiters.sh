#!/usr/bin/env bash
# waiters.sh - `dlock status` never claims a number of waiters it does not
# know: with a holder and two `dlock run -w` processes waiting, the text
# says "waiters:  unknown" and --json "waiters":null, never 0, on every
# look while they wait (programs with the library's other strategies
# would wait without a trace). The two queue in the library's default
# fair mode, one entry each: "fair_queue":2.
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

for look in 1 2 3; do
    expect_status 0 "look $look: status" "$DLOCK_BIN" status wk
    check "look $look: the text does not claim 0 waiters" \
        eval '! grep -q "^waiters: *0" "$T/out"'
    check "look $look: the text says unknown" \
        grep -q '^waiters: *unknown' "$T/out"
    expect_status 0 "look $look: status --json" "$DLOCK_BIN" status --json wk
    check "look $look: JSON does not claim 0 waiters ($(cat "$T/out"))" \
        eval '! grep -q "\"waiters\":0" "$T/out"'
    check "look $look: JSON says null" grep -q '"waiters":null' "$T/out"
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
