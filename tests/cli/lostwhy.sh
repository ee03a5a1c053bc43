#!/usr/bin/env bash
# lostwhy.sh - when the lease of `dlock run` is lost, dlock says why, as the
# servers tell it after the loss: the lock is free (it expired or was
# deleted), another owner holds it, or the servers could not be reached
# (renewals failed until the validity ran out). The reason comes from the
# library (dlock_lock_lost_reason); only "not ours" is looked at again.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# lost_run KEY ERRFILE: dlock run -l 1 on KEY with a job that waits for
# $T/started-KEY to be touched; sets PID. Returns 1 if it did not start.
lost_run() {
    spawn_bg_err "$2" "$DLOCK_BIN" run -l 1 --timeout 0.2 --on-lost kill "$1" \
        -- sh -c 'touch "$1"; sleep 60' sh "$T/started-$1"
    PID=$BG
    wait_until 20 test -e "$T/started-$1"
}

# --- deleted ------------------------------------------------------------------
if lost_run del "$T/del.err"; then
    rcli "$P" DEL 'dlock:{del}' >/dev/null
    wait_pid "$PID" 30
    check "deleted: lost code 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
    check "deleted: the message says the lock is free, expired or deleted" \
        grep -q 'was lost (the lock is free now: it expired or was deleted)' \
        "$T/del.err"
else
    fail "deleted: no start"
fi

# --- taken over ---------------------------------------------------------------
if lost_run taken "$T/taken.err"; then
    rcli "$P" DEL 'dlock:{taken}' >/dev/null
    rcli "$P" HSET 'dlock:{taken}' someone-else 1 >/dev/null
    rcli "$P" PEXPIRE 'dlock:{taken}' 60000 >/dev/null
    wait_pid "$PID" 30
    check "taken: lost code 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
    check "taken: the message names the other owner" \
        grep -q 'was lost (it is held by another owner now, someone-else)' \
        "$T/taken.err"
    rcli "$P" DEL 'dlock:{taken}' >/dev/null
else
    fail "taken: no start"
fi

# --- the server does not answer -----------------------------------------------
if lost_run stop "$T/stop.err"; then
    kill -STOP "$REDIS_PID"
    wait_pid "$PID" 30
    kill -CONT "$REDIS_PID"
    check "unreachable: lost code 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
    check "unreachable: the message says the renewals failed, and why" \
        grep -q 'was lost (renewals failed: .*127.0.0.1' "$T/stop.err"
    # The library's own reason (the last renewal's failure), not a second
    # round trip to a server that does not answer.
    check "unreachable: the reason is the renewal's, no inspect" \
        grep -q 'was lost (renewals failed: extend: 127.0.0.1' "$T/stop.err"
else
    kill -CONT "$REDIS_PID"
    fail "unreachable: no start"
fi
[ "$failures" = 0 ] || sed 's/^/  stderr: /' "$T"/*.err >&2

finish
