#!/usr/bin/env bash
# run.sh - `dlock run` against a real redis-server: COMMAND's exit status
# passes through (128+N for a signal), 126/127 when it cannot be executed,
# the conflict code with -n/-w while the lock is held, waiting until the
# lock is free, DLOCK_KEY and an increasing DLOCK_FENCING_TOKEN in the
# child's environment, -v output, --prefix, and a child that inherits no
# socket or pipe of dlock and starts with SIGPIPE at its default action.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# --- exit statuses -------------------------------------------------------
expect_status 0 "COMMAND exits 0" "$DLOCK_BIN" run k -- true
expect_status 3 "COMMAND exits 3" "$DLOCK_BIN" run k -- sh -c 'exit 3'
expect_status 255 "COMMAND exits 255" "$DLOCK_BIN" run k -- sh -c 'exit 255'
expect_status 0 "flock-style: no -- before COMMAND" "$DLOCK_BIN" run k true
expect_status 5 "-- before KEY" "$DLOCK_BIN" run -- k sh -c 'exit 5'
expect_status 0 "COMMAND's arguments are not parsed by dlock" \
    "$DLOCK_BIN" run k -- sh -c 'test "$1" = -w' sh -w
expect_status 0 "every long option" "$DLOCK_BIN" run --server "$REDIS_URL" \
    --wait 5 --lease 2 --conflict-exit-code 3 --lost-exit-code 4 \
    --on-lost kill --grace 1 --verbose --prefix dlock --user default \
    longopts -- true
check "--verbose works" grep -q 'released "longopts"' "$T/err"
expect_status 0 "options given as --name=value" "$DLOCK_BIN" run \
    --server="$REDIS_URL" --wait=5 --lease=2 --on-lost=term --grace=0.5 \
    longopts -- true
expect_status 137 "COMMAND killed by SIGKILL: 128+9" \
    "$DLOCK_BIN" run k -- sh -c 'kill -9 $$'
expect_status 143 "COMMAND killed by SIGTERM: 128+15" \
    "$DLOCK_BIN" run k -- sh -c 'kill -TERM $$'
expect_status 134 "COMMAND killed by SIGABRT: 128+6" \
    "$DLOCK_BIN" run k -- sh -c 'kill -ABRT $$'

expect_status 127 "COMMAND not found (path)" \
    "$DLOCK_BIN" run k -- "$T/no-such-command"
check "127 is explained" grep -q "cannot execute" "$T/err"
expect_status 127 "COMMAND not found (PATH search)" \
    "$DLOCK_BIN" run k -- dlock-test-no-such-command
printf '#!/bin/sh\nexit 0\n' >"$T/noexec"
chmod 644 "$T/noexec"
expect_status 126 "COMMAND not executable" "$DLOCK_BIN" run k -- "$T/noexec"
check "126 names the reason" grep -q "Permission denied" "$T/err"
expect_status 126 "COMMAND is a directory" "$DLOCK_BIN" run k -- "$T"
printf 'exit 9\n' >"$T/noshebang"
chmod 755 "$T/noshebang"
expect_status 9 "a script without #! runs under /bin/sh" \
    "$DLOCK_BIN" run k -- "$T/noshebang"
expect_status 0 "the lock is free after an exec failure" \
    "$DLOCK_BIN" run -n k -- true
check "no lock key is left behind" \
    test "$(rcli "$P" EXISTS 'dlock:{k}')" = 0

# --- environment ---------------------------------------------------------
envcmd='printf "%s|%s\n" "$DLOCK_KEY" "$DLOCK_FENCING_TOKEN"'
expect_status 0 "environment 1" "$DLOCK_BIN" run envkey -- sh -c "$envcmd"
IFS='|' read -r key1 tok1 <"$T/out"
expect_status 0 "environment 2 (stale values replaced)" \
    env DLOCK_FENCING_TOKEN=999999 DLOCK_KEY=wrong \
    "$DLOCK_BIN" run envkey -- sh -c "$envcmd"
IFS='|' read -r key2 tok2 <"$T/out"
check "DLOCK_KEY is KEY" test "$key1" = envkey -a "$key2" = envkey
check "DLOCK_FENCING_TOKEN is a number ($tok1)" \
    eval '[[ "$tok1" =~ ^[0-9]+$ ]]'
check "DLOCK_FENCING_TOKEN increases between runs ($tok1 < $tok2)" \
    test "${tok2:-0}" -gt "${tok1:-0}" -a "${tok2:-0}" != 999999
weird="a key with 'quotes', \"double\" and {braces}"
expect_status 0 "odd KEY" "$DLOCK_BIN" run "$weird" -- sh -c "$envcmd"
check "DLOCK_KEY keeps odd bytes" \
    test "$(cut -d'|' -f1 "$T/out")" = "$weird"

# --- conflicts -----------------------------------------------------------
holder_script='touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done'
spawn_bg "$DLOCK_BIN" run busy -- sh -c "$holder_script" sh "$T"
holder=$BG
wait_until 10 test -e "$T/held" || fail "the holder did not start"

expect_status 1 "-n while held: conflict code 1" \
    "$DLOCK_BIN" run -n busy -- touch "$T/ran"
expect_status 42 "-n -E 42 while held" \
    "$DLOCK_BIN" run -n -E 42 busy -- touch "$T/ran"
expect_status 0 "-E 0 while held" \
    "$DLOCK_BIN" run --nonblock --conflict-exit-code 0 busy -- touch "$T/ran"
expect_status 1 "-w 0 is -n" "$DLOCK_BIN" run -w 0 busy -- touch "$T/ran"
expect_status 1 "-w 0.3 gives up" "$DLOCK_BIN" run -w 0.3 busy -- \
    touch "$T/ran"
expect_status 7 "--wait=0.2 -E 7" "$DLOCK_BIN" run --wait=0.2 -E 7 busy -- \
    touch "$T/ran"
check "COMMAND never ran without the lock" test ! -e "$T/ran"
expect_status 0 "another KEY is independent" "$DLOCK_BIN" run -n other -- true

# Waiters get the lock once the holder is done: one with -w, one forever.
spawn_bg "$DLOCK_BIN" run -w 30 busy -- touch "$T/waiter1"
w1=$BG
spawn_bg_err "$T/waiter2.err" "$DLOCK_BIN" run -v busy -- touch "$T/waiter2"
w2=$BG
sleep 0.5
check "waiters wait while the lock is held" \
    test ! -e "$T/waiter1" -a ! -e "$T/waiter2"
touch "$T/go"
wait_pid "$holder" 20
check "the holder exits 0" test "$WAIT_STATUS" = 0
wait_pid "$w1" 20
check "the -w 30 waiter got the lock (status $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0 -a -e "$T/waiter1"
wait_pid "$w2" 20
check "the unbounded waiter got the lock (status $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0 -a -e "$T/waiter2"

# --- verbose -------------------------------------------------------------
expect_status 0 "-v" "$DLOCK_BIN" run -v verb -- true
for text in "server 1 of 1: redis://127.0.0.1:$P" "acquired \"verb\" after" \
    "fencing token" "exited with status 0" "released \"verb\""; do
    check "-v says '$text'" grep -qF "$text" "$T/err"
done
check "-v writes nothing on stdout" test ! -s "$T/out"
rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run verb2 -- sh -c "$holder_script" sh "$T"
holder=$BG
wait_until 10 test -e "$T/held" || fail "the holder did not start"
expect_status 1 "-v -w 0.3 while held" "$DLOCK_BIN" run -v -w 0.3 verb2 -- true
check "-v says what it waits for" grep -q 'waiting for "verb2"' "$T/err"
check "-v names the holder" grep -Eq 'held by .* pid [0-9]+ .* for ' "$T/err"
touch "$T/go"
wait_pid "$holder" 20

# --- --prefix / DLOCK_PREFIX ---------------------------------------------
expect_status 0 "--prefix" "$DLOCK_BIN" run --prefix myapp pk -- \
    redis-cli -h 127.0.0.1 -p "$P" EXISTS 'myapp:{pk}'
check "--prefix: the key is myapp:{pk}" grep -qx 1 "$T/out"
expect_status 0 "DLOCK_PREFIX" env DLOCK_PREFIX=other "$DLOCK_BIN" run pk -- \
    redis-cli -h 127.0.0.1 -p "$P" EXISTS 'other:{pk}'
check "DLOCK_PREFIX: the key is other:{pk}" grep -qx 1 "$T/out"
expect_status 0 "default prefix" "$DLOCK_BIN" run pk -- \
    redis-cli -h 127.0.0.1 -p "$P" EXISTS 'dlock:{pk}'
check "default: the key is dlock:{pk}" grep -qx 1 "$T/out"

# --- what the child inherits ----------------------------------------------
# dlock is started with only 0, 1 and 2 open, so that every other fd the
# child has would be dlock's.
# (ls is not the shell's last command, so the shell forks it and $$ is the
# shell, whose only fds are the ones it got from dlock.)
fdcmd='ls /proc/$$/fd; :'
expect_status 0 "child's fds" \
    "${CLOSED_EXEC[@]}" "$DLOCK_BIN" run fds -- sh -c "$fdcmd"
fds=$(sort -n "$T/out" | tr '\n' ' ')
check "the child has only fds 0 1 2 (has: $fds)" test "$fds" = "0 1 2 "
expect_status 0 "child's fds with -v" \
    "${CLOSED_EXEC[@]}" "$DLOCK_BIN" run -v fds -- sh -c "$fdcmd"
fds=$(sort -n "$T/out" | tr '\n' ' ')
check "with -v too (has: $fds)" test "$fds" = "0 1 2 "

# From outside, while the child runs and the watchdog renews (lease 3 s,
# renewed every second: renewals happen while we look).
rm -f "$T/child.pid" "$T/go"
spawn_bg "${CLOSED_EXEC[@]}" "$DLOCK_BIN" run -l 3 fds2 -- sh -c \
    'echo $$ >"$1/child.pid"; while [ ! -e "$1/go" ]; do sleep 0.05; done' \
    sh "$T"
runner=$BG
wait_until 10 test -s "$T/child.pid" || fail "the child did not start"
sleep 1.5
child=$(cat "$T/child.pid" 2>/dev/null)
links=$(for f in /proc/"$child"/fd/*; do readlink "$f"; done 2>/dev/null)
dlock_pid=$(cat "/proc/$child/stat" 2>/dev/null | sed 's/^.*) //' |
    cut -d' ' -f2)
dlock_socks=$(for f in /proc/"$dlock_pid"/fd/*; do readlink "$f"; done \
    2>/dev/null | grep -c socket)
check "dlock itself has a socket open (has $dlock_socks)" \
    test "$dlock_socks" -ge 1
check "/proc/<child>/fd holds no socket" \
    eval '! echo "$links" | grep -q socket'
check "/proc/<child>/fd has exactly 3 entries ($(echo $links))" \
    test "$(ls /proc/"$child"/fd 2>/dev/null | wc -l)" = 3
touch "$T/go"
wait_pid "$runner" 20
check "the runner exits 0 (status $WAIT_STATUS)" test "$WAIT_STATUS" = 0

# SIGPIPE (13: bit 12 of SigIgn) is ignored in dlock but not in the child,
# and no signal is blocked in the child.
expect_status 0 "child's signal state" "$DLOCK_BIN" run sig -- \
    grep -E '^Sig(Ign|Blk)' /proc/self/status
ign=$(sed -n 's/^SigIgn:\s*//p' "$T/out")
blk=$(sed -n 's/^SigBlk:\s*//p' "$T/out")
check "SIGPIPE is not ignored in the child (SigIgn $ign)" \
    test $((0x${ign:-0} & 0x1000)) = 0
check "no signal is blocked in the child (SigBlk $blk)" \
    test $((0x${blk:-1})) = 0
# A signal ignored when dlock starts (nohup, background jobs) stays
# ignored in COMMAND: SIGINT is bit 1 (0x2), SIGHUP bit 0 (0x1).
expect_status 0 "ignored signals" bash -c \
    'trap "" INT HUP; exec "$0" run sig -- grep ^SigIgn /proc/self/status' \
    "$DLOCK_BIN"
ign=$(sed -n 's/^SigIgn:\s*//p' "$T/out")
check "SIGINT and SIGHUP ignored before dlock stay so in COMMAND ($ign)" \
    test $((0x${ign:-0} & 0x3)) = 3
check "...and SIGPIPE is still not ignored ($ign)" \
    test $((0x${ign:-0} & 0x1000)) = 0
check "COMMAND's stdout is dlock's stdout" \
    eval 'test "$("$DLOCK_BIN" run so -- echo hello)" = hello'
check "COMMAND's stdin is dlock's stdin" \
    eval 'test "$(echo in | "$DLOCK_BIN" run si -- cat)" = in'

finish
