#!/usr/bin/env bash
# holder.sh - holder info (issue 21): who holds a lock and since when.
# `dlock run` and `dlock acquire` record host, pid, command (or --label),
# start and version beside the lock; `dlock status` says "held by HOST pid
# PID `COMMAND` for ..., token T, lease N s left" (and --json a "holder"
# object); the -v messages of a busy or timed-out acquire name the holder;
# the info is renewed with the lease by the watchdog and never shown for
# a hold it does not describe (released, or taken by a client that
# records none).
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT
host=$(hostname)

# A holder that says when it holds the lock and ends when told to.
holder_script='touch "$1/held"; i=0; while [ ! -e "$1/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done'

# --- dlock run: the holder is COMMAND ----------------------------------------
rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run -l 1 job -- sh -c "$holder_script" holder-cmd "$T"
holder=$BG
wait_until 10 test -e "$T/held" || fail "the holder did not start"
expect_status 0 "status while run holds it" "$DLOCK_BIN" status job
check "status: held by this host, dlock's pid, COMMAND" \
    grep -qF "state:    held by $host pid $holder \`sh -c " "$T/out"
check "status: for how long, token, lease left" \
    grep -Eq '^state: .*` for [0-9]+(ms|s), token [1-9][0-9]*, lease [0-9]+ (ms|s) left$' \
    "$T/out"
# The lease is 1 s: the info outlives it only if the watchdog renews it
# with the lock.
sleep 2.2
expect_status 0 "status after two leases" "$DLOCK_BIN" status job
check "the info was renewed with the lease" \
    grep -Eq "^state:    held by $host pid $holder .* for [2-9]s," "$T/out"
expect_status 0 "status --json" "$DLOCK_BIN" status --json job
check "json: the holder object" \
    grep -qF "\"holder\":{\"host\":\"$host\",\"pid\":$holder,\"label\":\"sh -c " \
    "$T/out"
check "json: version and held_ms" \
    grep -Eq '"version":"[0-9.]+","held_ms":[0-9]+\}' "$T/out"
check "json: valid" eval 'python3 -m json.tool "$T/out" >/dev/null'

# --- busy and timed-out messages name the holder -----------------------------
expect_status 1 "-v -n while held" "$DLOCK_BIN" run -v -n job -- true
check "-v -n: the busy message names the holder" \
    grep -qF "\"job\" is held by $host pid $holder \`sh -c" "$T/err"
expect_status 1 "-v -w 0.2 while held" "$DLOCK_BIN" acquire -v -w 0.2 job
check "-v: the wait names the holder" \
    grep -qF "waiting for \"job\" (up to 200 ms), held by $host pid $holder" \
    "$T/err"
check "-v: the timeout names the holder" \
    grep -Eq "\"job\" is held by $host pid $holder .*: gave up waiting" \
    "$T/err"
touch "$T/go"
wait_pid "$holder" 20
check "run exited 0" test "$WAIT_STATUS" = 0

# --- released: the info left to expire is not shown --------------------------
expect_status 0 "status after the release" "$DLOCK_BIN" status job
check "status: free" grep -q '^state:    free$' "$T/out"
check "json holder null when free" \
    eval '"$DLOCK_BIN" status --json job | grep -qF "\"holder\":null"'

# --- dlock acquire: the holder is its caller; --label --------------------------
expect_status 0 "acquire with a label (another 'host')" \
    "$DLOCK_BIN" acquire -l 30 --label "backup on db-7" other
read -r owner _ <"$T/out"
expect_status 0 "status of the labelled hold" "$DLOCK_BIN" status other
check "status shows the label" \
    grep -qF "\`backup on db-7\` for " "$T/out"
expect_status 0 "status --json of the labelled hold" \
    "$DLOCK_BIN" status --json other
check "json: the label" grep -qF '"label":"backup on db-7"' "$T/out"
"$DLOCK_BIN" release --owner "$owner" other
# Without --label, acquire records its caller (pid and command line):
# here a shell that waits for it.
bash -c '"$1" acquire -l 30 caller >"$2/acq"; echo $$ >"$2/callerpid"' \
    caller-shell "$DLOCK_BIN" "$T"
read -r owner _ <"$T/acq"
cpid=$(cat "$T/callerpid")
expect_status 0 "status of acquire's hold" "$DLOCK_BIN" status caller
check "acquire records its caller's pid and command line" \
    grep -qF "held by $host pid $cpid \`bash -c " "$T/out"
"$DLOCK_BIN" release --owner "$owner" caller

# --- info of an earlier hold is never shown as the holder's -------------------
expect_status 0 "acquire stale" "$DLOCK_BIN" acquire -l 30 --label old stale
read -r owner _ <"$T/out"
"$DLOCK_BIN" release --owner "$owner" stale
check "the old info is still there (left to expire)" \
    test "$(rcli "$P" EXISTS 'dlock:{stale}:i')" = 1
# A holder that records no info (a library client without holder_info).
rcli "$P" HSET 'dlock:{stale}' someone-else 1 >/dev/null
rcli "$P" PEXPIRE 'dlock:{stale}' 30000 >/dev/null
expect_status 0 "status of a hold without info" "$DLOCK_BIN" status stale
check "not the old holder's info" eval '! grep -qF "\`old\`" "$T/out"'
check "says there is no holder info" \
    grep -qF 'held by owner someone-else (no holder info)' "$T/out"
expect_status 0 "status --json of a hold without info" \
    "$DLOCK_BIN" status --json stale
check "json: holder null" grep -qF '"holder":null' "$T/out"

# --- a label with control characters cannot drive the terminal ---------------
expect_status 0 "acquire with an escape in the label" \
    "$DLOCK_BIN" acquire -l 30 --label $'x\e[31my' esc
expect_status 0 "status" "$DLOCK_BIN" status esc
check "the escape is shown as ?" grep -qF '`x?[31my`' "$T/out"
check "json escapes it" \
    eval '"$DLOCK_BIN" status --json esc | grep -qF "x\\u001b[31my"'
expect_status 64 "--label longer than 511 bytes" \
    "$DLOCK_BIN" acquire --label "$(printf 'a%.0s' {1..512})" esc2

finish
