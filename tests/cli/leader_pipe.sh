#!/usr/bin/env bash
# leader_pipe.sh - `dlock leader` when its output cannot be written:
# dlock ignores SIGPIPE, so a --watch whose reader went away (`dlock
# leader --watch NAME | head -1`) must end at its next line, with status
# 74 and a message, rather than watch for ever; a plain `dlock leader`
# into a full device (/dev/full) exits 74 too, not 0 as if it had told
# who leads.
. "$(dirname "$0")/common.bash"

start_redis
S=(-s "$REDIS_URL")

# ---- --watch into a pipe whose reader has gone.
# The reader, head, takes the first line ("none") and goes away; the
# watcher's status goes to a file.
{
    timeout -k 5 60 "$DLOCK_BIN" leader --watch "${S[@]}" lp \
        2>"$T/watch.err"
    echo $? >"$T/watch.rc"
} | head -1 >"$T/first" &
BG_PIDS+=("$!")
wait_until 10 file_has "$T/first" none
check "the first line was read" file_has "$T/first" none
# A change makes the watcher write again. The leader stays until the
# watcher has ended (or 10 s): a leader that came and went between two of
# the watcher's looks would be no change to see (dlock.h, dlock_leader_wait).
expect_status 0 "a leader comes and goes" \
    "$DLOCK_BIN" elect "${S[@]}" lp -- sh -c \
    'i=0; while [ ! -s "$1/watch.rc" ] && [ $i -lt 200 ]; do
         sleep 0.05; i=$((i + 1)); done' sh "$T"
wait_until 30 test -s "$T/watch.rc"
check "the watcher ended once its reader was gone (got $(cat "$T/watch.rc" \
    2>/dev/null))" test "$(cat "$T/watch.rc" 2>/dev/null)" = 74
check "and said why" file_has "$T/watch.err" "writing to stdout"

# ---- leader (and --json) into /dev/full.
spawn_bg "$DLOCK_BIN" elect "${S[@]}" lp -- sh -c \
    'touch "$1/leading"; while [ ! -e "$1/go" ]; do sleep 0.05; done' sh "$T"
leader=$BG
wait_until 10 test -e "$T/leading" || fail "no leader"
if [ -w /dev/full ]; then
    expect_status 74 "leader into /dev/full" \
        sh -c '"$@" >/dev/full' sh "$DLOCK_BIN" leader "${S[@]}" lp
    expect_status 74 "leader --json into /dev/full" \
        sh -c '"$@" >/dev/full' sh "$DLOCK_BIN" leader --json "${S[@]}" lp
else
    echo "note: no /dev/full: those checks skipped"
fi
expect_status 0 "leader into a file" "$DLOCK_BIN" leader "${S[@]}" lp
touch "$T/go"
wait_pid "$leader" 30

finish
