#!/usr/bin/env bash
# check.sh - `dlock check KEY [TOKEN]` (issue 21): exit 0 when TOKEN is the
# fencing token of KEY's current hold, the lost code otherwise: the
# current token, an older one, an unknown (newer) one, a released lock, a
# never-taken name; readers' and permits' own tokens, live or released;
# $DLOCK_FENCING_TOKEN inside `dlock run`; Redlock needs
# a majority; bad input is a usage error.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

expect_status 0 "acquire" "$DLOCK_BIN" acquire -l 60 res
read -r owner tok <"$T/out"
expect_status 0 "check with the current token" "$DLOCK_BIN" check res "$tok"
check "says nothing" test ! -s "$T/err"
expect_status 75 "check with an older token" "$DLOCK_BIN" check res $((tok - 1))
expect_status 75 "check -v with an older token" \
    "$DLOCK_BIN" check -v res $((tok - 1))
check "-v says older" grep -qF "is older than $tok" "$T/err"
expect_status 75 "check with an unknown (newer) token" \
    "$DLOCK_BIN" check res $((tok + 1))
expect_status 9 "-L 9" "$DLOCK_BIN" check -L 9 res $((tok + 1))
expect_status 75 "check a name never taken" "$DLOCK_BIN" check never 1

# After the release, and after the next holder took it.
"$DLOCK_BIN" release --owner "$owner" res
expect_status 75 "check -v after the release" "$DLOCK_BIN" check -v res "$tok"
check "-v says free" grep -qF "the lock is free" "$T/err"
expect_status 0 "the next holder" "$DLOCK_BIN" acquire -l 60 res
read -r owner2 tok2 <"$T/out"
expect_status 75 "the first token no longer checks" \
    "$DLOCK_BIN" check res "$tok"
expect_status 0 "the new token does" "$DLOCK_BIN" check res "$tok2"
# Expiry ends the hold too.
rcli "$P" PEXPIRE 'dlock:{res}' 1 >/dev/null
sleep 0.05
expect_status 75 "an expired hold no longer checks" \
    "$DLOCK_BIN" check res "$tok2"

# Inside dlock run: TOKEN defaults to DLOCK_FENCING_TOKEN.
expect_status 0 "check inside run, token from the environment" \
    "$DLOCK_BIN" run inrun -- "$DLOCK_BIN" check inrun
expect_status 0 "run, printing its token" \
    "$DLOCK_BIN" run inrun -- sh -c 'echo "$DLOCK_FENCING_TOKEN"'
rtok=$(cat "$T/out")
expect_status 75 "a token kept after run ended no longer checks" \
    "$DLOCK_BIN" check inrun "$rtok"
expect_status 75 "...also from DLOCK_FENCING_TOKEN" \
    env DLOCK_FENCING_TOKEN="$rtok" "$DLOCK_BIN" check inrun

# Issue 29 item 11: readers and permits. Each reader and permit has its
# own token: check vouches for a live one's, never for one whose hold has
# ended (before, the lock's last token checked as long as any reader was
# left, and a permit's token gave WRONGTYPE, 69).
expect_status 0 "reader A" "$DLOCK_BIN" acquire --shared -l 60 rwc
read -r rowner_a rtok_a <"$T/out"
expect_status 0 "reader B" "$DLOCK_BIN" acquire --shared -l 60 rwc
read -r rowner_b rtok_b <"$T/out"
expect_status 0 "reader A's token checks" "$DLOCK_BIN" check rwc "$rtok_a"
expect_status 0 "reader B's token checks" "$DLOCK_BIN" check rwc "$rtok_b"
"$DLOCK_BIN" release --owner "$rowner_b" rwc
expect_status 75 "reader B's token, B released, A still reads" \
    "$DLOCK_BIN" check rwc "$rtok_b"
expect_status 0 "reader A's token still checks" "$DLOCK_BIN" check rwc "$rtok_a"
"$DLOCK_BIN" release --owner "$rowner_a" rwc
expect_status 75 "reader A's token once A released" \
    "$DLOCK_BIN" check rwc "$rtok_a"
expect_status 0 "permit 1" "$DLOCK_BIN" acquire --limit 2 -l 60 semc
read -r powner_1 ptok_1 <"$T/out"
expect_status 0 "permit 2" "$DLOCK_BIN" acquire --limit 2 -l 60 semc
read -r powner_2 ptok_2 <"$T/out"
expect_status 0 "permit 1's token checks" "$DLOCK_BIN" check semc "$ptok_1"
expect_status 0 "permit 2's token checks" "$DLOCK_BIN" check semc "$ptok_2"
"$DLOCK_BIN" release --owner "$powner_2" semc
expect_status 75 "permit 2's token once released" \
    "$DLOCK_BIN" check semc "$ptok_2"
expect_status 0 "permit 1's token still checks" \
    "$DLOCK_BIN" check semc "$ptok_1"
"$DLOCK_BIN" release --owner "$powner_1" semc
expect_status 75 "permit 1's token once released" \
    "$DLOCK_BIN" check semc "$ptok_1"

# Bad input.
expect_status 64 "no token and no DLOCK_FENCING_TOKEN" "$DLOCK_BIN" check res
expect_status 64 "token 0" "$DLOCK_BIN" check res 0
expect_status 64 "token not a number" "$DLOCK_BIN" check res 12ab
expect_status 64 "token above 2^53" "$DLOCK_BIN" check res 9007199254740993
expect_status 64 "an extra argument" "$DLOCK_BIN" check res 1 2

# Redlock: the token must hold on a majority.
start_redis
B_DIR=$REDIS_DIR B_PORT=$REDIS_PORT B_URL=$REDIS_URL
start_redis
C_PORT=$REDIS_PORT C_URL=$REDIS_URL
S=(-s "redis://127.0.0.1:$P" -s "$B_URL" -s "$C_URL")
check "Redlock acquire, held on all three" take_on_all rl "$P" "$B_PORT" "$C_PORT"
read -r _ rtok <"$T/out"
expect_status 0 "Redlock check" "$DLOCK_BIN" check "${S[@]}" rl "$rtok"
rcli "$P" DEL 'dlock:{rl}' >/dev/null
expect_status 0 "held on 2 of 3: still the holder's" \
    "$DLOCK_BIN" check "${S[@]}" rl "$rtok"
rcli "$B_PORT" DEL 'dlock:{rl}' >/dev/null
expect_status 75 "held on 1 of 3: not a majority" \
    "$DLOCK_BIN" check "${S[@]}" rl "$rtok"
bash "$FIXTURE" stop "$B_DIR" >/dev/null 2>&1
bash "$FIXTURE" stop "$REDIS_DIR" >/dev/null 2>&1
expect_status 69 "two of three servers down: no quorum" \
    "$DLOCK_BIN" check "${S[@]}" rl "$rtok"

finish
