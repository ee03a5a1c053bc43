#!/usr/bin/env bash
# bench/gateway.sh [--quick] [--no-pin] BINDIR - the gateway benchmark
# (issue 30), run by bench/run (part "gateway"); prints JSON lines.
#
# BINDIR holds dlock-gateway and dlock-gateway-load (build/bench/examples).
# Starts its own loopback redis-server (tests/fixtures/redis.sh), pinned
# to CPU 0 with the gateways and the load generator on the other CPUs
# (unless --no-pin or one CPU). Every run starts fresh gateways with a
# fresh key prefix, and each dlock run comes right after the floor's run
# of the same shape (same round):
#   k1000, k10000: K requests in flight, all keys distinct, one gateway
#     (one thread), 4 keep-alive connections, --backend-ms 1; dlock's
#     gateway (--impl dlock, libdlock's event-loop API) against the floor
#     (--impl floor: the same HTTP server with the de-duplication written
#     on raw hiredis async on the same loop);
#   dup: K = 1000, 10 % duplicates, wait mode, two gateway processes on
#     the one server (the load spread over both): every duplicate must be
#     served the first result; double_processed counts keys processed
#     twice (the load generator compares processing ids).
# Each line: the load generator's numbers plus label, impl, k, round,
# client_cpu_us_per_req (the gateway processes' user + system CPU),
# redis_cpu_us_per_req (INFO cpu) and conns_per_server (the gateway's
# established connections to the server at the end of the run, per
# gateway process). GW_CMDSTATS=DIR: each run's INFO commandstats (reset
# before the run) into DIR/LABEL.txt. Rounds: full 3, quick 1, after one unrecorded
# warm-up run of each.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
quick=0 pin=1
while [ $# -gt 1 ]; do
    case $1 in
    --quick) quick=1 ;;
    --no-pin) pin=0 ;;
    *)
        echo "bench/gateway.sh: unknown option $1" >&2
        exit 2
        ;;
    esac
    shift
done
bindir=${1:?usage: bench/gateway.sh [--quick] [--no-pin] BINDIR}
gw=$bindir/dlock-gateway
load=$bindir/dlock-gateway-load
[ -x "$gw" ] && [ -x "$load" ] || {
    echo "bench/gateway.sh: no $gw or $load (libuv1-dev missing?)" >&2
    exit 1
}
if [ "$quick" = 1 ]; then
    ROUNDS=1 N1000=10000 N10000=20000 NDUP=10000
else
    ROUNDS=3 N1000=60000 N10000=100000 NDUP=40000
fi

log() { echo "bench gateway: $*" >&2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/dlock-gwbench-XXXXXX")
rdir='' gpids=()
cleanup() {
    local p
    for p in "${gpids[@]}"; do
        kill -9 "$p" 2>/dev/null || true
    done
    [ -z "$rdir" ] || "$root/tests/fixtures/redis.sh" stop "$rdir" || true
    rm -rf "$work"
}
trap cleanup EXIT

eval "$("$root/tests/fixtures/redis.sh" start --owner $$)"
rdir=$REDIS_DIR
rport=${REDIS_URL##*:}
rport=${rport%%/*}
client_pin=()
ncpu=$(nproc)
if [ "$pin" = 1 ] && [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null; then
    taskset -a -pc 0 "$REDIS_PID" >/dev/null
    client_pin=(taskset -c "1-$((ncpu - 1))")
fi

redis_cpu() {
    redis-cli -p "$rport" INFO cpu | tr -d '\r' | awk -F: '
        $1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 }
        END { printf "%.6f\n", s }'
}
# proc_cpu PID: user + system CPU seconds of PID.
proc_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); \
        printf "%.6f\n", ($12 + $13) / hz }' "/proc/$1/stat"
}

seq_id=0
# run LABEL IMPL K N DUP NGATEWAYS: one measured run; prints its line.
run() {
    local label=$1 impl=$2 k=$3 n=$4 dup=$5 ng=$6 i addr targets=() out
    local c0=() r0 r1 cpu conns=0
    seq_id=$((seq_id + 1))
    local prefix="gwb$$-$seq_id"
    gpids=()
    for ((i = 0; i < ng; i++)); do
        "${client_pin[@]}" "$gw" --impl "$impl" --listen 127.0.0.1:0 \
            -s "$REDIS_URL" --backend-ms 1 --prefix "$prefix" ${GW_EXTRA:-} \
            >"$work/gw$i.out" 2>"$work/gw$i.err" &
        gpids+=($!)
    done
    for ((i = 0; i < ng; i++)); do
        for _ in $(seq 100); do
            grep -q listening "$work/gw$i.out" 2>/dev/null && break
            sleep 0.05
        done
        addr=$(sed -n 's/^listening //p' "$work/gw$i.out")
        [ -n "$addr" ] || {
            log "$label: gateway did not start: $(cat "$work/gw$i.err")"
            exit 1
        }
        targets+=(-t "$addr")
    done
    for ((i = 0; i < ng; i++)); do
        c0+=("$(proc_cpu "${gpids[$i]}")")
    done
    [ -z "${GW_CMDSTATS:-}" ] || redis-cli -p "$rport" CONFIG RESETSTAT \
        >/dev/null
    r0=$(redis_cpu)
    local rc=0
    out=$("${client_pin[@]}" "$load" "${targets[@]}" -c 4 -k "$k" -n "$n" \
        --dup-pct "$dup" --run "$prefix") || rc=$?
    r1=$(redis_cpu)
    [ -z "${GW_CMDSTATS:-}" ] || redis-cli -p "$rport" INFO commandstats |
        tr -d '\r' >"$GW_CMDSTATS/$label.txt"
    cpu=0
    for ((i = 0; i < ng; i++)); do
        cpu=$(awk -v a="$cpu" -v b="$(proc_cpu "${gpids[$i]}")" \
            -v c="${c0[$i]}" 'BEGIN { printf "%.6f", a + b - c }')
        conns=$((conns + $(ss -Htnp state established \
            "( dport = :$rport )" 2>/dev/null |
            grep -c "pid=${gpids[$i]}," || true)))
    done
    for ((i = 0; i < ng; i++)); do
        kill -TERM "${gpids[$i]}"
        wait "${gpids[$i]}" || true
    done
    gpids=()
    if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
        log "$label: load generator failed (exit $rc)"
        exit 1
    fi
    printf '%s\n' "$out" | sed -e "s/^{/{\"label\":\"$label\",\"mode\":\
\"gateway\",\"impl\":\"$impl\",\"k\":$k,\"gateways\":$ng,/" \
        -e "s/}$/,\"client_cpu_us_per_req\":$(awk -v c="$cpu" -v n="$n" \
            'BEGIN { printf "%.3f", c * 1e6 / n }'),\"redis_cpu_us_per_req\":\
$(awk -v a="$r0" -v b="$r1" -v n="$n" 'BEGIN { printf "%.3f", (b - a) \
* 1e6 / n }'),\"conns_per_server\":$(awk -v c="$conns" -v g="$ng" \
            'BEGIN { printf "%.2f", c / g }')}/"
    log "$label: $(printf '%s' "$out" | sed 's/.*"throughput":\([0-9.]*\).*"decision_p99_us":\([0-9]*\).*/\1 req\/s, decision p99 \2 us/')"
}

# Warm-up, not recorded: the server loads the scripts, the allocators and
# caches settle (the first short run of a fresh server was several times
# slower than the next in quick mode).
run warmup_floor floor 1000 5000 0 1 >/dev/null
run warmup_dlock dlock 1000 5000 0 1 >/dev/null
for r in $(seq 1 "$ROUNDS"); do
    for k in 1000 10000; do
        n=$N1000
        [ "$k" = 10000 ] && n=$N10000
        run "gw_floor_k$k@$r" floor "$k" "$n" 0 1
        run "gw_dlock_k$k@$r" dlock "$k" "$n" 0 1
    done
    # The gateway's default is the string layout (one script a request:
    # dlock_loop_fenced_set_release); the hash layout at 1,000 in flight.
    GW_EXTRA="--layout hash" run "gw_dlockhash_k1000@$r" dlock 1000 \
        "$N1000" 0 1
    run "gw_floor_dup@$r" floor 1000 "$NDUP" 10 2
    run "gw_dlock_dup@$r" dlock 1000 "$NDUP" 10 2
done
