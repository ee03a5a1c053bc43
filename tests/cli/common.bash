# common.bash - helpers sourced by the tests/cli/*.sh tests of the dlock tool.
#
# CTest runs each test as `bash tests/cli/NAME.sh` with DLOCK_BIN (the tool)
# and DLOCK_SRC (the repository root) in the environment. A test calls
# `check` / `expect_status` for every assertion: a failed one prints
# "FAIL: ..." and the test goes on, then `finish` exits non-zero if any
# failed. Every process a test starts is bounded by `timeout` and killed on
# exit; servers come from tests/fixtures/redis.sh and are stopped on exit.
# (Not named *.sh so that CTest does not run it as a test.)

set -u

: "${DLOCK_BIN:?DLOCK_BIN must be the path of the dlock tool}"
: "${DLOCK_SRC:?DLOCK_SRC must be the repository root}"
# A test must not pick up the caller's configuration.
unset DLOCK_SERVERS DLOCK_PASSWORD DLOCK_USER DLOCK_CACERT DLOCK_PREFIX \
    DLOCK_OWNER DLOCK_KEY DLOCK_FENCING_TOKEN DLOCK_WAIT_REPLICAS \
    DLOCK_WAIT_REPLICAS_TIMEOUT DLOCK_LOCK_DELAY DLOCK_SENTINEL_USER \
    DLOCK_SENTINEL_PASSWORD DLOCK_FENCE_RETENTION DLOCK_LAYOUT

FIXTURE=$DLOCK_SRC/tests/fixtures/redis.sh
TEST_NAME=$(basename "$0" .sh)
T=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-$TEST_NAME-XXXXXX")
failures=0
checks=0
SERVER_DIRS=()
BG_PIDS=()

cleanup() {
    local p d
    for p in "${BG_PIDS[@]}"; do
        kill -9 "$p" 2>/dev/null
    done
    for d in "${SERVER_DIRS[@]}"; do
        bash "$FIXTURE" stop "$d" >/dev/null 2>&1
    done
    rm -rf "$T"
}
trap cleanup EXIT

# Print a failure (with the seconds since the test started: slow machines
# explain some) and count it.
fail() {
    echo "FAIL: [${SECONDS}s] $*" >&2
    failures=$((failures + 1))
}

# check DESCRIPTION COMMAND...: the command must succeed.
check() {
    local what=$1
    shift
    checks=$((checks + 1))
    if "$@"; then
        echo "ok: $what"
    else
        fail "$what"
    fi
}

# expect_status EXPECTED DESCRIPTION COMMAND...: run COMMAND (bounded by a
# 60 s timeout) and compare its exit status. Its stdout and stderr are kept
# in $T/out and $T/err and shown on failure.
expect_status() {
    local want=$1 what=$2 got t0 took
    shift 2
    checks=$((checks + 1))
    t0=$(now_ms)
    timeout -k 5 60 "$@" >"$T/out" 2>"$T/err"
    got=$?
    took=$(($(now_ms) - t0))
    if [ "$got" = "$want" ]; then
        echo "ok: $what (status $got)"
    else
        fail "$what: expected status $want, got $got (after $took ms)"
        echo "  command: $*" >&2
        sed 's/^/  stdout: /' "$T/out" >&2
        sed 's/^/  stderr: /' "$T/err" >&2
    fi
}

# The tool, bounded.
dl() {
    timeout -k 5 60 "$DLOCK_BIN" "$@"
}

# start_redis [fixture options]: start a server owned by this test; sets
# REDIS_* as the fixture exports them. Aborts the test on failure.
start_redis() {
    local exports
    exports=$(bash "$FIXTURE" start --owner $$ "$@") || {
        echo "FATAL: could not start redis-server" >&2
        exit 1
    }
    eval "$exports"
    SERVER_DIRS+=("$REDIS_DIR")
}

# rcli PORT ARGS...: redis-cli against a test server.
rcli() {
    local port=$1
    shift
    timeout 10 redis-cli -h 127.0.0.1 -p "$port" "$@"
}

# take_on_all NAME PORT...: `dlock acquire "${S[@]}" -l 60 NAME` (its
# output in $T/out) until every server at PORT... holds it, clearing it
# everywhere before each try: a Redlock acquire returns once a majority
# granted, so a server that answered late may not hold it, and a test
# that starts from "held on all" must make it so. Fails after 20 tries.
take_on_all() {
    local name=$1 i port all
    shift
    for i in $(seq 20); do
        for port in "$@"; do
            rcli "$port" DEL "dlock:{$name}" >/dev/null
        done
        "$DLOCK_BIN" acquire "${S[@]}" -l 60 "$name" >"$T/out" || continue
        all=1
        for port in "$@"; do
            [ "$(rcli "$port" EXISTS "dlock:{$name}")" = 1 ] || all=0
        done
        [ "$all" = 1 ] && return 0
    done
    return 1
}

# key_gone PORT KEY: the Redis key does not exist on the server at PORT.
key_gone() {
    [ "$(rcli "$1" EXISTS "$2")" = 0 ]
}

# wait_until SECONDS COMMAND...: poll every 50 ms until COMMAND succeeds.
# Returns 1 on timeout.
wait_until() {
    local deadline
    deadline=$(($(date +%s%N) / 1000000 + ${1%.*} * 1000))
    shift
    until "$@"; do
        [ $(($(date +%s%N) / 1000000)) -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# now_ms: milliseconds since the epoch.
now_ms() {
    echo $(($(date +%s%N) / 1000000))
}

# spawn_bg COMMAND...: start COMMAND in the background, remember it for the
# cleanup, and set BG to its pid.
spawn_bg() {
    "$@" &
    BG=$!
    BG_PIDS+=("$BG")
}

# spawn_bg_err FILE COMMAND...: spawn_bg with COMMAND's stderr in FILE.
spawn_bg_err() {
    local file=$1
    shift
    "$@" 2>"$file" &
    BG=$!
    BG_PIDS+=("$BG")
}

# running PID: the process exists and is not a zombie.
running() {
    local state
    state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ]
}

# wait_pid PID SECONDS: wait for a background child and set WAIT_STATUS;
# kill it and return 1 if it takes longer.
wait_pid() {
    local pid=$1 deadline
    deadline=$(($(now_ms) + $2 * 1000))
    # A zombie still answers kill -0: running() tells them apart.
    while running "$pid"; do
        if [ "$(now_ms)" -ge "$deadline" ]; then
            kill -9 "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            WAIT_STATUS=timeout
            return 1
        fi
        sleep 0.05
    done
    wait "$pid"
    WAIT_STATUS=$?
    return 0
}

# file_has FILE TEXT: FILE exists and contains TEXT.
file_has() {
    [ -f "$1" ] && grep -q -- "$2" "$1"
}

# "${CLOSED_EXEC[@]}" COMMAND...: run COMMAND with only fds 0, 1 and 2 open,
# so that any other fd its children have came from COMMAND itself.
CLOSED_EXEC=(bash -c 'for fd in /proc/$$/fd/*; do
    fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec "$@"' bash)

# The exit status of the test.
finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$TEST_NAME: $failures of $checks checks FAILED" >&2
        exit 1
    fi
    echo "$TEST_NAME: all $checks checks passed"
    exit 0
}
