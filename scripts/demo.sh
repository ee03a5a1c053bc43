#!/usr/bin/env bash
# scripts/demo.sh - THE demo command (README): see dlock keep concurrent
# processes from losing updates, on a fresh Debian 12 machine.
#
# 1. installs what is missing (scripts/deps.sh),
# 2. builds a Release tree in build/release (tests off: quicker),
# 3. starts a throwaway redis-server on a free loopback port in a temp dir
#    (tests/fixtures/redis.sh; stopped again at exit, whatever happens),
# 4. runs the demos:
#    - demo_library: examples/counter - NPROC processes increment one
#      counter in Redis NITER times each (read, then write back + 1: not
#      atomic) - first without the lock (updates get lost; shown, not
#      checked), then under the lock (nothing may be lost);
#    - demo_cli: when the tool has been built (build/release/cli/dlock),
#      8 concurrent `dlock run` workers increment a counter in a shared
#      file - the flock(1) use case across processes;
#    - demo_gateway: when the gateway has been built (libuv present:
#      build/release/examples/dlock-gateway, examples/gateway), two
#      gateway processes on the one server get 4 concurrent requests for
#      each of 3 Idempotency-Keys, spread over both: each key is
#      processed once (one processing id), every duplicate gets the same
#      body, and a later request gets the stored one.
# Exits 0 only if every checked demo lost nothing. NPROC/NITER/CLI_ROUNDS
# in the environment change the sizes.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
build=$root/build/release
nproc=${NPROC:-8}
niter=${NITER:-200}
cli_workers=8
cli_rounds=${CLI_ROUNDS:-25}

say() {
    printf '\n== %s\n' "$*"
}

die() {
    printf '\ndemo: FAILED: %s\n' "$*" >&2
    exit 1
}

say "dependencies (scripts/deps.sh)"
bash scripts/deps.sh || die "could not install the dependencies"

say "building (Release, build/release)"
mkdir -p "$root/build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
    >"$root/build/release.configure.log" 2>&1 ||
    {
        cat "$root/build/release.configure.log" >&2
        die "cmake configure failed"
    }
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" >"$root/build/release.build.log" 2>&1 ||
    {
        tail -n 40 "$root/build/release.build.log" >&2
        die "build failed (log: build/release.build.log)"
    }
echo "built: $build"

say "starting a throwaway redis-server"
work=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo-XXXXXX")
REDIS_DIR=
cleanup() {
    [ -z "$REDIS_DIR" ] || bash tests/fixtures/redis.sh stop "$REDIS_DIR" || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
eval "$(bash tests/fixtures/redis.sh start --owner $$)" ||
    die "could not start redis-server"
echo "redis-server pid $REDIS_PID at $REDIS_URL (dir $REDIS_DIR)"

# The library through examples/counter.c.
demo_library() {
    local counter=$build/examples/counter
    [ -x "$counter" ] || die "$counter was not built"

    say "$nproc processes x $niter increments WITHOUT a lock (for comparison)"
    timeout 300 "$counter" -u "$REDIS_URL" "$nproc" "$niter" ||
        die "the unlocked run did not complete"

    say "$nproc processes x $niter increments under the dlock lock"
    timeout 600 "$counter" "$REDIS_URL" "$nproc" "$niter" ||
        die "examples/counter lost updates or failed (see above)"
}

# The tool: `dlock run` around a read-modify-write of a file.
demo_cli() {
    local dlock=$build/cli/dlock pids=() p total w
    [ -x "$dlock" ] || return 0
    say "$cli_workers concurrent 'dlock run' workers x $cli_rounds increments of a file"
    echo 0 >"$work/counter"
    : >"$work/errors"
    for ((w = 1; w <= cli_workers; w++)); do
        (
            for ((i = 0; i < cli_rounds; i++)); do
                DLOCK_SERVERS=$REDIS_URL timeout 120 "$dlock" run -w 120 \
                    demo-file -- sh -c \
                    'n=$(cat "$1"); sleep 0.002; echo $((n + 1)) >"$1"' \
                    sh "$work/counter" ||
                    echo "worker $w round $i: exit $?" >>"$work/errors"
            done
        ) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    total=$(cat "$work/counter")
    echo "dlock run: counter file says $total, expected $((cli_workers * cli_rounds))"
    if [ -s "$work/errors" ]; then
        head -n 5 "$work/errors" >&2
        die "some dlock run invocations failed"
    fi
    [ "$total" = $((cli_workers * cli_rounds)) ] ||
        die "dlock run lost $((cli_workers * cli_rounds - total)) updates"
    echo "dlock run: nothing lost"
}

# The de-duplication gateway (issue 30): libdlock's event-loop API in an
# HTTP server on libuv.
demo_gateway() {
    local gw=$build/examples/dlock-gateway i k addr addrs=() gpids=() pids=()
    local ids n
    [ -x "$gw" ] || return 0
    say "the de-duplication gateway: 2 gateway processes, 3 keys x 4 concurrent requests"
    for i in 0 1; do
        "$gw" --listen 127.0.0.1:0 -s "$REDIS_URL" --backend-ms 300 \
            --prefix demo >"$work/gw$i.out" 2>"$work/gw$i.err" &
        gpids+=($!)
    done
    for i in 0 1; do
        for _ in $(seq 100); do
            grep -q listening "$work/gw$i.out" 2>/dev/null && break
            sleep 0.05
        done
        addr=$(sed -n 's/^listening //p' "$work/gw$i.out")
        [ -n "$addr" ] || die "gateway $i did not start: $(cat "$work/gw$i.err")"
        addrs+=("$addr")
        echo "gateway $i (pid ${gpids[$i]}) listening on $addr"
    done
    # One request on its own connection: bash's /dev/tcp, answer to FILE.
    ask() {
        local addr=$1 key=$2 file=$3
        exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
        printf 'POST /orders HTTP/1.1\r\nHost: demo\r\nIdempotency-Key: %s\r\nConnection: close\r\nContent-Length: 0\r\n\r\n' \
            "$key" >&3
        timeout 30 cat <&3 >"$file"
        exec 3>&-
    }
    n=0
    for k in order-1 order-2 order-3; do
        for i in 0 1 2 3; do
            ask "${addrs[$((i % 2))]}" "$k" "$work/resp-$k-$i" &
            pids+=($!)
            n=$((n + 1))
        done
    done
    for i in "${pids[@]}"; do wait "$i" || true; done
    for k in order-1 order-2 order-3; do
        for i in 0 1 2 3; do
            printf '%s via gateway %d: %s  %s\n' "$k" $((i % 2)) \
                "$(head -n 1 "$work/resp-$k-$i" | tr -d '\r')" \
                "$(tail -n 1 "$work/resp-$k-$i")"
        done
        ids=$(sed -n 's/.*"processing_id":"\([^"]*\)".*/\1/p' \
            "$work"/resp-"$k"-* | sort -u | wc -l)
        [ "$ids" = 1 ] || die "$k was processed $ids times"
        [ "$(grep -l '^HTTP/1.1 200' "$work"/resp-"$k"-* | wc -l)" = 4 ] ||
            die "$k: not every duplicate got 200"
    done
    ask "${addrs[1]}" order-1 "$work/later"
    echo "later, order-1 again: $(tail -n 1 "$work/later")"
    [ "$(tail -n 1 "$work/later")" = "$(tail -n 1 "$work/resp-order-1-0")" ] ||
        die "a later request did not get the stored result"
    for i in "${gpids[@]}"; do kill -TERM "$i"; wait "$i" || true; done
    echo "gateway: every key processed once, duplicates served its result"
}

demo_library
demo_cli
demo_gateway

say "demo: OK - nothing lost under the lock, nothing processed twice"
