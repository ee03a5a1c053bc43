#!/usr/bin/env bash
# timeout.sh - --timeout bounds a whole acquisition: against a server that
# accepts connections but never answers (SIGSTOP), `dlock run` and `dlock
# acquire` without -w give up within the timeout (connect, the attempt and
# the give-back of a maybe-taken lock included: the give-back is queued on
# the same connection, not waited for), exit 69, and the lock does not
# stay taken once the server resumes. Before, the give-back waited a whole
# timeout of its own: twice the timeout.
#
# The check is on dlock's own deadline logic, not on the machine's speed:
# each call runs with --timeout 1 and --timeout 2 and the difference of
# the two is compared. Process start-up, ASan and a loaded machine add
# about the same to both; what grows with the timeout is how many timeouts
# the call waits out: one now (a difference of ~1 s), two before (~2 s).
# The check is that the difference stays below 1.5 s in one of up to
# three tries: a timeout is waited out in full, so two timeouts can never
# make a difference under 2 s, while a loaded machine (a fresh Debian
# chroot running the suite beside other builds) once stretched one pair
# to 1.5 s and the next one not.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# timed NAME KEY COMMAND...: COMMAND (with @T for the timeout and @K for
# a key) exits 69 with --timeout 1 and with --timeout 2, and the second
# takes less than 1.5 s longer than the first (in one of three tries).
# Every key used is added to keys.
keys=()
timed() {
    local name=$1 key=$2 t0 t1 t2 a a1 a2 try k1 k2 took=''
    shift 2
    for try in 1 2 3; do
        k1=$key k2=$key-2
        [ "$try" = 1 ] || k1=$key-t$try k2=$key-2-t$try
        keys+=("$k1" "$k2")
        local args1=() args2=()
        for a in "$@"; do
            a1=${a//@K/$k1} a2=${a//@K/$k2}
            args1+=("${a1//@T/1}")
            args2+=("${a2//@T/2}")
        done
        t0=$(now_ms)
        expect_status 69 "$name, --timeout 1: 69" "${args1[@]}"
        t1=$(($(now_ms) - t0))
        t0=$(now_ms)
        expect_status 69 "$name, --timeout 2: 69" "${args2[@]}"
        t2=$(($(now_ms) - t0))
        took="$took${took:+; }$t1 ms, then $t2 ms"
        [ $((t2 - t1)) -lt 1500 ] && break
    done
    check "$name: a second more of timeout costs one timeout, not two (took $took)" \
        test $((t2 - t1)) -lt 1500
}

expect_status 0 "a first lock while the server answers" \
    "$DLOCK_BIN" run k0 -- true
kill -STOP "$REDIS_PID"
timed "run" k1 "$DLOCK_BIN" run --timeout @T @K -- touch "$T/ran"
timed "run -w 5" k2 "$DLOCK_BIN" run -w 5 --timeout @T @K -- touch "$T/ran"
timed "acquire" k3 "$DLOCK_BIN" acquire --timeout @T @K
check "the message says the server did not answer" \
    grep -q 'no answer in time' "$T/err"
kill -CONT "$REDIS_PID"
check "COMMAND never ran" test ! -e "$T/ran"
for k in "${keys[@]}"; do
    check "$k is not left taken" wait_until 10 key_gone "$P" "dlock:{$k}"
done

finish
