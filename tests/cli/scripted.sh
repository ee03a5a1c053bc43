#!/usr/bin/env bash
# scripted.sh - a lock held across several commands of a script:
# `dlock acquire` prints an owner handle (or --export assignments) and
# exits holding the lock; `dlock extend` and `dlock release` act for that
# owner (--owner or DLOCK_OWNER), with the lost code once its lease ran
# out; `dlock status` (plain and --json) shows holder, reentry, TTL, token,
# and warns of a server setting that weakens the lock.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT

# --- status of a lock never taken -----------------------------------------
expect_status 0 "status of a free lock" "$DLOCK_BIN" status never
check "status: free" grep -q '^state: *free' "$T/out"
check "status: token 0" grep -q '^token: *0' "$T/out"
expect_status 0 "status --json of a free lock" "$DLOCK_BIN" status --json never
check "json: held false, owner null" \
    grep -q '"held":false,"owner":null' "$T/out"
check "json: no warnings for a default server" grep -q '"warnings":\[\]' "$T/out"
check "status: no warning line" eval '! grep -q "^warning:" "$T/out"'

# --- a server setting that weakens the lock is shown -------------------------
rcli "$P" CONFIG SET maxmemory-policy allkeys-lru >/dev/null
expect_status 0 "status with an evicting server" "$DLOCK_BIN" status never
check "status warns of the eviction policy" \
    grep -q '^warning: .*maxmemory-policy is allkeys-lru' "$T/out"
expect_status 0 "status --json with an evicting server" \
    "$DLOCK_BIN" status --json never
check "json: the warning" grep -q '"warnings":\[".*allkeys-lru' "$T/out"
if command -v python3 >/dev/null; then
    check "json with a warning: valid JSON" \
        eval 'python3 -m json.tool "$T/out" >/dev/null'
fi
rcli "$P" CONFIG SET maxmemory-policy noeviction >/dev/null

# --- acquire / status / release ---------------------------------------------
expect_status 0 "acquire" "$DLOCK_BIN" acquire -l 20 job
read -r owner token <"$T/out"
check "acquire prints OWNER TOKEN ($owner $token)" \
    eval '[[ "$owner" =~ ^[0-9a-f]{32}: ]] && [[ "$token" =~ ^[1-9][0-9]*$ ]]'
check "the lock is held after acquire exited" \
    test "$(rcli "$P" EXISTS 'dlock:{job}')" = 1
expect_status 1 "a second acquire -n conflicts" "$DLOCK_BIN" acquire -n job
expect_status 9 "acquire -n -E 9" "$DLOCK_BIN" acquire -n -E 9 job
expect_status 1 "acquire -w 0.2 gives up" "$DLOCK_BIN" acquire -w 0.2 job
# A first try slower than -w (the server sleeps for a second, from before
# dlock starts) ends the wait too; it once became an endless wait.
rcli "$P" DEBUG SLEEP 1 >/dev/null &
sleeper=$!
sleep 0.3
expect_status 1 "-w 0.2 used up by a slow first try: gives up" \
    "$DLOCK_BIN" acquire -w 0.2 job
wait "$sleeper"
# --timeout (and DLOCK_TIMEOUT) bound each command: against a server
# asleep for 1.5 s, 0.3 s fails with 69 and runs nothing, where the
# default (2 s) would have waited the sleep out.
rm -f "$T/ran"
rcli "$P" DEBUG SLEEP 1.5 >/dev/null &
sleeper=$!
sleep 0.2
expect_status 69 "--timeout 0.3 against a sleeping server: 69" \
    "$DLOCK_BIN" run --timeout 0.3 free1 -- touch "$T/ran"
expect_status 69 "DLOCK_TIMEOUT=0.3 against a sleeping server: 69" \
    env DLOCK_TIMEOUT=0.3 "$DLOCK_BIN" run free2 -- touch "$T/ran"
check "nothing ran with the short timeout" test ! -e "$T/ran"
wait "$sleeper"
# The server ran each timed-out acquire when it woke, and the client's
# give-back right after it (same connection, so in order): free2 is free
# again, not held for its 30 s lease by a client that has exited.
expect_status 0 "the same once the server is awake (free2 given back)" \
    env DLOCK_TIMEOUT=0.3 "$DLOCK_BIN" run -w 5 free2 -- touch "$T/ran"
check "...and it ran" test -e "$T/ran"
expect_status 1 "run -n conflicts with it" "$DLOCK_BIN" run -n job -- true

expect_status 0 "status of a held lock" "$DLOCK_BIN" status job
check "status: held" grep -q '^state: *held' "$T/out"
check "status: owner" grep -qF "owner:    $owner" "$T/out"
check "status: reentry 1" grep -q '^reentry: *1$' "$T/out"
check "status: token $token" grep -q "^token: *$token\$" "$T/out"
check "status: a TTL" grep -Eq '^ttl: *[0-9.]+ (s|ms)$' "$T/out"
expect_status 0 "status --json" "$DLOCK_BIN" status job --json
check "json: held, owner, token" grep -qF \
    "\"key\":\"job\",\"held\":true,\"owner\":\"$owner\",\"reentry\":1" "$T/out"
check "json: token $token" grep -qF "\"token\":$token," "$T/out"
check "json: ttl_ms at most 20000" \
    eval 'ttl=$(grep -o "\"ttl_ms\":[0-9]*" "$T/out" | cut -d: -f2);
          [ "${ttl:-0}" -gt 0 ] && [ "$ttl" -le 20000 ]'
if command -v python3 >/dev/null; then
    check "json: valid JSON" eval 'python3 -m json.tool "$T/out" >/dev/null'
fi

expect_status 75 "release by a wrong owner: lost code" \
    "$DLOCK_BIN" release --owner "0123456789abcdef0123456789abcdef:1" job
check "the lock is still held" test "$(rcli "$P" EXISTS 'dlock:{job}')" = 1
expect_status 0 "extend" "$DLOCK_BIN" extend --owner "$owner" -l 60 job
pttl=$(rcli "$P" PTTL 'dlock:{job}')
check "extend set the lease to 60 s (PTTL $pttl)" \
    test "$pttl" -gt 20000 -a "$pttl" -le 60000
expect_status 0 "release" "$DLOCK_BIN" release --owner "$owner" job
check "the lock is gone" test "$(rcli "$P" EXISTS 'dlock:{job}')" = 0
expect_status 75 "a second release: lost code" \
    "$DLOCK_BIN" release --owner "$owner" job
expect_status 75 "extend after release: lost code" \
    "$DLOCK_BIN" extend --owner "$owner" -l 5 job
expect_status 9 "release -L 9 when not held" \
    "$DLOCK_BIN" release -L 9 --owner "$owner" job

# --- --export and DLOCK_OWNER ----------------------------------------------
key="it's a \"key\" \$HOME"
expect_status 0 "acquire --export" "$DLOCK_BIN" acquire --export -l 20 "$key"
exports=$(cat "$T/out")
check "--export output evaluates" eval "$exports"
check "DLOCK_KEY round-trips through eval" test "${DLOCK_KEY:-}" = "$key"
check "DLOCK_OWNER is set" test -n "${DLOCK_OWNER:-}"
check "DLOCK_FENCING_TOKEN is above the earlier token" \
    test "${DLOCK_FENCING_TOKEN:-0}" -gt "$token"
check "they are exported" eval 'env | grep -q "^DLOCK_OWNER="'
expect_status 0 "extend with DLOCK_OWNER" "$DLOCK_BIN" extend -l 30 "$key"
expect_status 0 "status shows DLOCK_OWNER" "$DLOCK_BIN" status "$key"
check "...as the owner" grep -qF "owner:    $DLOCK_OWNER" "$T/out"
expect_status 0 "release with DLOCK_OWNER" "$DLOCK_BIN" release "$key"
expect_status 0 "the lock is free again" "$DLOCK_BIN" run -n "$key" -- true
unset DLOCK_KEY DLOCK_OWNER DLOCK_FENCING_TOKEN

# --- a lease that runs out ----------------------------------------------------
expect_status 0 "acquire -l 0.5" "$DLOCK_BIN" acquire -l 0.5 short
read -r owner _ <"$T/out"
wait_until 10 key_gone "$P" 'dlock:{short}' ||
    fail "the 0.5 s lease did not run out"
expect_status 75 "extend after the lease ran out: lost code" \
    "$DLOCK_BIN" extend --owner "$owner" -l 5 short
check "...and says so" grep -q 'not held by' "$T/err"
expect_status 75 "release after the lease ran out: lost code" \
    "$DLOCK_BIN" release --owner "$owner" short
expect_status 0 "acquire after expiry" "$DLOCK_BIN" acquire -n -l 5 short
read -r owner2 _ <"$T/out"
check "a new owner" test "$owner2" != "$owner"
expect_status 75 "the old owner cannot release the new holder's lock" \
    "$DLOCK_BIN" release --owner "$owner" short
check "the new holder still has it" \
    test "$(rcli "$P" EXISTS 'dlock:{short}')" = 1
expect_status 0 "the new owner releases" \
    "$DLOCK_BIN" release --owner "$owner2" short

# --- acquire waits; -v; a full stdout --------------------------------------
expect_status 0 "acquire" "$DLOCK_BIN" acquire -l 3 wt
expect_status 0 "acquire -w 20 waits until the 3 s lease ends" \
    "$DLOCK_BIN" acquire -v -w 20 -l 5 wt
check "acquire -v says it waited" grep -q 'waiting for "wt"' "$T/err"
check "acquire -v says it acquired" grep -q 'acquired "wt"' "$T/err"
read -r owner _ <"$T/out"
"$DLOCK_BIN" release --owner "$owner" wt
if [ -w /dev/full ]; then
    expect_status 74 "acquire with stdout on /dev/full" \
        sh -c '"$1" acquire -l 30 full >/dev/full' sh "$DLOCK_BIN"
    check "...released the lock it could not report" \
        test "$(rcli "$P" EXISTS 'dlock:{full}')" = 0
fi

finish
