#!/usr/bin/env bash
# usage.sh - the command line of the dlock tool: --help, --version, status
# 64 with a message naming the problem for every kind of bad usage, and
# status 69 when no server can be reached.
. "$(dirname "$0")/common.bash"

# usage_error DESCRIPTION TEXT ARGS...: status 64 and TEXT on stderr.
usage_error() {
    local what=$1 text=$2
    shift 2
    expect_status 64 "$what" "$DLOCK_BIN" "$@"
    if ! grep -q -- "$text" "$T/err"; then
        fail "$what: stderr does not name the problem ('$text')"
        sed 's/^/  stderr: /' "$T/err" >&2
    fi
}

expect_status 0 "--help" "$DLOCK_BIN" --help
check "--help prints the usage on stdout" grep -q '^Usage: dlock run' "$T/out"
expect_status 0 "run --help" "$DLOCK_BIN" run --help
check "run --help prints the usage" grep -q 'conflict-exit-code' "$T/out"
expect_status 0 "-V" "$DLOCK_BIN" -V
check "-V prints the version" grep -Eq '^dlock [0-9]+\.[0-9]+\.[0-9]+' "$T/out"
expect_status 0 "status --version" "$DLOCK_BIN" status --version

usage_error "no arguments" "missing command"
usage_error "unknown command" "unknown command 'frobnicate'" frobnicate
usage_error "run without KEY" "missing KEY" run
usage_error "run without COMMAND" "missing COMMAND" run k
usage_error "run with only --" "missing COMMAND" run k --
usage_error "option after KEY" "options go before KEY" run k -w 5 -- true
usage_error "unknown short option" "unknown option '-x'" run -x k true
usage_error "unknown long option" "unknown option '--frob'" run --frob k true
usage_error "missing option value" "option '-w' needs a value" run -w
usage_error "missing long option value" "option '--grace' needs a value" \
    run --grace
usage_error "missing value of --owner" \
    "option '--owner' needs a value" release k --owner
usage_error "empty KEY" "KEY must not be empty" run '' true
usage_error "KEY of 513 bytes" "longer than 512" \
    run "$(printf 'k%.0s' $(seq 1 513))" true
usage_error "--timeout 0" "--timeout '0': must be more than 0" \
    run --timeout 0 k true
usage_error "--timeout abc" "--timeout 'abc'" status --timeout abc k
expect_status 64 "DLOCK_TIMEOUT=abc" env DLOCK_TIMEOUT=abc "$DLOCK_BIN" run k true
check "DLOCK_TIMEOUT=abc is named" grep -q "DLOCK_TIMEOUT 'abc'" "$T/err"
for bad in abc -1 1e999 0x10 inf nan '' ' 5' 5s 1.2.3 1e 315360001; do
    usage_error "-w '$bad'" "--wait '$bad'" run -w "$bad" k true
done
usage_error "-l 0" "must be more than 0" run -l 0 k true
usage_error "-l 0.001" "below the minimum of 0.1 s" run -l 0.001 k true
usage_error "-l 0.099" "below the minimum of 0.1 s" run -l 0.099 k true
usage_error "acquire -l 0.05" "below the minimum of 0.1 s" acquire -l 0.05 k
usage_error "extend -l 0.002" "below the minimum of 0.1 s" \
    extend --owner o -l 0.002 k
usage_error "-l -3" "must not be negative" run -l -3 k true
usage_error "--grace x" "--grace 'x'" run --grace x k true
usage_error "-E 256" "--conflict-exit-code '256'" run -E 256 k true
usage_error "-E -1" "--conflict-exit-code '-1'" run -E -1 k true
usage_error "-L x" "--lost-exit-code 'x'" run -L x k true
usage_error "--on-lost bogus" "not term, kill or ignore" \
    run --on-lost bogus k true
usage_error "--json on run" "'--json' does not apply to run" \
    run --json k true
usage_error "--export on status" "'--export' does not apply to status" \
    status --export k
usage_error "-w on release" "'-w' does not apply to release" \
    release -w 1 --owner o k
usage_error "release without owner" "no owner" release k
usage_error "extend without owner" "no owner" extend k
usage_error "status with two keys" "unexpected argument 'b'" status a b
usage_error "bad URL scheme" "" run -s 'ftp://127.0.0.1:1' k true

# Status 69 when nothing listens: a port that was just freed, and a unix
# socket that does not exist.
start_redis
port=$REDIS_PORT
bash "$FIXTURE" stop "$REDIS_DIR"
expect_status 69 "no server on the port" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$port" k -- true
check "the failure names the server" grep -q "127.0.0.1:$port" "$T/err"
expect_status 69 "no server on the port, with -w" \
    "$DLOCK_BIN" run -w 1 -s "redis://127.0.0.1:$port" k -- true
expect_status 69 "status: no server" \
    "$DLOCK_BIN" status -s "redis://127.0.0.1:$port" k
expect_status 69 "acquire: no server" \
    "$DLOCK_BIN" acquire -s "redis://127.0.0.1:$port" k
expect_status 69 "no unix socket" \
    "$DLOCK_BIN" run -s "unix://$T/nonexistent.sock" k -- true
expect_status 69 "DLOCK_SERVERS is used" \
    env DLOCK_SERVERS="redis://127.0.0.1:$port" "$DLOCK_BIN" run k -- true
check "COMMAND did not run without the lock" test ! -e "$T/ran"
expect_status 69 "nothing runs without a server" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$port" k -- touch "$T/ran"
check "COMMAND did not run" test ! -e "$T/ran"

# DLOCK_SERVERS set but naming no server is a usage error, not localhost.
for v in '' ',' ' , ' '	'; do
    expect_status 64 "DLOCK_SERVERS='$v': usage error" \
        env DLOCK_SERVERS="$v" "$DLOCK_BIN" run k -- touch "$T/ran"
    check "DLOCK_SERVERS='$v': the message says why" \
        grep -q "DLOCK_SERVERS is set but names no server" "$T/err"
done
expect_status 64 "DLOCK_SERVERS='': status too" \
    env DLOCK_SERVERS= "$DLOCK_BIN" status k
check "nothing ran with an empty DLOCK_SERVERS" test ! -e "$T/ran"
expect_status 69 "-s wins over an empty DLOCK_SERVERS" \
    env DLOCK_SERVERS= "$DLOCK_BIN" run -s "redis://127.0.0.1:$port" k -- true

finish
