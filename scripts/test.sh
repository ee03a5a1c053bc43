#!/usr/bin/env bash
# scripts/test.sh - THE test command (README; CI runs it via .ci/run).
#
# Stages, in order; each one is reported, and a failed stage does not stop
# the later ones that do not depend on it:
#   deps      scripts/deps.sh (installs what a fresh Debian 12 lacks)
#   commands  scripts/check-commands.py: every command the scripts call
#             is installed by deps.sh or part of a minimal Debian 12
#   asan      configure + build build/asan with -DDLOCK_WERROR=ON
#             -DDLOCK_SANITIZE=ON (ASan+UBSan), then the whole CTest suite
#             (unit, integration over every transport, cli) with -j2
#   tsan      configure build/tsan with -DDLOCK_TSAN=ON, build what the
#             tests labelled `tsan` need, then run them (ctest -L tsan).
#             Convention, set in
#             tests/CMakeLists.txt: integration tests whose file is named
#             threads_*.c; over tcp only: lock_*.c, waiting.c, watchdog.c,
#             harness_selftest.c and the other threaded tests listed there
#             (the topology tests that start no thread of their own are
#             left to ASan).
#             A test opts in by its file name; nothing else to do.
#   valgrind  configure + build build/plain (Debug, no sanitizer), then the
#             unit tests and it_lock_core (tcp) under valgrind memcheck
#   python    the Python binding (bindings/python), after build plain:
#             its install command (pip, no index, into a temp dir), then
#             its pytest suite with Debian's /usr/bin/python3 against
#             build/plain's libdlock.so (an ASan-built library cannot be
#             loaded into a Python without ASan); pytest's exit 5 (no
#             tests ran) fails it like any other non-zero exit
#   format    clang-format --dry-run --Werror on the tracked *.c/*.h of
#             src/ include/ cli/ tests/ examples/ bench/ (.clang-format)
#   package   scripts/package.sh: cpack -G DEB, contents, dpkg -i into an
#             empty root, the installed tool and library run
#   chaos     tests/chaos/run --quick, if it exists and is executable
#   bench     bench/run --quick, if it exists and is executable
#
# Every CTest test counts on its own; every other stage counts as one.
# The last line is exactly "N passed, N failed". Exit status 0 only when
# nothing failed.
#
# Order: longest first (the COST of each slow test, tests/CMakeLists.txt),
# so that -j2 does not end with one long test alone.
#
# Parallelism: -j2 (CI has 2 cores). Integration tests start their own
# redis-servers and fork processes; each test has its own servers on free
# ports, so two at a time do not collide, and more would only oversubscribe
# the cores and stretch timing-sensitive tests.
#
# Environment: JOBS (default 2) for builds and ctest; DLOCK_TEST_SKIP_TSAN=1
# to skip the TSan stage (local quick runs; CI never sets it).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
jobs=${JOBS:-2}
passed=0
failed=0
failures=()
ctest_prefix=()
t_start=$SECONDS

say() {
    printf '\n=== %s\n' "$*"
}

ok() {
    passed=$((passed + 1))
    echo "--- ok: $1"
}

fail() {
    failed=$((failed + 1))
    failures+=("$1")
    echo "--- FAILED: $1"
}

# Run "$@" as stage NAME (counted as one).
stage() {
    local name=$1 t0=$SECONDS
    shift
    say "$name"
    if "$@"; then
        ok "$name ($((SECONDS - t0)) s)"
        return 0
    fi
    fail "$name ($((SECONDS - t0)) s)"
    return 1
}

# Run ctest in build dir $1 with extra args; count each test. A ctest run
# that reports no tests counts nothing; one that dies without a summary
# counts as one failure.
run_ctest() {
    local dir=$1 name=$2 log total nfail rc t0=$SECONDS
    shift 2
    say "$name"
    log=$(mktemp)
    (cd "$dir" && "${ctest_prefix[@]}" ctest --output-on-failure \
        -j"$jobs" "$@") 2>&1 |
        tee "$log"
    rc=${PIPESTATUS[0]}
    if grep -q 'No tests were found' "$log"; then
        echo "--- $name: no tests"
    elif summary=$(grep -Eo '[0-9]+ tests failed out of [0-9]+' "$log" |
        tail -n1) && [ -n "$summary" ]; then
        nfail=$(echo "$summary" | awk '{print $1}')
        total=$(echo "$summary" | awk '{print $NF}')
        passed=$((passed + total - nfail))
        failed=$((failed + nfail))
        if [ "$nfail" -gt 0 ]; then
            while read -r line; do
                failures+=("$name: $line")
            done < <(sed -n '/The following tests FAILED/,$p' "$log" |
                grep -E '^\s+[0-9]+ - ' | sed 's/^\s*//')
        fi
        echo "--- $name: $((total - nfail))/$total passed" \
            "($((SECONDS - t0)) s)"
    elif [ "$rc" -ne 0 ]; then
        fail "$name (ctest exit $rc, no summary)"
    fi
    rm -f "$log"
}

configure_build() {
    local dir=$1
    shift
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DDLOCK_WERROR=ON \
        "$@" >"$dir.configure.log" 2>&1 || {
        cat "$dir.configure.log"
        return 1
    }
    cmake --build "$dir" -j"$jobs"
}

# The TSan build: configure, then only what `ctest -L tsan` runs (the
# library, the harness and the tsan-labelled test programs; the other
# tests never run there). Every target when the list cannot be read.
tsan_build() {
    local dir=$1 targets
    shift
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DDLOCK_WERROR=ON \
        "$@" >"$dir.configure.log" 2>&1 || {
        cat "$dir.configure.log"
        return 1
    }
    # The names (`ctest -N`: the programs are not built yet) map to
    # targets: it.NAME.TRANSPORT is it_NAME; any other name, everything.
    targets=$( (cd "$dir" && ctest -N -L tsan) 2>/dev/null |
        sed -n 's/^ *Test *#[0-9]*: //p' |
        awk -F. '$1 == "it" && NF == 3 { print "it_" $2; next }
            { bad = 1 } END { if (bad) print "-" }' | sort -u)
    if [ -z "$targets" ] || grep -qx -- - <<<"$targets"; then
        echo "tsan: no list of the tsan tests; building every target"
        cmake --build "$dir" -j"$jobs"
        return
    fi
    echo "tsan: building" $targets
    # shellcheck disable=SC2086
    cmake --build "$dir" -j"$jobs" --target $targets
}

format_check() {
    local files=()
    if ! command -v clang-format >/dev/null; then
        echo "clang-format not installed"
        return 1
    fi
    if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
        mapfile -t files < <(git -C "$root" ls-files -- \
            'src/*.[ch]' 'include/*.[ch]' 'cli/*.[ch]' 'tests/*.[ch]' \
            'examples/*.[ch]' 'bench/*.[ch]')
    else
        mapfile -t files < <(find src include cli tests examples bench \
            -name '*.[ch]' 2>/dev/null | sort)
    fi
    [ ${#files[@]} -gt 0 ] || return 0
    local bad=() f
    for f in "${files[@]}"; do
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
    done
    echo "${#files[@]} files checked, ${#bad[@]} not formatted"
    [ ${#bad[@]} -eq 0 ] && return 0
    # The first offender in full, then the list: enough to act on without
    # drowning the log.
    clang-format --dry-run --Werror "${bad[0]}" 2>&1 | head -n 30
    printf 'not clang-formatted: %s\n' "${bad[@]}"
    echo "fix with: clang-format -i ${bad[*]}"
    return 1
}

# Sanitizer settings: stop at the first UB report with a stack; keep
# leak detection on (LSan is part of ASan here).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

mkdir -p build

stage deps bash scripts/deps.sh
stage commands python3 scripts/check-commands.py

if stage "build asan" configure_build build/asan -DDLOCK_SANITIZE=ON; then
    run_ctest build/asan "ctest asan"
fi

if [ "${DLOCK_TEST_SKIP_TSAN:-0}" = 1 ]; then
    say "tsan: skipped (DLOCK_TEST_SKIP_TSAN=1)"
elif stage "build tsan" tsan_build build/tsan -DDLOCK_TSAN=ON; then
    # TSan's shadow layout breaks with a large mmap randomisation (some
    # newer kernels); run without ASLR there (children inherit it).
    bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)
    if [ "$bits" -gt 28 ] && setarch "$(uname -m)" -R true 2>/dev/null; then
        echo "tsan: mmap_rnd_bits=$bits, running without ASLR"
        ctest_prefix=(setarch "$(uname -m)" -R)
    fi
    run_ctest build/tsan "ctest tsan" -L tsan
    ctest_prefix=()
fi

# memcheck: what ASan does not see (reads of uninitialised memory). A
# plain Debug build; the unit tests and the core lock test (tcp).
valgrind_check() {
    local dir=$1 t rc=0
    for t in "$dir"/tests/unit_* "$dir"/tests/it_lock_core; do
        [ -x "$t" ] || continue
        echo "valgrind: $(basename "$t")"
        if ! DLOCK_TEST_TRANSPORT=tcp timeout 600 valgrind -q \
            --error-exitcode=99 --leak-check=full \
            --errors-for-leak-kinds=definite "$t" >"$t.valgrind.log" 2>&1; then
            rc=1
            tail -n 40 "$t.valgrind.log"
        fi
    done
    return $rc
}
# The Python binding: the README's install command works (pip, no index,
# into a temp dir rather than the system), and its tests pass against the
# plain build's shared library. The suite starts its own redis-servers.
python_check() {
    local lib=$root/$1/libdlock.so t rc=0
    [ -e "$lib" ] || {
        echo "python: $lib not built"
        return 1
    }
    t=$(mktemp -d)
    if ! PIP_ROOT_USER_ACTION=ignore /usr/bin/python3 -m pip install -q \
        --no-index --no-build-isolation --target "$t/site" \
        "$root/bindings/python" >"$t/pip.log" 2>&1 ||
        ! (cd "$t" && DLOCK_LIBRARY=$lib PYTHONPATH=$t/site \
            /usr/bin/python3 -c 'import dlock.redis_compat, dlock.aio, dlock
print("python: installed", dlock.__file__, dlock.library_version())'); then
        echo "python: the install command failed"
        cat "$t/pip.log"
        rc=1
    fi
    rm -rf "$t"
    DLOCK_LIBRARY=$lib timeout 900 /usr/bin/python3 -m pytest -q \
        -p no:cacheprovider "$root/bindings/python/tests" || {
        local st=$?
        [ "$st" = 5 ] && echo "python: pytest ran no tests"
        rc=1
    }
    return $rc
}
if stage "build plain" configure_build build/plain; then
    stage valgrind valgrind_check build/plain
    stage python python_check build/plain
fi

stage format format_check
stage package bash scripts/package.sh

if [ -x tests/chaos/run ]; then
    stage "chaos --quick" timeout 900 tests/chaos/run --quick
else
    say "chaos: tests/chaos/run not there yet, skipped"
fi
if [ -x bench/run ]; then
    stage "bench --quick" timeout 600 bench/run --quick
else
    say "bench: bench/run not there yet, skipped"
fi

say "summary ($((SECONDS - t_start)) s)"
for f in "${failures[@]}"; do
    echo "FAILED: $f"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
