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
#      file - the flock(1) use case across processes.
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

demo_library
demo_cli

say "demo: OK - nothing lost under the lock"
