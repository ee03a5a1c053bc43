#!/usr/bin/env bash
# outage_ride.sh - `dlock run -w` waiting over three servers (Redlock)
# while all three are down for longer than the library's wait rides an
# outage in a row (DLOCK_OUTAGE_RIDE, here 1 s; dlock.1): dlock starts the
# wait again, saying so, while -w lasts, and once the servers are back
# the command runs. Without DLOCK_OUTAGE_RIDE the library's wait itself
# rides the whole -w. A bad DLOCK_OUTAGE_RIDE is a usage error (64).
. "$(dirname "$0")/common.bash"

start_redis
A_DIR=$REDIS_DIR A_URL=$REDIS_URL
start_redis
B_DIR=$REDIS_DIR B_URL=$REDIS_URL
start_redis
C_DIR=$REDIS_DIR C_URL=$REDIS_URL
S=(-s "$A_URL" -s "$B_URL" -s "$C_URL")

# hold KEY: a holder with a long lease that stays until killed.
hold() {
    rm -f "$T/held-$1"
    spawn_bg "$DLOCK_BIN" run -l 60 "${S[@]}" "$1" -- sh -c \
        'touch "$1/held-$2"; while :; do sleep 0.05; done' sh "$T" "$1"
    HOLDER=$BG
    wait_until 10 test -e "$T/held-$1" || fail "holder of $1 did not start"
}

# outage UNTIL-FILE UNTIL-TEXT: kill -9 the three servers and the holder,
# wait until UNTIL-FILE has UNTIL-TEXT (or 3 s without one), then start
# the servers again (empty: the lock is free).
outage() {
    local d
    for d in "$A_DIR" "$B_DIR" "$C_DIR"; do
        bash "$FIXTURE" kill9 "$d"
    done
    kill -9 "$HOLDER" 2>/dev/null
    wait "$HOLDER" 2>/dev/null
    if [ -n "$2" ]; then
        wait_until 30 file_has "$1" "$2" ||
            echo "  (no \"$2\" from the waiter)" >&2
    else
        sleep 3
    fi
    for d in "$A_DIR" "$B_DIR" "$C_DIR"; do
        bash "$FIXTURE" restart "$d" >/dev/null
    done
}

# ---- the library's wait gives up after 1 s of outage: dlock waits on.
hold or1
spawn_bg_err "$T/w1.err" env DLOCK_OUTAGE_RIDE=1 "$DLOCK_BIN" run -w 60 \
    "${S[@]}" or1 -- touch "$T/ran-w1"
waiter=$BG
sleep 0.5
check "the waiter waits behind the holder" running "$waiter"
outage "$T/w1.err" "starting it again while -w lasts"
check "dlock said it starts the library's wait again" \
    file_has "$T/w1.err" "starting it again while -w lasts"
wait_pid "$waiter" 30
check "the waiter ran once the servers were back (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
check "its command ran" test -e "$T/ran-w1"
[ "$WAIT_STATUS" = 0 ] || sed 's/^/  waiter: /' "$T/w1.err" >&2

# ---- without DLOCK_OUTAGE_RIDE: the library's wait rides the whole -w.
hold or2
spawn_bg_err "$T/w2.err" "$DLOCK_BIN" run -w 60 "${S[@]}" or2 -- \
    touch "$T/ran-w2"
waiter=$BG
sleep 0.5
outage "$T/w2.err" ""
wait_pid "$waiter" 30
check "the default waiter ran after the outage (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
check "it did not need to start again" \
    test "$(grep -c 'starting it again' "$T/w2.err")" = 0
[ "$WAIT_STATUS" = 0 ] || sed 's/^/  waiter: /' "$T/w2.err" >&2

# ---- a bad value is a usage error.
expect_status 64 "DLOCK_OUTAGE_RIDE=abc" env DLOCK_OUTAGE_RIDE=abc \
    "$DLOCK_BIN" run -n "${S[@]}" or3 -- true
check "the message names the variable" grep -q DLOCK_OUTAGE_RIDE "$T/err"

finish
