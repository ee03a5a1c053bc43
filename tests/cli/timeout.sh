#!/usr/bin/env bash
# timeout.sh - --timeout bounds a whole acquisition: against a server that
# accepts connections but never answers (SIGSTOP), `dlock run` and `dlock
# acquire` without -w give up within the timeout (connect, the attempt and
# the give-back of a maybe-taken lock included: the give-back is queued on
# the same connection, not waited for), exit 69, and the lock does not
# stay taken once the server resumes. Before, the give-back waited a whole
# timeout of its own: twice the timeout.
#
# The check is a bound on dlock's own deadline logic: elapsed < 1.6 s with
# --timeout 1 (the documented bound, 1 s, plus 600 ms for starting the
# process under ASan on a loaded machine; the old behaviour took 2 s).
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# timed NAME COMMAND...: expect_status 69, then check the time it took.
timed() {
    local name=$1 t0 took
    shift
    t0=$(now_ms)
    expect_status 69 "$name: 69" "$@"
    took=$(($(now_ms) - t0))
    check "$name: within the bound (took $took ms)" test "$took" -lt 1600
}

expect_status 0 "a first lock while the server answers" \
    "$DLOCK_BIN" run k0 -- true
kill -STOP "$REDIS_PID"
timed "run" "$DLOCK_BIN" run --timeout 1 k1 -- touch "$T/ran"
timed "run -w 5" "$DLOCK_BIN" run -w 5 --timeout 1 k2 -- touch "$T/ran"
timed "acquire" "$DLOCK_BIN" acquire --timeout 1 k3
check "the message says the server did not answer" \
    grep -q 'no answer in time' "$T/err"
kill -CONT "$REDIS_PID"
check "COMMAND never ran" test ! -e "$T/ran"
for k in k1 k2 k3; do
    check "$k is not left taken" wait_until 10 key_gone "$P" "dlock:{$k}"
done

finish
