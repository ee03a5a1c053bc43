#!/usr/bin/env bash
# semaphore.sh - `dlock run --limit N` and `--shared` (issue 19): 8
# workers of 6 rounds each under `--limit 2` are never more than 2 inside
# (the server counts them) and 2 are reached; another limit is refused
# (usage status), `dlock limit` changes it; the lock on a semaphore's name
# is refused, and so is a name whose key holds a value dlock did not write
# (said so, the value untouched); acquire/release of a permit across
# commands; status shows
# limit, holders and waiters; `--shared` runs overlap, and a plain run
# (the writer) waits for them.
. "$(dirname "$0")/common.bash"

# not_in FILE TEXT: FILE does not contain TEXT.
not_in() {
    ! grep -qF -- "$2" "$1"
}

start_redis
export DLOCK_SERVERS=$REDIS_URL
workers=8
rounds=6

# Inside: count ourselves on the server, keep the highest count seen.
inside='n=$(redis-cli -p "$2" INCR test:inside); echo "$n" >>"$1/seen";
sleep 0.05; redis-cli -p "$2" DECR test:inside >/dev/null'

worker() {
    local i
    for ((i = 0; i < rounds; i++)); do
        "$DLOCK_BIN" run --limit 2 -w 120 sem -- sh -c "$inside" sh "$T" \
            "$REDIS_PORT" || echo "worker $1 round $i: status $?" >>"$T/errors"
    done
}

: >"$T/seen"
pids=()
for ((w = 1; w <= workers; w++)); do
    spawn_bg worker "$w"
    pids+=("$BG")
done
for p in "${pids[@]}"; do
    wait_pid "$p" 240 || fail "worker $p did not finish in 240 s"
done
check "no dlock run --limit failed" test ! -s "$T/errors"
[ ! -s "$T/errors" ] && true || head -5 "$T/errors" >&2
check "one entry per round ($(wc -l <"$T/seen"))" \
    test "$(wc -l <"$T/seen")" = $((workers * rounds))
most=$(sort -n "$T/seen" | tail -1)
check "never more than 2 inside (most seen: $most)" test "$most" -le 2
check "2 were inside at once" test "$most" = 2

expect_status 64 "another limit is refused" \
    "$DLOCK_BIN" run --limit 3 sem -- true
check "the message names the stored limit" file_has "$T/err" "has limit 2"
expect_status 64 "the lock on a semaphore's name is refused" \
    "$DLOCK_BIN" run -n sem -- true
check "the message says it is a semaphore" file_has "$T/err" "semaphore"
# Issue 29 item 4: a name whose key holds a value dlock did not write is
# none of dlock's kinds: each form says so (not "a semaphore"), and the
# value is left as it was.
rcli "$REDIS_PORT" SET 'dlock:{foreign}' hello >/dev/null
rcli "$REDIS_PORT" RPUSH 'dlock:{flist}' a >/dev/null
rcli "$REDIS_PORT" ZADD 'dlock:{fzset}' 1 a >/dev/null
for k in foreign flist fzset; do
    for form in "" "--shared" "--limit 2"; do
        # shellcheck disable=SC2086
        expect_status 64 "a lock on $k (a value not dlock's) ${form:-plain}" \
            "$DLOCK_BIN" run -n $form "$k" -- true
        check "$k ${form:-plain}: says it is not dlock's" \
            file_has "$T/err" "not dlock's"
        check "$k ${form:-plain}: does not call it a semaphore" \
            not_in "$T/err" "a semaphore"
    done
done
check "the string is left as it was" \
    test "$(rcli "$REDIS_PORT" GET 'dlock:{foreign}')" = hello
check "the list is left as it was" \
    test "$(rcli "$REDIS_PORT" LRANGE 'dlock:{flist}' 0 -1)" = a
check "the zset is left as it was" \
    test "$(rcli "$REDIS_PORT" ZRANGE 'dlock:{fzset}' 0 -1 WITHSCORES | tr '\n' ' ')" = "a 1 "
check "no fence hash was made for them" \
    test "$(rcli "$REDIS_PORT" EXISTS 'dlock:{foreign}:f' 'dlock:{flist}:f' 'dlock:{fzset}:f')" = 0
expect_status 64 "--limit 0 is a usage error" \
    "$DLOCK_BIN" run --limit 0 sem -- true
expect_status 64 "--limit with --shared is a usage error" \
    "$DLOCK_BIN" run --limit 2 --shared sem -- true
expect_status 0 "dlock limit changes the limit" "$DLOCK_BIN" limit sem 3
expect_status 0 "the new limit is accepted" \
    "$DLOCK_BIN" run --limit 3 sem -- true

# A permit across commands, and the status of the semaphore.
expect_status 0 "acquire --limit" "$DLOCK_BIN" acquire --limit 3 sem
owner=$(cut -d' ' -f1 "$T/out")
expect_status 0 "status of a semaphore" "$DLOCK_BIN" status sem
check "status: the limit" file_has "$T/out" "limit:    3"
check "status: one holder" file_has "$T/out" "holders:  1"
check "status: the permit's owner" file_has "$T/out" "$owner"
check "status: waiters" file_has "$T/out" "waiters:  0 queued"
expect_status 0 "status --json of a semaphore" "$DLOCK_BIN" status --json sem
check "json: kind and limit" file_has "$T/out" '"kind":"semaphore","limit":3'
expect_status 0 "release of the permit" "$DLOCK_BIN" release sem --owner "$owner"
expect_status 75 "a second release: not held" \
    "$DLOCK_BIN" release sem --owner "$owner"

# A holder killed -9 frees its permit when its lease ends.
"$DLOCK_BIN" limit sem 1 || fail "dlock limit sem 1"
spawn_bg "$DLOCK_BIN" run --limit 1 -l 1 sem -- sleep 60
holder=$BG
# A live holder's score is its deadline (server ms); the limit member "#"
# scores at most 10^6 and released holders' tombstones are negative, so
# ZCARD would count those too. (A function: wait_until re-runs it.)
live_permit() {
    test "$(rcli "$REDIS_PORT" ZCOUNT 'dlock:{sem}' '(1000000' +inf)" -ge 1
}
wait_until 10 live_permit ||
    fail "the holder did not get its permit"
kill -9 "$holder"
expect_status 1 "the permit is still held right after the kill" \
    "$DLOCK_BIN" run -n --limit 1 sem -- true
expect_status 0 "after its lease the permit is free" \
    "$DLOCK_BIN" run -w 10 --limit 1 sem -- true

# Read locks: two readers at once; a writer waits for both.
spawn_bg "$DLOCK_BIN" run --shared rw -- sh -c "touch $T/r1; sleep 3; touch $T/r1.done"
r1=$BG
spawn_bg "$DLOCK_BIN" run --shared rw -- sh -c "touch $T/r2; sleep 3; touch $T/r2.done"
r2=$BG
wait_until 10 test -e "$T/r1" -a -e "$T/r2" ||
    fail "two readers were not inside together"
expect_status 1 "a writer cannot get in while they read" \
    "$DLOCK_BIN" run -n rw -- true
expect_status 0 "status shows the readers" "$DLOCK_BIN" status rw
check "status: 2 readers" file_has "$T/out" "readers:  2"
check "status: held shared, not free" \
    file_has "$T/out" "state:    held shared by 2 readers"
expect_status 0 "status --json with readers" "$DLOCK_BIN" status --json rw
check "status --json: the readers counted" file_has "$T/out" '"readers":2'
expect_status 0 "the writer gets in after them" \
    "$DLOCK_BIN" run -w 20 rw -- test -e "$T/r1.done" -a -e "$T/r2.done"
wait_pid "$r1" 20
wait_pid "$r2" 20
finish
