#!/usr/bin/env bash
# elect.sh - `dlock elect` and `dlock leader` against a real server.
#
# Three contenders run `dlock elect -l 1 e -- worker`; each worker logs
# "start EPOCH ID", a "tick EPOCH ID" every 50 ms and "end EPOCH ID" on
# SIGTERM. The leader is then disturbed three ways: SIGKILL of its dlock
# (its guard ends the worker), SIGSTOP of its dlock for longer than the
# lease (a paused holder), and a kill -9 and restart of the server (AOF
# always, so the lock survives). Each time a follower (or, after a quick
# restart, the same leader) leads (how soon is printed, not asserted),
# and the log shows at most one worker acting at any time with strictly
# increasing epochs; writes of the paused leader's worker after a newer
# leader started are refused by a fenced resource (the highest epoch
# seen, kept under flock) and never reach the log. `dlock leader --watch` prints every
# epoch that ran a worker. --ready-file exists exactly for the process
# that leads.
. "$(dirname "$0")/common.bash"

start_redis --aof
export DLOCK_SERVERS=$REDIS_URL

# The worker: a fenced "resource" ($T/res.max holds the highest epoch that
# wrote; a write with a lower one is refused and logged in $T/stale).
# res.max is replaced by a rename: a worker killed mid-write must not
# leave it empty (the next write would then compare with nothing).
cat >"$T/worker" <<'W'
#!/bin/sh
E=$DLOCK_FENCING_TOKEN
ID=$DLOCK_LEADER_VALUE
write() {
    flock "$D/res.lock" sh -c '
        max=$(cat "$1/res.max" 2>/dev/null || echo 0)
        if [ "$2" -ge "$max" ]; then
            echo "$2" >"$1/res.max.$$" && mv -f "$1/res.max.$$" "$1/res.max"
            echo "$3 $2 $4" >>"$1/log"
        else
            echo "$3 $2 $4" >>"$1/stale"
        fi' sh "$D" "$E" "$1" "$ID"
}
trap 'write end; exit 0' TERM
write start
while :; do
    write tick
    sleep 0.05
done
W
chmod +x "$T/worker"
export D=$T
: >"$T/log"

# Watch the leader all along.
spawn_bg "$DLOCK_BIN" leader --watch e >"$T/watch"
watch_pid=$BG

declare -A ELECT
start_contender() {
    spawn_bg_err "$T/c$1.err" "$DLOCK_BIN" elect -l 1 --grace 2 \
        --value "c$1" --ready-file "$T/ready.c$1" e -- "$T/worker"
    ELECT[c$1]=$BG
}
for i in 1 2 3; do start_contender "$i"; done

# The current leader's value from `dlock leader`, e.g. "c2".
leader_value() { "$DLOCK_BIN" leader e | awk '{ print $2 }'; }
leader_epoch() { "$DLOCK_BIN" leader e | awk '{ print $1 }'; }
has_leader() { [ -n "$(leader_value)" ]; }
# A leader other than $1 leads and its worker has started.
leads_other() {
    local v
    v=$(leader_value)
    [ -n "$v" ] && [ "$v" != "$1" ] &&
        grep -q "^start $(leader_epoch) $v\$" "$T/log"
}
ready_files() { (cd "$T" && ls ready.* 2>/dev/null | tr '\n' ' '); }

check "a leader is elected" wait_until 10 has_leader
first=$(leader_value)
check "its worker started" wait_until 10 grep -q "^start .* $first\$" "$T/log"
check "only the leader's ready-file exists ($(ready_files))" \
    test "$(ready_files)" = "ready.$first "
check "the ready-file holds the epoch and value" \
    test "$(cat "$T/ready.$first")" = "$(leader_epoch) $first"

# 1. SIGKILL of the leader's dlock.
t0=$(now_ms)
kill -9 "${ELECT[$first]}"
check "after SIGKILL of $first a follower leads" wait_until 30 leads_other "$first"
# Reported, not asserted: no wall-clock threshold in a test (a loaded
# machine stretches it); the wait above bounds it for liveness.
echo "info: a follower led $(($(now_ms) - t0)) ms after the SIGKILL (lease 1 s)"
second=$(leader_value)
rm -f "$T/ready.$first" # SIGKILL left it: nothing can remove it
check "only the new leader's ready-file exists ($(ready_files))" \
    test "$(ready_files)" = "ready.$second "
start_contender "${first#c}"

# 2. SIGSTOP of the leader's dlock past the lease (a paused holder: it
# can neither renew nor stop its worker). The worker itself is not
# stopped: stopped inside the resource's own flock it would block every
# writer, the new leader's too — a property of this test's resource, not
# of dlock. It goes on writing with the old epoch, and the fence refuses
# those writes once the new leader has written.
t0=$(now_ms)
kill -STOP "${ELECT[$second]}"
check "after SIGSTOP of $second a follower leads" wait_until 30 leads_other "$second"
echo "info: a follower led $(($(now_ms) - t0)) ms after the SIGSTOP (lease 1 s)"
third=$(leader_value)
sleep 0.3
kill -CONT "${ELECT[$second]}"
wait_pid "${ELECT[$second]}" 20
check "the resumed leader exits with the lost code (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 75
check "it says the leadership was lost" \
    file_has "$T/$second.err" "leadership of \"e\""
check "its ready-file is gone" test ! -e "$T/ready.$second"
start_contender "${second#c}"

# 3. The server killed and restarted (AOF always: the lock survives).
sleep 0.5
bash "$FIXTURE" kill9 "$REDIS_DIR"
sleep 0.2
eval "$(bash "$FIXTURE" restart "$REDIS_DIR")"
check "after a server restart someone leads" wait_until 10 has_leader
sleep 1.5

# The end: stop everything, then check the log.
for k in "${!ELECT[@]}"; do kill -TERM "${ELECT[$k]}" 2>/dev/null; done
for k in "${!ELECT[@]}"; do wait_pid "${ELECT[$k]}" 20; done
# Nobody leads once every contender has stopped — but not always at once:
# a contender that exited with an I/O error while the server was down (it
# could not leave the fair queue) is a dead waiter, and a release that
# reaches its queue entry before that entry's waiter time-to-live ends
# hands the lock to it; the lock is then held, with no value proclaimed,
# for at most the lease that contender asked for (1 s here). The watch
# runs on until then: it must print "none" at the end.
no_leader() { ! "$DLOCK_BIN" leader e >/dev/null 2>&1; }
t0=$(now_ms)
check "nobody leads within a lease of the last contender stopping" \
    wait_until 5 no_leader
echo "info: nobody led $(($(now_ms) - t0)) ms after all contenders stopped"
sleep 0.3
kill -TERM "$watch_pid"
wait_pid "$watch_pid" 10

# One worker acting at a time: once an epoch has started, no line of an
# older epoch reaches the log (a worker killed in time wrote its "end"
# before; a paused one's later writes were refused by the fence and are
# in $T/stale); epochs strictly increase from start to start.
check "the log is consistent (one worker at a time, rising epochs)" \
    awk '
    $1 == "start" { if ($2 <= last) { print "epoch not rising: " $0; bad = 1 }
                    last = $2; starts++; next }
    $2 != last    { print "a line of an older epoch after a newer start: " $0; bad = 1 }
    END { if (starts < 3) { print "only " starts " starts"; bad = 1 }; exit bad }
    ' "$T/log" || grep -v tick "$T/log" >&2
check "the paused leader's writes after its resume were refused" \
    grep -q " c${second#c}\$" "$T/stale"
echo "info: $(grep -c '^start' "$T/log") leaderships; stale writes refused: \
$(wc -l <"$T/stale" 2>/dev/null || echo 0)"
missing=
for e in $(awk '$1 == "start" { print $2 }' "$T/log"); do
    grep -q "^$e " "$T/watch" || missing="$missing $e"
done
check "leader --watch printed every epoch that ran (missing:$missing)" \
    test -z "$missing"
check "the watch printed 'none' when nobody led" grep -qx none "$T/watch"

# leader: exit statuses and JSON.
expect_status 1 "leader: nobody leads now" "$DLOCK_BIN" leader e
check "prints none" grep -qx none "$T/out"
spawn_bg "$DLOCK_BIN" elect --value 'h:1 "x"' j -- sleep 30
j=$BG
has_j() { "$DLOCK_BIN" leader j >/dev/null; }
check "j has a leader" wait_until 10 has_j
expect_status 0 "leader --json" "$DLOCK_BIN" leader --json j
check "JSON with the value" grep -q '"value":"h:1 \\"x\\""' "$T/out"
check "JSON leading" grep -q '"leading":true' "$T/out"
expect_status 1 "-n while another leads: conflict" \
    "$DLOCK_BIN" elect -n j -- true
kill -TERM "$j"
wait_pid "$j" 10
check "elect passes on COMMAND's status (143 for SIGTERM: $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 143
expect_status 7 "elect: COMMAND's status" "$DLOCK_BIN" elect j -- sh -c 'exit 7'
expect_status 64 "leader --watch does not apply to elect" \
    "$DLOCK_BIN" elect --watch j -- true
expect_status 64 "--value does not apply to leader" \
    "$DLOCK_BIN" leader --value x j
expect_status 64 "elect without COMMAND" "$DLOCK_BIN" elect j
expect_status 64 "leader with a COMMAND" "$DLOCK_BIN" leader j true
expect_status 127 "elect: COMMAND not found" \
    "$DLOCK_BIN" elect j -- /nonexistent/cmd
finish
