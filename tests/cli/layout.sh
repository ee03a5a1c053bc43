#!/usr/bin/env bash
# layout.sh - `--layout string` and DLOCK_LAYOUT (issue 31): the lock is
# one string key; acquire, status, check, extend and release read it; a
# hash-layout invocation (the default) on a name held in the string
# layout, and the other way round, is refused with a usage error naming
# the layout (never both hold); run works; read locks are refused; bad
# values are usage errors.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

expect_status 0 "acquire --layout string" \
    "$DLOCK_BIN" acquire --layout string --fence-retention 0 -l 60 sl
read -r owner tok <"$T/out"
check "the lock key is a string" \
    test "$(rcli "$P" TYPE 'dlock:{sl}')" = string
check "no fence hash without retention" \
    test "$(rcli "$P" EXISTS 'dlock:{sl}:f')" = 0
expect_status 0 "status" "$DLOCK_BIN" status sl
check "status shows the owner" grep -qF "$owner" "$T/out"
expect_status 0 "check with its token" "$DLOCK_BIN" check sl "$tok"
expect_status 64 "a hash-layout acquire is refused" "$DLOCK_BIN" acquire -n sl
check "...naming the string layout" grep -qF "string layout" "$T/err"
expect_status 64 "...also when it would wait" "$DLOCK_BIN" acquire -w 1 sl
expect_status 1 "DLOCK_LAYOUT=string: busy" \
    env DLOCK_LAYOUT=string "$DLOCK_BIN" acquire -n sl
expect_status 0 "extend" env DLOCK_LAYOUT=string \
    "$DLOCK_BIN" extend --owner "$owner" -l 120 sl
check "the lease grew" test "$(rcli "$P" PTTL 'dlock:{sl}')" -gt 60000
expect_status 0 "release" env DLOCK_LAYOUT=string \
    "$DLOCK_BIN" release --fence-retention 0 --owner "$owner" sl
check "nothing left" test "$(rcli "$P" EXISTS 'dlock:{sl}' 'dlock:{sl}:f')" = 0

# The other way round: a hash-layout hold refuses a string-layout acquire.
expect_status 0 "a hash-layout hold" "$DLOCK_BIN" acquire -l 60 hl
read -r howner htok <"$T/out"
expect_status 64 "a string-layout acquire is refused" \
    "$DLOCK_BIN" acquire --layout string -w 1 hl
check "...naming the hash layout" grep -qF "hash layout" "$T/err"
expect_status 0 "release the hash hold" \
    "$DLOCK_BIN" release --owner "$howner" hl

expect_status 0 "run --layout string" \
    "$DLOCK_BIN" run --layout string rl -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
check "run printed a token" grep -qE '^[0-9]+$' "$T/out"
expect_status 64 "read locks are refused" \
    env DLOCK_LAYOUT=string "$DLOCK_BIN" acquire --shared -n rw
expect_status 64 "--layout bogus" "$DLOCK_BIN" acquire --layout bogus x
expect_status 64 "DLOCK_LAYOUT=bogus" \
    env DLOCK_LAYOUT=bogus "$DLOCK_BIN" acquire -n x

# Redlock over three servers: the string on every one (waits are notify:
# no fair queue there), busy for another, check, release.
start_redis
B_PORT=$REDIS_PORT B_URL=$REDIS_URL
start_redis
C_PORT=$REDIS_PORT C_URL=$REDIS_URL
S=(-s "redis://127.0.0.1:$P" -s "$B_URL" -s "$C_URL")
expect_status 0 "Redlock acquire --layout string" \
    "$DLOCK_BIN" acquire "${S[@]}" --layout string -l 60 rs
read -r rowner rtok <"$T/out"
# strings_on TYPE N: at least N of the three servers have dlock:{rs} of
# Redis type TYPE (a Redlock step returns once a majority answered).
strings_on() {
    local port n=0
    for port in "$P" "$B_PORT" "$C_PORT"; do
        [ "$(rcli "$port" TYPE 'dlock:{rs}')" = "$1" ] && n=$((n + 1))
    done
    [ "$n" -ge "$2" ]
}
check "a string on a majority" strings_on string 2
expect_status 1 "Redlock string: busy" \
    "$DLOCK_BIN" acquire "${S[@]}" --layout string -n rs
expect_status 0 "Redlock string: check" \
    "$DLOCK_BIN" check "${S[@]}" rs "$rtok"
expect_status 0 "Redlock string: release" \
    "$DLOCK_BIN" release "${S[@]}" --layout string --owner "$rowner" rs
check "released on every server" wait_until 5 strings_on none 3
finish
