#!/usr/bin/env bash
# mixed_versions.sh - clients of the previous release and of this one on
# the same names (issue 31: a rolling upgrade): they must exclude each
# other, whichever holds first, with this version's default fence
# retention and without retention (--fence-retention 0, which keeps the
# hold's token in the lock hash's '#t' and deletes the fence hash when the
# name is free). Workers of both versions (this one with both settings)
# increment one shared counter under `dlock run`: it must end exact, with
# the tokens of the critical sections increasing in lock order.
#
# The previous release's tool: $DLOCK_OLD_BIN when set; else, with
# DLOCK_TEST_BUILD_OLD=1 and the repository's git history at hand, built
# from commit $DLOCK_OLD_COMMIT (default 34ce30b) in this test's temp dir
# (a minute or two: not done by default); else the test is skipped with a
# message. docs/design.md, "Clients of different versions", says what a
# rolling upgrade does.
. "$(dirname "$0")/common.bash"

OLD_COMMIT=${DLOCK_OLD_COMMIT:-34ce30b}
OLD=${DLOCK_OLD_BIN:-}
if [ -z "$OLD" ] && [ "${DLOCK_TEST_BUILD_OLD:-0}" = 1 ] &&
    git -C "$DLOCK_SRC" cat-file -e "$OLD_COMMIT^{commit}" 2>/dev/null; then
    echo "building the tool of $OLD_COMMIT in $T/old (DLOCK_TEST_BUILD_OLD)"
    mkdir -p "$T/old/src"
    if git -C "$DLOCK_SRC" archive "$OLD_COMMIT" | tar -x -C "$T/old/src" &&
        cmake -S "$T/old/src" -B "$T/old/build" -DCMAKE_BUILD_TYPE=Release \
            >"$T/old/build.log" 2>&1 &&
        cmake --build "$T/old/build" --target dlock_cli -j2 \
            >>"$T/old/build.log" 2>&1; then
        OLD=$T/old/build/cli/dlock
    else
        tail -20 "$T/old/build.log" >&2
        fail "could not build the tool of $OLD_COMMIT"
        finish
    fi
fi
if [ -z "$OLD" ] || [ ! -x "$OLD" ]; then
    echo "skip: no tool of the previous release (set DLOCK_OLD_BIN, or" \
        "DLOCK_TEST_BUILD_OLD=1 to build $OLD_COMMIT from git history)"
    exit 0
fi
echo "previous release: $("$OLD" --version 2>&1 | head -n1) ($OLD)"

start_redis
export DLOCK_SERVERS=$REDIS_URL

# The three kinds of client, as commands in $T/bin: the old tool, the new
# with its default retention, the new keeping nothing
# (DLOCK_FENCE_RETENTION=0; --fence-retention 0 in the first check).
mkdir -p "$T/bin"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$OLD" >"$T/bin/old"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$DLOCK_BIN" >"$T/bin/new"
printf '#!/bin/sh\nDLOCK_FENCE_RETENTION=0 exec "%s" "$@"\n' "$DLOCK_BIN" \
    >"$T/bin/new0"
printf '#!/bin/sh\nDLOCK_LAYOUT=string DLOCK_FENCE_RETENTION=0 exec "%s" "$@"\n' \
    "$DLOCK_BIN" >"$T/bin/newS"
chmod +x "$T/bin/old" "$T/bin/new" "$T/bin/new0" "$T/bin/newS"
PATH=$T/bin:$PATH

# hold_bg HOLDER NAME: HOLDER holds NAME in the background (dlock run,
# 3 s); returns once it holds (checked), its pid in $BG.
hold_bg() {
    local holder=$1 name=$2
    rm -f "$T/held"
    spawn_bg "$holder" run -l 10 "$name" -- sh -c 'touch "$1"; sleep 3' sh \
        "$T/held"
    local end=$(($(now_ms) + 10000))
    while [ ! -f "$T/held" ] && [ "$(now_ms)" -lt "$end" ]; do sleep 0.02; done
    check "$holder holds $name" test -f "$T/held"
}

# holder_then_try HOLDER TRIER NAME: HOLDER holds NAME (dlock run, 3 s);
# TRIER's non-blocking try must find it busy (conflict status 42).
holder_then_try() {
    local holder=$1 trier=$2 name=$3
    hold_bg "$holder" "$name"
    local h=$BG
    expect_status 42 "$trier finds $name held by $holder" \
        "$trier" run -n -E 42 "$name" -- true
    wait_pid "$h" 30 || fail "$holder's hold did not end"
    expect_status 0 "$trier takes $name once $holder released it" \
        "$trier" run -n -E 42 "$name" -- true
}

# The option and the variable say the same.
expect_status 0 "--fence-retention 0 leaves no fence hash" \
    "$DLOCK_BIN" run --fence-retention 0 -n mv-opt -- true
check "... none there" \
    test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{mv-opt}:f')" = 0
expect_status 0 "the default leaves the fence hash" \
    new run -n mv-opt2 -- true
check "... there" test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{mv-opt2}:f')" = 1
expect_status 64 "--fence-retention 0.5 is refused" \
    "$DLOCK_BIN" run --fence-retention 0.5 -n mv-opt -- true
check "... saying why" file_has "$T/err" "keep nothing"

holder_then_try old new mv-a
holder_then_try old new0 mv-b
holder_then_try new old mv-c
holder_then_try new0 old mv-d
holder_then_try new0 new mv-e
holder_then_try new new0 mv-f

# The string layout (issue 31, --layout string) beside the hash layout of
# the previous release and of this one: they refuse each other (a status
# other than 0 and the conflict code: never both hold), and the trier
# takes the name once the holder released it.
holder_then_refused() {
    local holder=$1 trier=$2 name=$3
    hold_bg "$holder" "$name"
    local h=$BG
    timeout -k 5 60 "$trier" run -n -E 42 "$name" -- touch "$T/both" \
        >"$T/out" 2>"$T/err"
    local st=$?
    check "$trier is refused on $name held by $holder (status $st)" \
        test "$st" != 0 -a "$st" != 42
    check "... and never ran beside it" test ! -f "$T/both"
    wait_pid "$h" 30 || fail "$holder's hold did not end"
    expect_status 0 "$trier takes $name once $holder released it" \
        "$trier" run -n -E 42 "$name" -- true
}
holder_then_refused old newS mv-s1
holder_then_refused newS old mv-s2
holder_then_refused new newS mv-s3
holder_then_refused newS new mv-s4

# A reader of one version waiting for a writer of the other (readers
# wait by notification): it gets in only after the writer's command has
# ended. A reader of the previous release does not mark the hold it
# waits for ('#l'), so a writer of this one does not announce its
# release to it: it gets in when the writer's lease would have run out
# (4 s here) at the latest (docs/design.md, "Clients of different
# versions").
writer_then_reader() {
    local writer=$1 reader=$2 name=$3
    rm -f "$T/wheld" "$T/wdone" "$T/rsaw"
    spawn_bg "$writer" run -l 4 "$name" -- sh -c \
        'touch "$1"; sleep 1; touch "$2"' sh "$T/wheld" "$T/wdone"
    local h=$BG end=$(($(now_ms) + 10000))
    while [ ! -f "$T/wheld" ] && [ "$(now_ms)" -lt "$end" ]; do sleep 0.02; done
    check "$writer writes $name" test -f "$T/wheld"
    expect_status 0 "$reader's reader waits for $writer's writer" \
        "$reader" run --shared -w 30 "$name" -- sh -c \
        'test -f "$1" && touch "$2"' sh "$T/wdone" "$T/rsaw"
    check "... and reads only after the writer's command ended" \
        test -f "$T/rsaw"
    wait_pid "$h" 30 || fail "$writer's hold did not end"
}
writer_then_reader new old mv-r1
writer_then_reader new0 old mv-r2
writer_then_reader old new mv-r3
writer_then_reader new new mv-r4

# The counter: 2 workers of each kind, 15 rounds each, waiting their turn
# (fair: the old and new waiters share one queue).
incr='n=$(cat "$1/counter"); sleep 0.002; echo $((n + 1)) >"$1/counter";
echo "$DLOCK_FENCING_TOKEN" >>"$1/tokens"'
rounds=15
worker() {
    local kind=$1 i
    for ((i = 0; i < rounds; i++)); do
        "$kind" run -w 120 mv-counter -- sh -c "$incr" sh "$T" ||
            echo "$kind round $i: status $?" >>"$T/errors"
    done
}
echo 0 >"$T/counter"
: >"$T/tokens"
pids=()
for kind in old new new0 old new new0; do
    spawn_bg worker "$kind"
    pids+=("$BG")
done
for p in "${pids[@]}"; do
    wait_pid "$p" 240 || fail "worker $p did not finish in 240 s"
done
total=$(cat "$T/counter")
check "counter is exactly $((6 * rounds)) (is $total)" \
    test "$total" = $((6 * rounds))
check "no dlock run failed" test ! -s "$T/errors"
[ ! -s "$T/errors" ] || head -5 "$T/errors" >&2
check "tokens strictly increase in lock order" \
    awk 'NR > 1 && $1 <= prev { bad = 1 } { prev = $1 } END { exit bad }' \
    "$T/tokens"
check "the lock is free at the end" \
    test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{mv-counter}')" = 0

# A new client without retention leaves a fence hash holding a token
# (an old client's grant or hand-over wrote it: an old fair waiter may
# need it) where it was; the lock itself goes.
expect_status 0 "an old client takes mv-g" old run -n mv-g -- true
check "the old client left the fence hash" \
    test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{mv-g}:f')" = 1
expect_status 0 "a new client without retention takes mv-g" \
    new0 run -n mv-g -- true
check "... and keeps that fence hash, the lock gone" \
    test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{mv-g}'):$(rcli "$REDIS_PORT" \
        EXISTS 'dlock:{mv-g}:f')" = 0:1

finish
