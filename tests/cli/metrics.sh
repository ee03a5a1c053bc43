#!/usr/bin/env bash
# metrics.sh - `dlock run --metrics-file PATH` (issue 21): when run ends it
# writes the client's counters and latency histograms (acquire wait, hold,
# renewal round trip) and the exit status in Prometheus's text format,
# through a temporary file renamed over PATH. The file is parsed here and
# its numbers checked against what the run did.
. "$(dirname "$0")/common.bash"

start_redis
export DLOCK_SERVERS=$REDIS_URL
mkdir "$T/prom"
M=$T/prom/dlock.prom

# parse FILE: check the text format and print "name{labels} value" lines
# as python dict literals for the checks below.
cat >"$T/parse.py" <<'PY'
import json, re, sys
samples, types, helps = {}, {}, {}
line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# HELP "):
        helps[line.split()[2]] = True
        continue
    if line.startswith("# TYPE "):
        _, _, name, t = line.split()
        types[name] = t
        continue
    m = line_re.match(line)
    assert m, "bad line: %r" % line
    labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
    samples[(m.group(1), labels.get("le"))] = (labels, float(m.group(3)))
for name, t in types.items():
    assert name in helps, name
# Histograms: cumulative buckets, +Inf == count, and le ascending.
for name, t in types.items():
    if t != "histogram":
        continue
    les = [(float(k[1]) if k[1] != "+Inf" else float("inf"), v[1])
           for k, v in samples.items() if k[0] == name + "_bucket"]
    les.sort()
    assert len(les) == 25, (name, len(les))
    counts = [c for _, c in les]
    assert counts == sorted(counts), (name, counts)
    assert counts[-1] == samples[(name + "_count", None)][1], name
out = {"%s%s" % (k[0], "" if k[1] is None else "@" + k[1]): v[1]
       for k, v in samples.items()}
out["_locks"] = sorted({v[0]["lock"] for v in samples.values()})
out["_types"] = types
json.dump(out, open(sys.argv[2], "w"))
PY
# metric NAME: a value from the parsed file.
metric() {
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
        "$T/parsed" "$1"
}

# --- a run that holds the lock for about 1 s with a 0.3 s lease ---------------
expect_status 3 "run with --metrics-file" \
    "$DLOCK_BIN" run -l 0.3 --metrics-file "$M" job -- sh -c 'sleep 1; exit 3'
check "the file is there" test -s "$M"
check "it parses as Prometheus text" python3 "$T/parse.py" "$M" "$T/parsed"
check "every sample labelled lock=job" test "$(metric _locks)" = "['job']"
check "types: counters, histograms, gauges" eval \
    '[ "$(metric _types)" = "{'"'"'dlock_requests_total'"'"': '"'"'counter'"'"', '"'"'dlock_acquisitions_total'"'"': '"'"'counter'"'"', '"'"'dlock_busy_total'"'"': '"'"'counter'"'"', '"'"'dlock_waits_total'"'"': '"'"'counter'"'"', '"'"'dlock_wakeups_total'"'"': '"'"'counter'"'"', '"'"'dlock_renewals_total'"'"': '"'"'counter'"'"', '"'"'dlock_lost_total'"'"': '"'"'counter'"'"', '"'"'dlock_reconnects_total'"'"': '"'"'counter'"'"', '"'"'dlock_acquire_wait_seconds'"'"': '"'"'histogram'"'"', '"'"'dlock_hold_seconds'"'"': '"'"'histogram'"'"', '"'"'dlock_renewal_seconds'"'"': '"'"'histogram'"'"', '"'"'dlock_run_exit_code'"'"': '"'"'gauge'"'"', '"'"'dlock_run_end_timestamp_seconds'"'"': '"'"'gauge'"'"'}" ]'
check "one acquisition" test "$(metric dlock_acquisitions_total)" = 1.0
check "no busy, no loss" \
    test "$(metric dlock_busy_total)$(metric dlock_lost_total)" = 0.00.0
check "the exit code gauge is COMMAND's status" \
    test "$(metric dlock_run_exit_code)" = 3.0
check "one acquire in the wait histogram" \
    test "$(metric dlock_acquire_wait_seconds_count)" = 1.0
check "one hold, of at least the 1 s COMMAND slept" eval \
    'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"dlock_hold_seconds_count\"] == 1 and d[\"dlock_hold_seconds_sum\"] >= 1.0 and d[\"dlock_hold_seconds_bucket@0.5\"] == 0 and d[\"dlock_hold_seconds_bucket@2.5\"] == 1" "$T/parsed"'
check "renewals (every 0.1 s) counted and in the round-trip histogram" eval \
    'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); n=d[\"dlock_renewals_total\"]; assert n >= 3, n; assert d[\"dlock_renewal_seconds_count\"] == n, d" "$T/parsed"'
check "the end timestamp is now" eval \
    'python3 -c "import json,sys,time; d=json.load(open(sys.argv[1])); assert abs(d[\"dlock_run_end_timestamp_seconds\"] - time.time()) < 60" "$T/parsed"'
check "no temporary file left" test "$(ls "$T/prom")" = dlock.prom

# --- a run that finds the lock busy: the file says so --------------------------
rm -f "$T/held" "$T/go"
spawn_bg "$DLOCK_BIN" run job -- sh -c \
    'touch "$1/held"; i=0; while [ ! -e "$1/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done' sh "$T"
holder=$BG
wait_until 10 test -e "$T/held" || fail "the holder did not start"
expect_status 1 "run -w 0.3 while held, --metrics-file" \
    "$DLOCK_BIN" run -w 0.3 --metrics-file "$M" job -- true
touch "$T/go"
wait_pid "$holder" 20
check "parses" python3 "$T/parse.py" "$M" "$T/parsed"
check "busy attempts and a wait counted, no acquisition" eval \
    'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d[\"dlock_busy_total\"] >= 1 and d[\"dlock_waits_total\"] >= 1 and d[\"dlock_acquisitions_total\"] == 0, d" "$T/parsed"'
check "the exit code gauge is the conflict code" \
    test "$(metric dlock_run_exit_code)" = 1.0
check "no acquire recorded in the wait histogram" \
    test "$(metric dlock_acquire_wait_seconds_count)" = 0.0

# --- a lock name that needs escaping in a label ---------------------------------
expect_status 0 "a name with a quote and a backslash" \
    "$DLOCK_BIN" run --metrics-file "$M" 'a"b\c' -- true
check "parses" python3 "$T/parse.py" "$M" "$T/parsed"
check "the label value is escaped" grep -qF 'lock="a\"b\\c"' "$M"

# --- a file that cannot be written: said, the status is COMMAND's ---------------
expect_status 5 "--metrics-file in a missing directory" \
    "$DLOCK_BIN" run --metrics-file "$T/nodir/x.prom" job -- sh -c 'exit 5'
check "says why" grep -qF -- "--metrics-file $T/nodir/x.prom: cannot create" \
    "$T/err"
expect_status 64 "--metrics-file is an option of run only" \
    "$DLOCK_BIN" acquire --metrics-file "$M" job
expect_status 64 "an empty --metrics-file" \
    "$DLOCK_BIN" run --metrics-file '' job -- true

finish
