#!/usr/bin/env bash
# multikey.sh - `dlock run KEY KEY... -- COMMAND` against a real server:
# every KEY's fencing token reaches COMMAND (DLOCK_FENCING_TOKENS, in KEY
# order); a KEY held elsewhere means COMMAND does not run and no other KEY
# stays held (rollback); 20 processes locking {a,b}, {b,a} and {b,c} all
# finish with no overlap on any key (a mkdir-per-key checker) and nothing
# left held; losing one KEY's lease is a lost lease; bad KEY lists are
# usage errors.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL

# Tokens, in KEY order; DLOCK_KEY and DLOCK_FENCING_TOKEN are the first's.
expect_status 0 "run with two KEYs" \
    "$DLOCK_BIN" run mk-b mk-a -- sh -c \
    'echo "$DLOCK_FENCING_TOKENS|$DLOCK_KEY|$DLOCK_FENCING_TOKEN"'
IFS='|' read -r tokens first first_token <"$T/out"
read -r tb ta <<<"$tokens"
check "two tokens ($tokens)" test -n "$ta" -a -n "$tb"
check "DLOCK_KEY is the first KEY" test "$first" = mk-b
check "DLOCK_FENCING_TOKEN is the first KEY's" test "$first_token" = "$tb"
last_token() {
    "$DLOCK_BIN" status --json "$1" | sed 's/.*"token":\([0-9]*\).*/\1/'
}
check "mk-a's token is the one mk-a granted" test "$(last_token mk-a)" = "$ta"
check "mk-b's token is the one mk-b granted" test "$(last_token mk-b)" = "$tb"
check "both free afterwards" key_gone "$REDIS_PORT" 'dlock:{mk-a}'
check "mk-b free afterwards" key_gone "$REDIS_PORT" 'dlock:{mk-b}'
expect_status 0 "one KEY: DLOCK_FENCING_TOKENS is its token" \
    "$DLOCK_BIN" run one -- sh -c \
    'test "$DLOCK_FENCING_TOKENS" = "$DLOCK_FENCING_TOKEN"'
expect_status 0 "one KEY and a COMMAND with -- in its arguments" \
    "$DLOCK_BIN" run one -- sh -c 'test "$1" = "--"' sh --

# Rollback: rb-b is held by another owner; rb-a (before it in the order)
# is taken and given back, rb-c never taken; COMMAND does not run.
eval "$("$DLOCK_BIN" acquire --export -l 30 rb-b)"
expect_status 1 "a held KEY: conflict, COMMAND not run" \
    "$DLOCK_BIN" run -n rb-c rb-a rb-b -- touch "$T/ran"
check "COMMAND did not run" test ! -e "$T/ran"
check "rb-a is not left held" key_gone "$REDIS_PORT" 'dlock:{rb-a}'
check "rb-c is not left held" key_gone "$REDIS_PORT" 'dlock:{rb-c}'
expect_status 1 "-w bounds the whole wait" \
    "$DLOCK_BIN" run -w 0.5 rb-a rb-b -- touch "$T/ran"
check "rb-a is not left held after -w" key_gone "$REDIS_PORT" 'dlock:{rb-a}'
expect_status 0 "release rb-b" "$DLOCK_BIN" release rb-b
expect_status 0 "then all three" "$DLOCK_BIN" run -n rb-c rb-a rb-b -- true

# 20 processes, three KEY sets in clashing orders. The checker holds a
# directory per KEY while COMMAND runs: mkdir fails if another COMMAND
# holds that KEY too.
crit='for k in "$@"; do mkdir "$D/held-$k" || echo "overlap on $k" >>"$D/errors"; done
sleep 0.01
for k in "$@"; do rmdir "$D/held-$k"; done
echo "$*" >>"$D/log"'
worker() {
    local i set=$1
    shift
    for ((i = 0; i < 5; i++)); do
        D=$T "$DLOCK_BIN" run -w 120 "$@" -- sh -c "$crit" sh "$@" ||
            echo "worker $set round $i: status $?" >>"$T/errors"
    done
}
: >"$T/log"
pids=()
for ((w = 0; w < 20; w++)); do
    case $((w % 3)) in
    0) spawn_bg worker "$w" a b ;;
    1) spawn_bg worker "$w" b a ;;
    2) spawn_bg worker "$w" b c ;;
    esac
    pids+=("$BG")
done
for p in "${pids[@]}"; do
    wait_pid "$p" 240 || fail "worker $p did not finish in 240 s (deadlock?)"
done
check "no overlap, no failed run" test ! -s "$T/errors"
[ ! -s "$T/errors" ] || head -5 "$T/errors" >&2
check "all 100 critical sections ran" test "$(wc -l <"$T/log")" = 100
for k in a b c; do
    check "key $k is left free" key_gone "$REDIS_PORT" "dlock:{$k}"
done

# Losing one KEY: the policy applies, the lost code comes out.
spawn_bg_err "$T/lost.err" "$DLOCK_BIN" run -l 0.6 --on-lost kill lo-a lo-b \
    -- sleep 30
pid=$BG
both_held() {
    [ "$(rcli "$REDIS_PORT" EXISTS 'dlock:{lo-a}' 'dlock:{lo-b}')" = 2 ]
}
check "both KEYs taken" wait_until 10 both_held
rcli "$REDIS_PORT" DEL 'dlock:{lo-b}' >/dev/null
wait_pid "$pid" 20
check "lost code 75 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 75
check "the message names the lost KEY" file_has "$T/lost.err" '"lo-b"'
check "lo-a is released" key_gone "$REDIS_PORT" 'dlock:{lo-a}'

# Bad KEY lists.
expect_status 64 "a KEY given twice" "$DLOCK_BIN" run a b a -- true
check "says so" file_has "$T/err" "given twice"
expect_status 64 "an empty KEY" "$DLOCK_BIN" run a '' -- true
expect_status 64 "--once-per takes one KEY" \
    "$DLOCK_BIN" run --once-per 60 a b -- true
finish
