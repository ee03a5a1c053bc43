#!/usr/bin/env bash
# encoding.sh - names and values that are not UTF-8, or hold control
# bytes, in the tool's machine-readable and terminal output (issue 29
# items 17 and 18). A key is any bytes but NUL; `status --json`, `list
# --json`, `leader --json` and the --metrics-file labels must stay valid
# UTF-8 (one such lock must not make a strict consumer reject the whole
# listing): a byte outside a valid UTF-8 sequence is written as the
# character of the same number (U+0080..U+00FF, its Latin-1 reading), in
# JSON as a \u00XX escape; valid UTF-8 passes as it is. `leader` prints a
# value's control bytes as '?', as status and list do (one line per
# change of `leader --watch`, nothing reaching the terminal).
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL

key=$(printf 'latin\351\377')
ukey=$(printf 'caf\303\251')

# strict_json FILE [FIELD VALUE]: every line of FILE is UTF-8 and one
# JSON object; with FIELD and VALUE (\u escapes allowed), one of them has
# "FIELD": VALUE.
strict_json() {
    python3 - "$@" <<'PY'
import json, sys
data = open(sys.argv[1], 'rb').read()
text = data.decode('utf-8')  # strict: raises on a bad byte
objs = [json.loads(l) for l in text.splitlines() if l.strip()]
if len(sys.argv) > 3:
    want = json.loads('"' + sys.argv[3] + '"')
    if not any(o.get(sys.argv[2]) == want for o in objs):
        sys.exit('no object with %s %r in %r' % (sys.argv[2], want, objs))
PY
}

# not_esc FILE: FILE holds no ESC byte.
not_esc() {
    ! grep -q "$(printf '\033')" "$1"
}

expect_status 0 "acquire a key that is not UTF-8" \
    "$DLOCK_BIN" acquire -l 60 "$key"
expect_status 0 "acquire a UTF-8 key" "$DLOCK_BIN" acquire -l 60 "$ukey"
expect_status 0 "status --json of the key" "$DLOCK_BIN" status --json "$key"
cp "$T/out" "$T/status.json"
check "status --json is UTF-8 JSON, the bytes as U+00E9 U+00FF" \
    strict_json "$T/status.json" key 'latin\u00e9\u00ff'
expect_status 0 "status --json of the UTF-8 key" \
    "$DLOCK_BIN" status --json "$ukey"
check "a UTF-8 name passes as it is" grep -q "\"key\":\"$ukey\"" "$T/out"
expect_status 0 "list --json" "$DLOCK_BIN" list --json '*'
cp "$T/out" "$T/list.json"
check "list --json is UTF-8 JSON with both names" \
    strict_json "$T/list.json" name 'latin\u00e9\u00ff'
check "...and the UTF-8 one" strict_json "$T/list.json" name 'caf\u00e9'

M=$T/metrics.prom
expect_status 0 "run --metrics-file on such a key" \
    "$DLOCK_BIN" run --metrics-file "$M" "$key-r" -- true
check "the metrics file is UTF-8" python3 -c '
import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$M"
check "its label is the name read as Latin-1 for the bad bytes" \
    grep -q "lock=\"$(printf 'latin\303\251\303\277-r')\"" "$M"

# A leader's value: not UTF-8, with a newline and an ESC sequence.
val=$(printf 'v\351 a\nb \033[2J')
spawn_bg "$DLOCK_BIN" elect --value "$val" ld -- sleep 30
ld=$BG
has_ld() { "$DLOCK_BIN" leader ld >/dev/null; }
check "ld has a leader" wait_until 10 has_ld
expect_status 0 "leader --json with such a value" \
    "$DLOCK_BIN" leader --json ld
cp "$T/out" "$T/leader.json"
check "leader --json is UTF-8 JSON" strict_json "$T/leader.json"
check "the value's bytes as escapes" python3 - "$T/leader.json" <<'PY'
import json, sys
o = json.loads(open(sys.argv[1], 'rb').read().decode('utf-8'))
sys.exit(0 if o['value'] == 'v\u00e9 a\nb \x1b[2J' else 'value %r' % o['value'])
PY
expect_status 0 "leader prints the value" "$DLOCK_BIN" leader ld
check "on one line" test "$(wc -l <"$T/out")" = 1
check "no ESC reaches the terminal" not_esc "$T/out"
check "control bytes as '?'" grep -q 'a?b ?\[2J' "$T/out"
kill -TERM "$ld"
wait_pid "$ld" 10

finish
