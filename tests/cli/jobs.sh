#!/usr/bin/env bash
# jobs.sh - COMMAND of `dlock run` is a job: its whole process group, not
# only its own pid. A job with grandchildren (`sh -c 'sleep & sleep & ...'`)
# leaves no process alive once dlock has exited, whether the lease was lost
# (--on-lost term, with a grandchild that ignores SIGTERM, and kill), dlock
# got SIGTERM, or COMMAND exited leaving a background process (dlock waits
# for it, holding the lock). When dlock is killed with SIGKILL, its guard
# kills the job, and the next holder, which gets the lock when the lease
# runs out, finds nothing of the first job running.
#
# The processes of a job are found by a variable in their environment,
# JOBMARK, given to COMMAND only (not to dlock).
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# $T/job_pids.sh MARK: the live (not zombie) processes whose environment
# holds JOBMARK=MARK, one pid a line.
cat >"$T/job_pids.sh" <<'EOF'
for f in /proc/[0-9]*/environ; do
    p=${f#/proc/}
    p=${p%/environ}
    grep -qzx "JOBMARK=$1" "$f" 2>/dev/null || continue
    s=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)
    [ -n "$s" ] && [ "$s" != Z ] && echo "$p"
done
exit 0
EOF
job_pids() {
    bash "$T/job_pids.sh" "$1"
}

# at_least N MARK: the job MARK has at least N live processes.
at_least() {
    [ "$(job_pids "$2" | wc -l)" -ge "$1" ]
}

# reap_strays MARK: kill what a failed check left running.
reap_strays() {
    local p
    for p in $(job_pids "$1"); do
        kill -9 "$p" 2>/dev/null
    done
}

# A job of 4 processes: sh, two sleeping grandchildren, one of which
# ignores SIGTERM (only SIGKILL after the grace period ends it), and the
# sleep sh waits for.
JOB='(trap "" TERM; exec sleep 300) & sleep 300 & touch "$1/started"
sleep 300; echo done'

# start_job MARK KEY DLOCK-OPTIONS...: start dlock run on KEY with the job
# marked MARK; sets PID to dlock's pid. Returns 1 if the job did not start.
start_job() {
    local mark=$1 key=$2
    shift 2
    rm -f "$T/started"
    spawn_bg_err "$T/$mark.err" "$DLOCK_BIN" run "$@" "$key" -- \
        env JOBMARK="$mark" sh -c "$JOB" sh "$T"
    PID=$BG
    wait_until 20 test -e "$T/started" && wait_until 20 at_least 4 "$mark"
}

# --- (a) the lease is lost: the policy reaches the whole group -------------
for policy in term kill; do
    mark=lost-$policy
    if ! start_job "$mark" "lk-$policy" -l 1.5 --on-lost "$policy" --grace 1; then
        fail "lost ($policy): the job did not start"
        continue
    fi
    rcli "$P" DEL "dlock:{lk-$policy}" >/dev/null
    wait_pid "$PID" 40
    left=$(job_pids "$mark" | tr '\n' ' ')
    check "lost ($policy): dlock exits with the lost code (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = 75
    check "lost ($policy): no process of the job outlives dlock ($left)" \
        test -z "$left"
    check "lost ($policy): the message names the process group" \
        grep -q "process group" "$T/$mark.err"
    reap_strays "$mark"
done

# --- (b) a signal to dlock reaches the whole group -------------------------
if start_job fwd fw; then
    kill -TERM "$PID"
    # The grandchild that ignores SIGTERM keeps the job (and the lock) alive
    # until it is ended too; dlock must not exit before.
    wait_until 20 eval '[ "$(job_pids fwd | wc -l)" -eq 1 ]' ||
        fail "SIGTERM: the group did not get it ($(job_pids fwd | tr '\n' ' '))"
    check "SIGTERM: dlock waits while a process of the job lives" running "$PID"
    expect_status 1 "SIGTERM: the lock stays held meanwhile" \
        "$DLOCK_BIN" run -n fw -- true
    kill -KILL "$(job_pids fwd)" 2>/dev/null
    wait_pid "$PID" 20
    left=$(job_pids fwd | tr '\n' ' ')
    check "SIGTERM: dlock exits with COMMAND's status 143 (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = 143
    check "SIGTERM: no process of the job outlives dlock ($left)" \
        test -z "$left"
    expect_status 0 "SIGTERM: the lock is free afterwards" \
        "$DLOCK_BIN" run -n fw -- true
    reap_strays fwd
else
    fail "SIGTERM: the job did not start"
fi

# --- (c) dlock killed with SIGKILL: the guard ends the job -----------------
for policy in term kill; do
    mark=sigkill-$policy
    if ! start_job "$mark" "kk-$policy" -l 6 --on-lost "$policy" --grace 0.5; then
        fail "SIGKILL ($policy): the job did not start"
        continue
    fi
    kill -KILL "$PID"
    wait_pid "$PID" 10
    # The next holder gets the lock when the lease runs out and looks,
    # from inside the lock, for processes of the first job.
    expect_status 0 "SIGKILL ($policy): the next holder gets the lock" \
        "$DLOCK_BIN" run -w 30 "kk-$policy" -- bash "$T/job_pids.sh" "$mark"
    overlap=$(tr '\n' ' ' <"$T/out")
    check "SIGKILL ($policy): the next holder overlaps no process of the \
first job ($overlap)" test -z "$overlap"
    check "SIGKILL ($policy): nothing of the first job is left" \
        wait_until 10 eval '[ -z "$(job_pids "$mark")" ]'
    reap_strays "$mark"
done

# --- (d) COMMAND exits and leaves a background process ----------------------
rm -f "$T/started" "$T/go"
spawn_bg "$DLOCK_BIN" run bgk -- env JOBMARK=bg sh -c \
    '(while [ ! -e "$1/go" ]; do sleep 0.05; done) & touch "$1/started"
exit 3' sh "$T"
PID=$BG
if wait_until 20 test -e "$T/started"; then
    wait_until 20 eval '[ "$(job_pids bg | wc -l)" -ge 1 ]'
    expect_status 1 "background: the lock is held while it runs" \
        "$DLOCK_BIN" run -n bgk -- true
    check "background: dlock waits for it" running "$PID"
    touch "$T/go"
    wait_pid "$PID" 20
    check "background: then dlock exits with COMMAND's status 3 (got \
$WAIT_STATUS)" test "$WAIT_STATUS" = 3
    expect_status 0 "background: the lock is free afterwards" \
        "$DLOCK_BIN" run -n bgk -- true
else
    fail "background: the job did not start"
fi
reap_strays bg

finish
