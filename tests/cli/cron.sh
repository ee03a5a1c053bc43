#!/usr/bin/env bash
# cron.sh - the cron options of `dlock run` (issue 21), against a real
# redis-server. Several machines running the same crontab line are
# imitated by several dlock processes on one server.
#  - --once-per: COMMAND runs once per slot, whether the runs come one
#    after the other or all at once; a run that fails (status 1, or a lost
#    lease) leaves no done-marker, so the next run runs COMMAND; a run that
#    finds the slot done exits 0 (or --done-exit-code) without running it;
#    the next slot runs again. The marker is "<prefix>:done:{KEY:SLOT}",
#    outside the keys of every lock.
#  - --slot NAME: the same with named slots.
#  - --min-hold: after a fast COMMAND the lock stays held (a concurrent -n
#    fails, then succeeds once it is over); the status stays COMMAND's;
#    SIGTERM ends the hold-on.
#  - --max-hold: a job that would hold the lock for ever (shown first
#    without the option) gets the --on-lost policy, dlock exits 75 saying
#    max-hold was reached, the job's processes are gone and the lock is
#    free; with --on-lost ignore the lock is released while the job goes on.
#  - bad values of these options: status 64 naming the problem; so is
#    --once-per with --shared or --limit (issue 29 item 10).
# Without the options (a dlock before issue 21) every run here exits 64,
# so every check fails; the max-hold control run shows the difference the
# option makes on the same job.
. "$(dirname "$0")/common.bash"

# usage_error DESCRIPTION TEXT ARGS...: status 64 and TEXT on stderr.
usage_error() {
    local what=$1 text=$2
    shift 2
    expect_status 64 "$what" "$DLOCK_BIN" "$@"
    if ! grep -q -- "$text" "$T/err"; then
        fail "$what: stderr does not name the problem ('$text')"
        sed 's/^/  stderr: /' "$T/err" >&2
    fi
}

# --- bad usage (no server needed) ----------------------------------------
for bad in abc -1 0 0.5 0.999 '' 1e999; do
    usage_error "--once-per '$bad'" "--once-per '$bad'" \
        run --once-per "$bad" k true
done
usage_error "--once-per below 1 s says the minimum" "at least 1 s" \
    run --once-per 0.5 k true
usage_error "--slot without --once-per" "--slot needs --once-per" \
    run --slot 2026-11-24 k true
usage_error "--slot ''" "--slot '': empty" run --once-per 60 --slot '' k true
usage_error "--slot with ':'" "must not contain ':'" \
    run --once-per 60 --slot 'a:b' k true
usage_error "--slot with a blank" "blanks or control characters" \
    run --once-per 60 --slot 'a b' k true
usage_error "--slot of 129 bytes" "longer than 128 bytes" \
    run --once-per 60 --slot "$(printf 's%.0s' $(seq 1 129))" k true
usage_error "KEY and --slot over 511 bytes" "longer than 511 bytes" \
    run --once-per 60 --slot "$(printf 's%.0s' $(seq 1 100))" \
    "$(printf 'k%.0s' $(seq 1 420))" true
for opt in --min-hold --max-hold; do
    for bad in 0 x -1 '' 5s; do
        usage_error "$opt '$bad'" "$opt '$bad'" run "$opt" "$bad" k true
    done
done
usage_error "--min-hold 0 says why" "must be more than 0" \
    run --min-hold 0 k true
usage_error "--min-hold longer than --max-hold" \
    "--min-hold is longer than --max-hold" \
    run --min-hold 5 --max-hold 2 k true
usage_error "--done-exit-code 256" "--done-exit-code '256'" \
    run --once-per 60 --done-exit-code 256 k true
usage_error "--done-exit-code without --once-per" \
    "--done-exit-code applies only with --once-per" \
    run --done-exit-code 3 k true
usage_error "--once-per on status" "'--once-per' does not apply to status" \
    status --once-per 60 k
usage_error "--max-hold on acquire" "'--max-hold' does not apply to acquire" \
    acquire --max-hold 60 k
usage_error "KEY over 480 bytes with --once-per" "too long for --once-per" \
    run --once-per 60 "$(printf 'k%.0s' $(seq 1 481))" true

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# runs FILE: how many runs of COMMAND wrote a line to FILE.
runs() {
    if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi
}

# Issue 29 item 10: --once-per's promise (two runs cannot both find the
# slot not done and both succeed) rests on holding KEY alone while the
# slot is checked, COMMAND runs and the marker is left. A read lock or a
# permit is held by several at once: refused (64), nothing run. (Before,
# all five --shared runs ran COMMAND in one slot.)
n=0
for form in "--shared" "--limit 3"; do
    n=$((n + 1))
    rm -f "$T/op.runs"
    pids=()
    for i in 1 2 3 4 5; do
        # shellcheck disable=SC2086
        spawn_bg_err "$T/op$i.err" "$DLOCK_BIN" run $form --once-per 600 \
            --slot s "opk$n" -- sh -c 'echo "$$" >>"$1"; sleep 0.5' sh "$T/op.runs"
        pids+=("$BG")
    done
    codes=''
    for p in "${pids[@]}"; do
        wait_pid "$p" 60 || fail "a --once-per $form run did not end"
        codes="$codes $WAIT_STATUS"
    done
    check "--once-per with $form: every run refused ($codes)" \
        test "$codes" = " 64 64 64 64 64"
    check "--once-per with $form: COMMAND never ran ($(runs "$T/op.runs"))" \
        test "$(runs "$T/op.runs")" = 0
    check "--once-per with $form: says why" \
        grep -q -- "--once-per needs the lock itself" "$T/op1.err"
done
# The COMMAND of most runs: note the run in $1, exit with status $2.
note='echo "$$" >>"$1"; exit "${2:-0}"'

# slot_left PERIOD-S: milliseconds left in the current slot of PERIOD-S
# seconds by this machine's clock (the one dlock cuts slots from).
slot_left() {
    local p=$(($1 * 1000))
    echo $((p - $(now_ms) % p))
}
# has_left PERIOD-S MS: at least MS of the current slot are left.
has_left() {
    [ "$(slot_left "$1")" -ge "$2" ]
}
# slot_after PERIOD-S N: the clock's slot number is past N.
slot_after() {
    [ $(($(now_ms) / ($1 * 1000))) -gt "$2" ]
}
# The slot dlock -v named in FILE ("slot 2s-123 of ...").
slot_in() {
    sed -n 's/^dlock: slot \([^ ]*\) of .*/\1/p' "$1" | head -n 1
}

# --- --once-per, runs one after the other ----------------------------------
# Hour slots: keep a minute from the slot's end, so that the runs below
# fall in one slot.
wait_until 70 has_left 3600 60000 || fail "no minute left in the hour slot"
expect_status 0 "once-per: the first run of the slot" \
    "$DLOCK_BIN" run -v --once-per 3600 seq -- sh -c "$note" sh "$T/seq.runs"
slot=$(slot_in "$T/err")
check "once-per: -v names the slot ($slot)" \
    test "$slot" = "3600s-$(($(now_ms) / 3600000))"
check "once-per: -v says the marker was left" \
    grep -q "left the done-marker \"seq:$slot\"" "$T/err"
expect_status 0 "once-per: the second run of the slot exits 0" \
    "$DLOCK_BIN" run -v --once-per 3600 seq -- sh -c "$note" sh "$T/seq.runs"
check "once-per: -v says the slot is done and COMMAND skipped" \
    grep -q 'is done already.*COMMAND is skipped' "$T/err"
expect_status 0 "once-per: a third run, without -v, is silent" \
    "$DLOCK_BIN" run --once-per 3600 seq -- sh -c "$note" sh "$T/seq.runs"
check "once-per: nothing on stderr without -v" test ! -s "$T/err"
expect_status 7 "once-per: --done-exit-code 7 when the slot is done" \
    "$DLOCK_BIN" run --once-per 3600 --done-exit-code 7 seq -- \
    sh -c "$note" sh "$T/seq.runs"
check "once-per: COMMAND ran once in four runs ($(runs "$T/seq.runs"))" \
    test "$(runs "$T/seq.runs")" = 1
check "once-per: the marker is dlock:done:{seq:$slot}" \
    test "$(rcli "$P" EXISTS "dlock:done:{seq:$slot}")" = 1
pttl=$(rcli "$P" PTTL "dlock:done:{seq:$slot}")
check "once-per: the marker lasts past the slot's end, at most two slots" \
    test "${pttl:-0}" -gt 3500000 -a "${pttl:-0}" -le 7200000
check "once-per: the lock itself is released" key_gone "$P" 'dlock:{seq}'
expect_status 0 "once-per: a lock named like the marker is another lock" \
    "$DLOCK_BIN" run -n "seq:$slot" -- true
expect_status 0 "once-per: another KEY has its own slots" \
    "$DLOCK_BIN" run --once-per 3600 seq2 -- sh -c "$note" sh "$T/seq2.runs"
check "once-per: ... and ran" test "$(runs "$T/seq2.runs")" = 1
expect_status 0 "once-per: --prefix app" \
    "$DLOCK_BIN" run --prefix app --once-per 3600 seq -- \
    sh -c "$note" sh "$T/app.runs"
check "once-per: --prefix app has its own markers (ran)" \
    test "$(runs "$T/app.runs")" = 1
check "once-per: ... app:done:{seq:$slot}" \
    test "$(rcli "$P" EXISTS "app:done:{seq:$slot}")" = 1

# A failed run leaves no marker: the next run runs COMMAND.
expect_status 1 "once-per: a run that fails (status 1)" \
    "$DLOCK_BIN" run --once-per 3600 fl -- sh -c "$note" sh "$T/fl.runs" 1
check "once-per: no marker after the failed run" \
    test -z "$(rcli "$P" KEYS 'dlock:done:{fl:*}' | grep -v '}:f$')"
expect_status 0 "once-per: the next run runs COMMAND" \
    "$DLOCK_BIN" run --once-per 3600 fl -- sh -c "$note" sh "$T/fl.runs"
expect_status 0 "once-per: ... and the one after skips it" \
    "$DLOCK_BIN" run --once-per 3600 fl -- sh -c "$note" sh "$T/fl.runs"
check "once-per: COMMAND ran twice: failed, then done ($(runs "$T/fl.runs"))" \
    test "$(runs "$T/fl.runs")" = 2

# A run whose lease was lost leaves no marker, even though COMMAND exited
# 0: the lock key is deleted while it runs.
spawn_bg_err "$T/lost.err" "$DLOCK_BIN" run -l 3 --on-lost ignore \
    --once-per 3600 lost -- sh -c \
    'echo "$$" >>"$1"; touch "$2"; while [ ! -e "$3" ]; do sleep 0.05; done' \
    sh "$T/lost.runs" "$T/lost.started" "$T/lost.go"
pid=$BG
wait_until 10 test -e "$T/lost.started" || fail "lost: COMMAND did not start"
rcli "$P" DEL 'dlock:{lost}' >/dev/null
wait_until 10 grep -q 'was lost' "$T/lost.err" ||
    fail "lost: dlock did not notice the loss"
touch "$T/lost.go"
wait_pid "$pid" 30
check "once-per: the run whose lease was lost exits 75 ($WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75
expect_status 0 "once-per: the next run runs COMMAND" \
    "$DLOCK_BIN" run --once-per 3600 lost -- sh -c "$note" sh "$T/lost.runs"
check "once-per: COMMAND ran again after the lost lease ($(runs "$T/lost.runs"))" \
    test "$(runs "$T/lost.runs")" = 2

# --- --once-per, runs at the same time --------------------------------------
# Four "machines" start together; each COMMAND takes a while, so the others
# wait for the lock, then find the slot done.
wait_until 70 has_left 3600 60000 || fail "no minute left in the hour slot"
pids=()
for i in 1 2 3 4; do
    spawn_bg_err "$T/con$i.err" "$DLOCK_BIN" run --once-per 3600 con -- \
        sh -c 'echo "$$" >>"$1"; sleep 0.3' sh "$T/con.runs"
    pids+=("$BG")
done
for i in 1 2 3 4; do
    wait_pid "${pids[$((i - 1))]}" 30
    check "concurrent: run $i exits 0 ($WAIT_STATUS)" test "$WAIT_STATUS" = 0
done
check "concurrent: COMMAND ran once for four runs ($(runs "$T/con.runs"))" \
    test "$(runs "$T/con.runs")" = 1

# The first run fails while three others wait: exactly one of them runs.
spawn_bg "$DLOCK_BIN" run --once-per 3600 cf -- sh -c \
    'echo "$$" >>"$1"; touch "$2"; while [ ! -e "$3" ]; do sleep 0.05; done
exit 1' sh "$T/cf.runs" "$T/cf.started" "$T/cf.go"
first=$BG
wait_until 10 test -e "$T/cf.started" || fail "cf: the first run did not start"
pids=()
for i in 1 2 3; do
    spawn_bg "$DLOCK_BIN" run --once-per 3600 cf -- sh -c "$note" sh "$T/cf.runs"
    pids+=("$BG")
done
touch "$T/cf.go"
wait_pid "$first" 30
check "concurrent: the first run fails with status 1 ($WAIT_STATUS)" \
    test "$WAIT_STATUS" = 1
for i in 1 2 3; do
    wait_pid "${pids[$((i - 1))]}" 30
    check "concurrent: waiting run $i exits 0 ($WAIT_STATUS)" \
        test "$WAIT_STATUS" = 0
done
check "concurrent: the failed run, then exactly one more ($(runs "$T/cf.runs"))" \
    test "$(runs "$T/cf.runs")" = 2

# --- --slot ---------------------------------------------------------------
expect_status 0 "slot: the first run of slot day-1" \
    "$DLOCK_BIN" run --slot day-1 --once-per 60 named -- \
    sh -c "$note" sh "$T/named.runs"
expect_status 0 "slot: the second run of day-1 skips" \
    "$DLOCK_BIN" run -v --slot day-1 --once-per 60 named -- \
    sh -c "$note" sh "$T/named.runs"
check "slot: -v says day-1 is done" \
    grep -q 'slot day-1 of "named" is done already' "$T/err"
check "slot: COMMAND ran once ($(runs "$T/named.runs"))" \
    test "$(runs "$T/named.runs")" = 1
pttl=$(rcli "$P" PTTL 'dlock:done:{named:day-1}')
check "slot: the marker lasts --once-per, 60 s (PTTL $pttl)" \
    test "${pttl:-0}" -gt 0 -a "${pttl:-0}" -le 60000
expect_status 0 "slot: day-2 runs again" \
    "$DLOCK_BIN" run --slot day-2 --once-per 60 named -- \
    sh -c "$note" sh "$T/named.runs"
check "slot: COMMAND ran twice for two slots ($(runs "$T/named.runs"))" \
    test "$(runs "$T/named.runs")" = 2
expect_status 1 "slot: a failed run of day-3" \
    "$DLOCK_BIN" run --slot day-3 --once-per 60 named -- \
    sh -c "$note" sh "$T/named.runs" 1
expect_status 0 "slot: day-3 runs again after it" \
    "$DLOCK_BIN" run --slot day-3 --once-per 60 named -- \
    sh -c "$note" sh "$T/named.runs"
check "slot: four runs of COMMAND in all ($(runs "$T/named.runs"))" \
    test "$(runs "$T/named.runs")" = 4

# --- a new slot runs again (2 s slots) --------------------------------------
# Two runs in one slot (retried when a slow machine puts them in two),
# then one in a later slot.
for attempt in 1 2 3; do
    rm -f "$T/two.runs"
    wait_until 5 has_left 2 1500 || fail "no 1.5 s left in a 2 s slot"
    "$DLOCK_BIN" run -v --once-per 2 two -- sh -c "$note" sh "$T/two.runs" \
        2>"$T/two-a.err"
    st_a=$?
    "$DLOCK_BIN" run -v --once-per 2 two -- sh -c "$note" sh "$T/two.runs" \
        2>"$T/two-b.err"
    st_b=$?
    slot_a=$(slot_in "$T/two-a.err")
    [ "$slot_a" = "$(slot_in "$T/two-b.err")" ] && break
    echo "attempt $attempt: the two runs fell in two slots; again" >&2
done
check "2 s slots: the first run exits 0 ($st_a)" test "$st_a" = 0
check "2 s slots: the second run in slot $slot_a exits 0 ($st_b)" \
    test "$st_b" = 0
check "2 s slots: ... and skipped COMMAND" \
    grep -q 'is done already' "$T/two-b.err"
check "2 s slots: COMMAND ran once in slot $slot_a ($(runs "$T/two.runs"))" \
    test "$(runs "$T/two.runs")" = 1
pttl=$(rcli "$P" PTTL "dlock:done:{two:$slot_a}")
check "2 s slots: the marker lasts at most two slots (PTTL $pttl)" \
    test "${pttl:-0}" -gt 0 -a "${pttl:-0}" -le 4000
wait_until 5 slot_after 2 "${slot_a#2s-}" || fail "the slot did not change"
expect_status 0 "2 s slots: a run in the next slot" \
    "$DLOCK_BIN" run -v --once-per 2 two -- sh -c "$note" sh "$T/two.runs"
check "2 s slots: ... is in another slot ($(slot_in "$T/err"))" \
    test "$(slot_in "$T/err")" != "$slot_a"
check "2 s slots: ... and ran COMMAND ($(runs "$T/two.runs"))" \
    test "$(runs "$T/two.runs")" = 2

# --- --min-hold -------------------------------------------------------------
# COMMAND is over at once; the lock stays held: a -n run started after
# COMMAND has exited fails, and the holder is still there after it.
spawn_bg_err "$T/mh.err" "$DLOCK_BIN" run -v --min-hold 5 mh -- \
    sh -c 'echo "$$" >"$1"' sh "$T/mh.pid"
holder=$BG
wait_until 10 test -s "$T/mh.pid" || fail "min-hold: COMMAND did not start"
wait_until 10 eval '! running "$(cat "$T/mh.pid")"' ||
    fail "min-hold: COMMAND did not exit"
# Without --min-hold the lock would be released right now.
sleep 0.5
expect_status 1 "min-hold: -n fails after COMMAND exited" \
    "$DLOCK_BIN" run -n mh -- true
check "min-hold: the holder still holds the lock after that attempt" \
    running "$holder"
check "min-hold: the lock key exists" \
    test "$(rcli "$P" EXISTS 'dlock:{mh}')" = 1
wait_pid "$holder" 30
check "min-hold: the holder exits with COMMAND's status 0 ($WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
check "min-hold: -v says it holds on" grep -q 'min-hold' "$T/mh.err"
expect_status 0 "min-hold: -n succeeds after the hold-on" \
    "$DLOCK_BIN" run -n mh -- true
expect_status 0 "min-hold: --min-hold equal to --max-hold is fine" \
    "$DLOCK_BIN" run --min-hold 0.3 --max-hold 0.3 mh -- true
expect_status 3 "min-hold: the status stays COMMAND's" \
    "$DLOCK_BIN" run --min-hold 0.3 mh -- sh -c 'exit 3'

# SIGTERM ends the hold-on: dlock exits (with COMMAND's status) long
# before --min-hold 60, and the lock is free.
spawn_bg_err "$T/mht.err" "$DLOCK_BIN" run -v --min-hold 60 mht -- \
    sh -c 'echo "$$" >"$1"' sh "$T/mht.pid"
holder=$BG
wait_until 10 test -s "$T/mht.pid" || fail "min-hold TERM: no COMMAND"
wait_until 10 eval '! running "$(cat "$T/mht.pid")"' ||
    fail "min-hold TERM: COMMAND did not exit"
kill -TERM "$holder"
wait_pid "$holder" 20
check "min-hold: SIGTERM ends the hold-on, status 0 ($WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
[ "$WAIT_STATUS" = 0 ] || sed 's/^/  holder: /' "$T/mht.err" >&2
check "min-hold: the lock is free after SIGTERM" key_gone "$P" 'dlock:{mht}'

# --- --max-hold -------------------------------------------------------------
# The job: a shell that waits for a `sleep 30` it started (two processes
# of the job's group).
job='echo "$$" >"$1"; sleep 30 & echo "$!" >"$2"; wait'

# Control: without --max-hold the same job holds the lock well past 1 s.
spawn_bg "$DLOCK_BIN" run -l 0.5 mxc -- sh -c "$job" sh "$T/mxc.pid" \
    "$T/mxc.child"
ctl=$BG
wait_until 10 test -s "$T/mxc.child" || fail "max-hold control: no job"
sleep 2
check "max-hold control: without --max-hold the job still runs" \
    running "$(cat "$T/mxc.child")"
expect_status 1 "max-hold control: ... and holds the lock" \
    "$DLOCK_BIN" run -n mxc -- true
kill -TERM "$ctl"
wait_pid "$ctl" 20

expect_status 75 "max-hold: --max-hold 1 ends a 30 s job with the lost code" \
    "$DLOCK_BIN" run -l 0.5 --max-hold 1 mx -- sh -c "$job" sh "$T/mx.pid" \
    "$T/mx.child"
check "max-hold: the message says max-hold was reached" \
    grep -q 'max-hold reached' "$T/err"
check "max-hold: it names SIGTERM to the group" grep -q 'sent SIGTERM' "$T/err"
check "max-hold: the job's shell is gone" \
    eval '! running "$(cat "$T/mx.pid")"'
check "max-hold: the job's sleep is gone" \
    eval '! running "$(cat "$T/mx.child")"'
check "max-hold: the lock key is gone" key_gone "$P" 'dlock:{mx}'
expect_status 0 "max-hold: the lock is free afterwards" \
    "$DLOCK_BIN" run -n mx -- true
expect_status 99 "max-hold: -L 99 and --on-lost kill" \
    "$DLOCK_BIN" run -l 0.5 --max-hold 0.5 --on-lost kill -L 99 mx -- \
    sh -c "$job" sh "$T/mxk.pid" "$T/mxk.child"
check "max-hold kill: the job's sleep is gone" \
    eval '! running "$(cat "$T/mxk.child")"'

# --on-lost ignore: the lock is released at max-hold, the job goes on.
spawn_bg_err "$T/mxi.err" "$DLOCK_BIN" run -l 0.5 --max-hold 1 \
    --on-lost ignore mxi -- sh -c \
    'touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done; touch "$3"' \
    sh "$T/mxi.started" "$T/mxi.go" "$T/mxi.done"
holder=$BG
wait_until 10 test -e "$T/mxi.started" || fail "max-hold ignore: no job"
wait_until 20 grep -q 'max-hold reached' "$T/mxi.err" ||
    fail "max-hold ignore: max-hold was not reached"
check "max-hold ignore: the lock key is gone while the job runs" \
    key_gone "$P" 'dlock:{mxi}'
expect_status 0 "max-hold ignore: another run gets the lock" \
    "$DLOCK_BIN" run -n mxi -- true
check "max-hold ignore: the holder still waits for its job" running "$holder"
touch "$T/mxi.go"
wait_pid "$holder" 20
check "max-hold ignore: exit status 75 ($WAIT_STATUS)" test "$WAIT_STATUS" = 75
check "max-hold ignore: the job ran to its end" test -e "$T/mxi.done"
check "max-hold ignore: dlock says the job goes on without the lock" \
    grep -q 'goes on without the lock' "$T/mxi.err"

# With --once-per, a run stopped by --max-hold leaves no marker.
wait_until 70 has_left 3600 60000 || fail "no minute left in the hour slot"
expect_status 75 "max-hold + once-per: the stopped run" \
    "$DLOCK_BIN" run -l 0.5 --max-hold 0.5 --once-per 3600 mxo -- \
    sh -c 'echo "$$" >>"$1"; sleep 30' sh "$T/mxo.runs"
expect_status 0 "max-hold + once-per: the next run runs COMMAND" \
    "$DLOCK_BIN" run --once-per 3600 mxo -- sh -c "$note" sh "$T/mxo.runs"
check "max-hold + once-per: two runs of COMMAND ($(runs "$T/mxo.runs"))" \
    test "$(runs "$T/mxo.runs")" = 2

finish
