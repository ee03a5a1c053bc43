#!/usr/bin/env bash
# bench/gateway_instr.sh IMPL BINDIR [N [GATEWAY ARGS...]] - Redis's
# user-space instructions per gateway request, counted by valgrind's
# callgrind (issue 30): steady on a shared machine without hardware
# counters, where INFO cpu scatters by 2x between runs. Not part of
# bench/run (valgrind slows the server ~50x: throughput means nothing
# here).
#
# Starts a redis-server under callgrind on a free loopback port in its own
# temp dir, one dlock-gateway --impl IMPL (dlock or floor) from BINDIR
# (build/bench/examples), a 2,000-request warm-up with
# dlock-gateway-load (K = 1,000, distinct keys), then N (default 3,000)
# measured requests with the counters dumped before and after
# (callgrind_control). Prints one line: IMPL, the gateway arguments, N,
# instructions per request, and INFO commandstats' calls of the measured
# run. Needs valgrind (callgrind_control) and redis-server.
set -euo pipefail
impl=${1:?usage: bench/gateway_instr.sh IMPL BINDIR [N [ARGS...]]}
bin=${2:?usage: bench/gateway_instr.sh IMPL BINDIR [N [ARGS...]]}
n=${3:-3000}
shift $(($# < 3 ? $# : 3))
extra=("$@")
d=$(mktemp -d "${TMPDIR:-/tmp}/dlock-gwinstr-XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
vp='' gp=''
cleanup() {
    [ -z "$gp" ] || kill -9 "$gp" 2>/dev/null || true
    [ -z "$vp" ] || kill -9 "$vp" 2>/dev/null || true
    rm -rf "$d"
}
trap cleanup EXIT
(cd "$d" && exec valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' \
    --appendonly no) >"$d/log" 2>&1 &
vp=$!
for _ in $(seq 150); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.2
done
# run1 N PREFIX: one gateway, N requests.
run1() {
    "$bin/dlock-gateway" --impl "$impl" --listen 127.0.0.1:0 \
        -s "redis://127.0.0.1:$port" --backend-ms 1 --prefix "$2" \
        "${extra[@]}" >"$d/gw.out" 2>"$d/gw.err" &
    gp=$!
    for _ in $(seq 100); do
        grep -q listening "$d/gw.out" 2>/dev/null && break
        sleep 0.1
    done
    "$bin/dlock-gateway-load" -t "$(sed -n 's/^listening //p' "$d/gw.out")" \
        -c 4 -k 1000 -n "$1" --dup-pct 0 --run "$2" >"$d/load.$2" 2>&1
    kill -TERM "$gp"
    wait "$gp" || true
    gp=''
}
run1 2000 warm
redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
callgrind_control -d "$vp" >/dev/null 2>&1
run1 "$n" meas
callgrind_control -d "$vp" >/dev/null 2>&1
calls=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\).*/\1=\2/p' |
    grep -v '^info\|^config' | tr '\n' ' ')
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$vp" || true
vp=''
last=$(ls "$d"/cg.out.* | sort -t. -k3 -n | tail -n1)
ir=$(sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$last" | head -n1)
echo "$impl ${extra[*]} n=$n redis_instructions_per_req=$((ir / n)) $calls"
