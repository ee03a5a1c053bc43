#!/usr/bin/env bash
# defaultserver.sh - without -s and without DLOCK_SERVERS (as under cron or
# systemd, which do not read the login shell's environment where an
# operator set it) dlock uses redis://127.0.0.1:6379. When that server
# cannot be reached, the failure says that the default was used and why
# it may have been, so that the operator does not hunt a Redis outage;
# with -s or DLOCK_SERVERS the hint is not printed. The default-server
# checks run only when nothing listens on 127.0.0.1:6379 (a test must not
# take a lock on a server it did not start).
. "$(dirname "$0")/common.bash"

# A port nothing listens on: a server of ours, stopped.
start_redis
DEAD_PORT=$REDIS_PORT
bash "$FIXTURE" stop "$REDIS_DIR"

hint="DLOCK_SERVERS is not set, so the default server"
if (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    echo "note: something listens on 127.0.0.1:6379: default-server checks skipped"
else
    for c in "run dk -- true" "acquire dk" "status dk" "list"; do
        # shellcheck disable=SC2086 # words of the command on purpose
        expect_status 69 "default server down: $c" "$DLOCK_BIN" $c
        check "$c: it says the default server was used" \
            file_has "$T/err" "$hint"
    done
fi
expect_status 69 "-s naming a dead server" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$DEAD_PORT" dk -- true
check "no default-server hint with -s" test -z "$(grep -F "$hint" "$T/err")"
expect_status 69 "DLOCK_SERVERS naming a dead server" \
    env DLOCK_SERVERS="redis://127.0.0.1:$DEAD_PORT" "$DLOCK_BIN" run dk -- true
check "no default-server hint with DLOCK_SERVERS" \
    test -z "$(grep -F "$hint" "$T/err")"

finish
