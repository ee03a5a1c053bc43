#!/usr/bin/env bash
# noperm.sh - an ACL user without pub/sub channel permission (Redis 7's
# default for new users, acl-pubsub-default resetchannels; issue 16): the
# holder's release succeeds without a false "can't publish" error, a
# waiter (`dlock run -w`) gets the lock by polling with one warning that
# names the ACL rule, and `dlock status` says what is missing and how to
# allow it. With `&dlock:*` added, none of that appears.
. "$(dirname "$0")/common.bash"

start_redis
P=$REDIS_PORT
export DLOCK_SERVERS=redis://127.0.0.1:$P
rcli "$P" ACL SETUSER nochan on '>pw' '~*' '+@all' resetchannels >/dev/null
export DLOCK_USER=nochan DLOCK_PASSWORD=pw

rm -f "$T/held" "$T/go"
spawn_bg_err "$T/holder.err" "$DLOCK_BIN" run np -- sh -c \
    'touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done' sh "$T"
holder=$BG
wait_until 20 test -e "$T/held" || fail "the holder did not start"
spawn_bg_err "$T/waiter.err" "$DLOCK_BIN" run -v -w 30 np -- true
waiter=$BG
wait_until 20 grep -q 'waiting for "np"' "$T/waiter.err" ||
    fail "the waiter does not wait"
touch "$T/go"
wait_pid "$holder" 20
check "the holder exits 0 (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
check "the holder's release reports no error ($(cat "$T/holder.err"))" \
    test ! -s "$T/holder.err"
wait_pid "$waiter" 30
check "the waiter got the lock (got $WAIT_STATUS)" test "$WAIT_STATUS" = 0
check "the waiter warns once, naming the rule ($(cat "$T/waiter.err"))" \
    test "$(grep -c 'warning: .*NOPERM.*&dlock:\*' "$T/waiter.err")" = 1
check "the key is gone" key_gone "$P" 'dlock:{np}'

expect_status 0 "status" "$DLOCK_BIN" status np
check "status names the missing permission and the fix" \
    grep -q '^warning: .*NOPERM.*&dlock:\*.*allchannels' "$T/out"

rcli "$P" ACL SETUSER nochan '&dlock:*' >/dev/null
expect_status 0 "status with &dlock:*" "$DLOCK_BIN" status np
check "no channel warning with &dlock:*" eval '! grep -q NOPERM "$T/out"'
rm -f "$T/held" "$T/go"
spawn_bg_err "$T/holder2.err" "$DLOCK_BIN" run np -- sh -c \
    'touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done' sh "$T"
holder=$BG
wait_until 20 test -e "$T/held" || fail "the holder did not start"
spawn_bg_err "$T/waiter2.err" "$DLOCK_BIN" run -v -w 30 np -- true
waiter=$BG
wait_until 20 grep -q 'waiting for "np"' "$T/waiter2.err" ||
    fail "the second waiter does not wait"
touch "$T/go"
wait_pid "$holder" 20
wait_pid "$waiter" 30
check "the waiter with &dlock:* got the lock (got $WAIT_STATUS)" \
    test "$WAIT_STATUS" = 0
check "no warning with &dlock:* ($(cat "$T/waiter2.err"))" \
    eval '! grep -q warning "$T/waiter2.err"'

finish
