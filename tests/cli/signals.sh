#!/usr/bin/env bash
# signals.sh - signals and `dlock run`: SIGTERM, SIGINT, SIGHUP, SIGQUIT,
# SIGUSR1 and SIGUSR2 sent to dlock reach COMMAND once, dlock exits with
# COMMAND's status and the lock is released afterwards; a signal while
# waiting for the lock ends the wait with 128+N and runs nothing; a Ctrl-C
# typed at a terminal is not delivered twice; when dlock is killed with
# SIGKILL, COMMAND gets the --on-lost signal from its guard process.
. "$(dirname "$0")/common.bash"

# Job control: background jobs get their own process group and SIGINT is
# not ignored in them (as it is for background jobs of a plain script).
set -m

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# A child that appends the name of signal $2 to $1/got when it gets it,
# and exits 7.
catcher='trap "echo $2 >>$1/got; exit 7" "$2"
echo $$ >"$1/child.pid"; touch "$1/started"
while :; do sleep 0.05; done'

for sig in TERM INT HUP QUIT USR1 USR2; do
    rm -f "$T/got" "$T/started" "$T/child.pid"
    spawn_bg "$DLOCK_BIN" run fwd -- bash -c "$catcher" bash "$T" "$sig"
    pid=$BG
    if ! wait_until 10 test -e "$T/started"; then
        fail "SIG$sig: the child did not start"
        continue
    fi
    kill -"$sig" "$pid"
    wait_pid "$pid" 20
    check "SIG$sig: dlock exits with COMMAND's status 7 (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = 7
    check "SIG$sig: COMMAND got it exactly once ($(tr '\n' ' ' <"$T/got" 2>/dev/null))" \
        test "$(cat "$T/got" 2>/dev/null)" = "$sig"
    check "SIG$sig: the lock is released" \
        test "$(rcli "$P" EXISTS 'dlock:{fwd}')" = 0
done

# Default actions: COMMAND killed by the forwarded signal -> 128+N.
for sig in TERM INT HUP; do
    rm -f "$T/started"
    spawn_bg "$DLOCK_BIN" run dflt -- sh -c 'touch "$1/started"; exec sleep 30' \
        sh "$T"
    pid=$BG
    wait_until 10 test -e "$T/started" || fail "SIG$sig default: no start"
    sleep 0.1
    kill -"$sig" "$pid"
    wait_pid "$pid" 20
    want=$((128 + $(kill -l "$sig")))
    check "SIG$sig to dlock, COMMAND dies of it: status $want (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = "$want"
done
expect_status 0 "the lock is free after the forwarded kills" \
    "$DLOCK_BIN" run -n dflt -- true

# --- a signal while waiting -----------------------------------------------
rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run sw -- sh -c \
    'touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done' sh "$T"
holder=$BG
wait_until 10 test -e "$T/held" || fail "wait: the holder did not start"
for sig in TERM INT HUP; do
    spawn_bg_err "$T/waiter.err" "$DLOCK_BIN" run -v sw -- touch "$T/ran"
    pid=$BG
    wait_until 10 grep -q 'waiting for "sw"' "$T/waiter.err" ||
        fail "SIG$sig while waiting: the waiter does not wait"
    kill -"$sig" "$pid"
    wait_pid "$pid" 20
    want=$((128 + $(kill -l "$sig")))
    check "SIG$sig while waiting: status $want (got $WAIT_STATUS)" \
        test "$WAIT_STATUS" = "$want"
done
check "nothing ran without the lock" test ! -e "$T/ran"
expect_status 1 "the holder still holds the lock" "$DLOCK_BIN" run -n sw -- true
touch "$T/go"
wait_pid "$holder" 20
check "the holder exits 0 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
expect_status 0 "no interrupted waiter left a lock behind" \
    "$DLOCK_BIN" run -n sw -- true

# --- dlock killed with SIGKILL ----------------------------------------------
# pdeath_case POLICY: start a catcher of SIGTERM under dlock, kill -9 dlock.
pdeath_case() {
    rm -f "$T/got" "$T/started" "$T/child.pid"
    spawn_bg "$DLOCK_BIN" run -l 1 --on-lost "$1" pd -- \
        bash -c "$catcher" bash "$T" TERM
    pid=$BG
    wait_until 10 test -e "$T/started" || fail "pdeath $1: no start"
    child=$(cat "$T/child.pid")
    BG_PIDS+=("$child")
    kill -9 "$pid"
    wait_pid "$pid" 10
}
pdeath_case term
check "dlock killed, --on-lost term: COMMAND gets SIGTERM" \
    wait_until 5 file_has "$T/got" TERM
check "the lease runs out by itself" \
    wait_until 10 "$DLOCK_BIN" run -n pd -- true
pdeath_case kill
check "dlock killed, --on-lost kill: COMMAND is killed" \
    wait_until 5 eval '! running "$child"'
check "...without SIGTERM" test ! -e "$T/got"
pdeath_case ignore
sleep 0.5
check "dlock killed, --on-lost ignore: COMMAND goes on" running "$child"
kill -9 "$child" 2>/dev/null

# --- Ctrl-C at a terminal -----------------------------------------------------
# dlock in the foreground of a terminal makes COMMAND's process group the
# foreground one: the terminal's SIGINT reaches COMMAND once, directly.
if command -v python3 >/dev/null; then
    rm -f "$T/got" "$T/started"
    timeout -k 5 60 python3 - "$DLOCK_BIN" "$T" "$catcher" >"$T/tty.out" \
        2>&1 <<'PY'
import os, pty, select, signal, sys, time
dlock, tdir, catcher = sys.argv[1:4]
script = catcher.replace('exit 7', ':')  # survive the SIGINT, note it
pid, fd = pty.fork()
if pid == 0:
    os.execv(dlock, [dlock, "run", "-v", "tty", "--", "bash", "-c", script,
                     "bash", tdir, "INT"])
out = b""
def pump(t):
    global out
    end = time.time() + t
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 4096)
            except OSError:
                return
deadline = time.time() + 10
while not os.path.exists(tdir + "/started") and time.time() < deadline:
    pump(0.05)
os.write(fd, b"\x03")          # Ctrl-C from the terminal
pump(1.0)
os.kill(pid, signal.SIGTERM)   # then end it with a plain signal
pump(1.0)
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
print("EXIT", os.waitstatus_to_exitcode(status))
PY
    check "tty: COMMAND got the Ctrl-C" file_has "$T/got" INT
    check "tty: COMMAND's group had the terminal's foreground" \
        grep -q "in the terminal's foreground" "$T/tty.out"
    check "tty: COMMAND got one SIGINT ($(wc -l <"$T/got" 2>/dev/null) lines)" \
        test "$(grep -c INT "$T/got" 2>/dev/null)" = 1
    check "tty: then SIGTERM ended it: 143" grep -q '^EXIT 143' "$T/tty.out"
    [ "$failures" = 0 ] || sed 's/^/  tty: /' "$T/tty.out" >&2
else
    echo "skip: no python3 for the terminal test"
fi

finish
