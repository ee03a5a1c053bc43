#!/usr/bin/env bash
# list.sh - `dlock list [PATTERN] [--json]` (issue 21): every held lock
# whose name matches PATTERN, with its holder, found by SCAN on every
# server: many keys, glob patterns, names with blanks and braces, the
# lock's other keys (fence, info) and released locks never listed, JSON
# lines parsed, a prefix with glob characters, and Redlock (a lock held on
# only some servers is listed once, with a server down too).
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
P=$REDIS_PORT
host=$(hostname)

# A lock held as a shell script holds it (acquire, no renewal).
hold() {
    "$DLOCK_BIN" acquire -l 60 --label "label of $1" "$1" >"$T/owner.$2"
}

expect_status 0 "list with nothing held" "$DLOCK_BIN" list
check "prints nothing" test ! -s "$T/out"

# --- many locks ---------------------------------------------------------------
# 1200 locks (more than SCAN's COUNT of 1000, so several SCAN calls), put
# in place by redis-cli as a library client without holder info would,
# plus a few held by dlock itself with holder info.
for i in $(seq 1 1200); do
    printf 'HSET dlock:{bulk:%04d} owner-%d 1\nPEXPIRE dlock:{bulk:%04d} 60000\n' \
        "$i" "$i" "$i"
done | rcli "$P" >/dev/null
hold 'job:a' 1
hold 'job:b' 2
hold 'job:{braced}' 3
hold 'job with blanks' 4
hold 'other' 5
# A released lock leaves its fence and info keys: never listed.
read -r owner _ <"$T/owner.5"
"$DLOCK_BIN" release --owner "$owner" other

expect_status 0 "list" "$DLOCK_BIN" list
check "1204 locks listed" test "$(wc -l <"$T/out")" = 1204
check "each bulk lock once" \
    test "$(grep -c '^bulk:[0-9]\{4\}  held by owner owner-[0-9]* (no holder info), token 0, lease [0-9]* s left$' "$T/out")" = 1200
check "sorted by name" eval 'sort -c "$T/out"'
check "job:a with its holder" \
    grep -qF "job:a  held by $host pid $$ \`label of job:a\` for " "$T/out"
check "a name with braces" grep -qF 'job:{braced}  held by' "$T/out"
check "a name with blanks" grep -qF 'job with blanks  held by' "$T/out"
check "a released lock is not listed" eval '! grep -q "^other" "$T/out"'
check "no fence or info key listed" eval '! grep -Eq ":(f|i)  " "$T/out"'

# --- patterns -----------------------------------------------------------------
expect_status 0 "list 'job:*'" "$DLOCK_BIN" list 'job:*'
check "'job:*': job:a, job:b, job:{braced}" \
    test "$(cut -d' ' -f1 "$T/out" | tr '\n' ' ')" = "job:a job:b job:{braced} "
expect_status 0 "list 'bulk:11??'" "$DLOCK_BIN" list 'bulk:11??'
check "'bulk:11??': 100 locks" test "$(wc -l <"$T/out")" = 100
expect_status 0 "list 'job:[ab]'" "$DLOCK_BIN" list 'job:[ab]'
check "'job:[ab]': 2 locks" test "$(wc -l <"$T/out")" = 2
expect_status 0 "list 'job:\\{*'" "$DLOCK_BIN" list 'job:\{*'
check "an escaped brace" test "$(cut -d' ' -f1 "$T/out")" = 'job:{braced}'
expect_status 0 "list with a pattern nothing matches" "$DLOCK_BIN" list 'nope*'
check "...prints nothing" test ! -s "$T/out"
expect_status 0 "list -v" "$DLOCK_BIN" list -v 'job:*'
check "-v counts" grep -qF '3 held locks match "job:*"' "$T/err"

# --- --json -------------------------------------------------------------------
expect_status 0 "list --json 'job*'" "$DLOCK_BIN" list --json 'job*'
cp "$T/out" "$T/json"
check "one valid JSON object per lock, with holder fields" python3 - "$T/json" "$host" "$$" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = [r["name"] for r in rows]
assert names == ["job with blanks", "job:a", "job:b", "job:{braced}"], names
for r in rows:
    assert r["kind"] == "lock" and r["reentry"] == 1, r
    assert r["token"] > 0 and 0 < r["ttl_ms"] <= 60000, r
    h = r["holder"]
    assert h["host"] == sys.argv[2] and h["pid"] == int(sys.argv[3]), h
    assert h["label"] == "label of " + r["name"] and h["held_ms"] >= 0, h
    assert r["nodes_holding"] == 1
PY
expect_status 0 "list --json 'bulk:0001'" "$DLOCK_BIN" list --json 'bulk:0001'
check "json: a lock without holder info has holder null" \
    grep -qF '"name":"bulk:0001","owner":"owner-1","reentry":1' "$T/out"
check "json: holder null" grep -qF '"holder":null' "$T/out"

# --- a prefix with glob characters --------------------------------------------
expect_status 0 "acquire with prefix 'a*b'" \
    "$DLOCK_BIN" acquire --prefix 'a*b' -l 60 pfx
rcli "$P" HSET 'axxb:{decoy}' x 1 >/dev/null
rcli "$P" PEXPIRE 'axxb:{decoy}' 60000 >/dev/null
expect_status 0 "list --prefix 'a*b'" "$DLOCK_BIN" list --prefix 'a*b'
check "only the prefix's own locks" test "$(cut -d' ' -f1 "$T/out")" = pfx

expect_status 64 "list with two patterns" "$DLOCK_BIN" list a b
expect_status 64 "list -n is not an option of list" "$DLOCK_BIN" list -n

# --- Redlock: listed once, also when held on some servers only ---------------
start_redis
B_DIR=$REDIS_DIR B_PORT=$REDIS_PORT B_URL=$REDIS_URL
start_redis
C_DIR=$REDIS_DIR C_PORT=$REDIS_PORT C_URL=$REDIS_URL
S=(-s "redis://127.0.0.1:$P" -s "$B_URL" -s "$C_URL")
check "Redlock acquire, held on all three" take_on_all rl:one "$P" "$B_PORT" "$C_PORT"
# Held on the second and third servers only (the first lost it).
rcli "$P" DEL 'dlock:{rl:one}' >/dev/null
expect_status 0 "Redlock list 'rl:*'" "$DLOCK_BIN" list "${S[@]}" 'rl:*'
check "listed once" test "$(wc -l <"$T/out")" = 1
check "with its holder" grep -qF "rl:one  held by $host pid $$" "$T/out"
expect_status 0 "Redlock list --json" "$DLOCK_BIN" list --json "${S[@]}" 'rl:*'
check "json: held on 2 nodes" grep -qF '"nodes_holding":2}' "$T/out"
bash "$FIXTURE" stop "$C_DIR" >/dev/null 2>&1
expect_status 0 "Redlock list with a server down" \
    "$DLOCK_BIN" list "${S[@]}" 'rl:*'
check "still listed" grep -qF "rl:one  held by" "$T/out"
bash "$FIXTURE" stop "$B_DIR" >/dev/null 2>&1
expect_status 69 "Redlock list with two of three down: no quorum" \
    "$DLOCK_BIN" list "${S[@]}" 'rl:*'

finish
