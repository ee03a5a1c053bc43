#!/usr/bin/env bash
# outage_wait.sh - a waiter (`dlock run -w`) while its server restarts
# (kill -9, restart on the same port with AOF always, so the holder's lock
# survives): the waiter keeps trying for as long as its wait lasts and
# says so once, then gets the lock when the holder releases it; it does
# not exit 69 at the first failed attempt. A wait that ends while the
# server is still down exits 69 (not the conflict code, which would say
# the lock was held), and a signal during the outage ends the wait with
# 128 + its number. A follower of `dlock elect` waits through it too, and
# a server that answers LOADING while it reads its data back is an outage
# as well.
# Nothing runs without the lock.
. "$(dirname "$0")/common.bash"

start_redis --aof
S=(-s "$REDIS_URL")

# hold KEY: a holder with a long lease that exits when $T/go-KEY exists.
hold() {
    rm -f "$T/go-$1" "$T/held-$1"
    spawn_bg "$DLOCK_BIN" run -l 60 "${S[@]}" "$1" -- sh -c \
        'touch "$1/held-$2"; while [ ! -e "$1/go-$2" ]; do sleep 0.05; done' \
        sh "$T" "$1"
    HOLDER=$BG
    wait_until 10 test -e "$T/held-$1" || fail "holder of $1 did not start"
}

# restart_server: kill -9 the server, wait until a waiter has seen it
# gone (its message), then start it again.
restart_server() {
    bash "$FIXTURE" kill9 "$REDIS_DIR"
    wait_until 20 file_has "$1" "trying again while the wait lasts" ||
        fail "the waiter did not say that it tries again"
    eval "$(bash "$FIXTURE" restart "$REDIS_DIR")"
}

# ---- the server restarts while a run waits: it waits on, then runs.
hold ow
spawn_bg_err "$T/w1.err" "$DLOCK_BIN" run -w 60 "${S[@]}" ow -- \
    touch "$T/ran-w1"
waiter=$BG
sleep 0.3
restart_server "$T/w1.err"
check "the waiter still waits after the restart" running "$waiter"
check "and has not run its command" test ! -e "$T/ran-w1"
touch "$T/go-ow"
wait_pid "$HOLDER" 30
wait_pid "$waiter" 30
check "the waiter ran once the holder was done (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
check "its command ran" test -e "$T/ran-w1"
[ "$WAIT_STATUS" = 0 ] || sed 's/^/  waiter: /' "$T/w1.err" >&2

# ---- the wait ends while the server is still down: 69, not -E.
hold ow2
spawn_bg_err "$T/w2.err" "$DLOCK_BIN" run -w 3 -E 9 "${S[@]}" ow2 -- \
    touch "$T/ran-w2"
waiter=$BG
sleep 0.3
bash "$FIXTURE" kill9 "$REDIS_DIR"
wait_pid "$waiter" 30
check "a wait that ends in the outage exits 69 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 69
check "it said it tried again" \
    file_has "$T/w2.err" "trying again while the wait lasts"
check "nothing ran" test ! -e "$T/ran-w2"
kill -9 "$HOLDER" 2>/dev/null
wait "$HOLDER" 2>/dev/null

# ---- a signal during the outage ends the wait (no -w: for ever).
eval "$(bash "$FIXTURE" restart "$REDIS_DIR")"
hold ow3
spawn_bg_err "$T/w3.err" "$DLOCK_BIN" run "${S[@]}" ow3 -- touch "$T/ran-w3"
waiter=$BG
sleep 0.3
bash "$FIXTURE" kill9 "$REDIS_DIR"
wait_until 20 file_has "$T/w3.err" "trying again while the wait lasts" ||
    fail "the waiter without -w did not say that it tries again"
check "a waiter without -w waits through the outage" running "$waiter"
kill -TERM "$waiter"
wait_pid "$waiter" 30
check "SIGTERM during the outage: 143 (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 143
check "nothing ran" test ! -e "$T/ran-w3"
kill -9 "$HOLDER" 2>/dev/null
wait "$HOLDER" 2>/dev/null

# ---- elect: a follower waits through the restart too, then leads.
eval "$(bash "$FIXTURE" restart "$REDIS_DIR")"
rm -f "$T/leading" "$T/go-el"
spawn_bg "$DLOCK_BIN" elect -l 60 "${S[@]}" ow-el -- sh -c \
    'touch "$1/leading"; while [ ! -e "$1/go-el" ]; do sleep 0.05; done' \
    sh "$T"
leader=$BG
wait_until 10 test -e "$T/leading" || fail "the leader did not start"
spawn_bg_err "$T/f.err" "$DLOCK_BIN" elect -w 60 "${S[@]}" ow-el -- \
    touch "$T/ran-follower"
follower=$BG
sleep 0.3
restart_server "$T/f.err"
check "the follower still waits after the restart" running "$follower"
touch "$T/go-el"
wait_pid "$leader" 30
wait_pid "$follower" 30
check "the follower led once the leader was done (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
check "its command ran" test -e "$T/ran-follower"

# ---- a restart that loads its data for seconds (the server answers
# LOADING meanwhile: key-load-delay makes 2000 keys take ~4 s, and
# loading-process-events-interval-bytes makes it answer during that) is an
# outage too, not an answer that ends the wait.
start_redis --aof --conf "key-load-delay 2000" \
    --conf "loading-process-events-interval-bytes 1024"
L_DIR=$REDIS_DIR L_PORT=$REDIS_PORT
S=(-s "$REDIS_URL")
rcli "$L_PORT" DEBUG POPULATE 2000 >/dev/null
rcli "$L_PORT" BGREWRITEAOF >/dev/null
rewritten() {
    ! rcli "$L_PORT" INFO persistence | grep -Eq \
        'aof_rewrite_in_progress:1|aof_rewrite_scheduled:1'
}
wait_until 20 rewritten || fail "the AOF rewrite did not finish"
hold ow-load
spawn_bg_err "$T/wl.err" "$DLOCK_BIN" run -w 60 "${S[@]}" ow-load -- \
    touch "$T/ran-wl"
waiter=$BG
sleep 0.3
bash "$FIXTURE" kill9 "$L_DIR"
wait_until 20 file_has "$T/wl.err" "trying again while the wait lasts" ||
    fail "the waiter did not say that it tries again"
# restart returns once the server answers PING, after its loading.
eval "$(bash "$FIXTURE" restart "$L_DIR")"
check "the waiter still waits after the server loaded its data" \
    running "$waiter"
[ -s "$T/wl.err" ] && sed 's/^/  waiter: /' "$T/wl.err"
touch "$T/go-ow-load"
wait_pid "$HOLDER" 30
wait_pid "$waiter" 30
check "the waiter ran once the holder was done (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0

# ---- the first attempt failing is still a failure at once (a typo, a
# server that is not there): nothing to wait for yet.
bash "$FIXTURE" kill9 "$REDIS_DIR"
expect_status 69 "no server at the first attempt: 69 at once" \
    "$DLOCK_BIN" run -w 60 "${S[@]}" ow4 -- touch "$T/ran-w4"
check "nothing ran" test ! -e "$T/ran-w4"

finish
