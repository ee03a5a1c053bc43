#!/usr/bin/env bash
# auth.sh - credentials and TLS: the password from DLOCK_PASSWORD or the
# URL (then masked in /proc/PID/cmdline and redacted in -v output), ACL
# users (--user, DLOCK_USER), exit 77 for refused credentials, rediss://
# with --cacert / DLOCK_CACERT, a failed verification without them, and
# --insecure with its warning.
. "$(dirname "$0")/common.bash"

pw=s3cret-pw
start_redis --tls --password "$pw"
P=$REDIS_PORT
plain=redis://127.0.0.1:$P
tls=rediss://127.0.0.1:$REDIS_TLS_PORT
export REDISCLI_AUTH=$pw

expect_status 0 "password from DLOCK_PASSWORD" \
    env DLOCK_PASSWORD="$pw" "$DLOCK_BIN" run -s "$plain" a -- true
expect_status 0 "password in the URL" \
    "$DLOCK_BIN" run -s "redis://:$pw@127.0.0.1:$P" a -- true
expect_status 77 "wrong password: 77" \
    env DLOCK_PASSWORD=wrong "$DLOCK_BIN" run -s "$plain" a -- touch "$T/ran"
check "the message does not show the password" eval '! grep -q wrong "$T/err"'
code_nopw=$(timeout 30 "$DLOCK_BIN" run -s "$plain" a -- touch "$T/ran" \
    2>/dev/null; echo $?)
check "no password: refused with 77 (got $code_nopw)" \
    test "$code_nopw" = 77
check "nothing ran without credentials" test ! -e "$T/ran"

# The password leaves /proc/PID/cmdline and never appears in -v output.
expect_status 0 "URL password is masked in cmdline" \
    "$DLOCK_BIN" run -v -s "redis://:$pw@127.0.0.1:$P" a -- \
    sh -c 'tr "\0" " " </proc/$PPID/cmdline'
check "cmdline no longer shows the password ($(cat "$T/out"))" \
    eval '! grep -q "$pw" "$T/out" && grep -q "redis://:x*@127" "$T/out"'
check "-v shows the URL redacted" grep -qF 'redis://:***@127.0.0.1' "$T/err"
check "-v never shows the password" eval '! grep -q "$pw" "$T/err"'

# ACL users.
rcli "$P" ACL SETUSER alice on '>alice-pw' '~*' '&*' '+@all' >/dev/null
expect_status 0 "--user with DLOCK_PASSWORD" \
    env DLOCK_PASSWORD=alice-pw "$DLOCK_BIN" run --user alice -s "$plain" a -- true
expect_status 0 "DLOCK_USER and DLOCK_PASSWORD" \
    env DLOCK_USER=alice DLOCK_PASSWORD=alice-pw \
    "$DLOCK_BIN" run -s "$plain" a -- true
expect_status 0 "user and password in the URL" \
    "$DLOCK_BIN" run -s "redis://alice:alice-pw@127.0.0.1:$P" a -- true
expect_status 77 "--user with a wrong password: 77" \
    env DLOCK_PASSWORD="$pw" "$DLOCK_BIN" run --user alice -s "$plain" a -- true

# TLS.
export DLOCK_PASSWORD=$pw
expect_status 0 "rediss:// with --cacert" \
    "$DLOCK_BIN" run --cacert "$REDIS_CA" -s "$tls" t -- true
expect_status 0 "rediss:// with DLOCK_CACERT" \
    env DLOCK_CACERT="$REDIS_CA" "$DLOCK_BIN" run -s "$tls" t -- true
expect_status 69 "rediss:// without the CA: verification fails, 69" \
    "$DLOCK_BIN" run -s "$tls" t -- touch "$T/ran"
check "nothing ran over an unverified connection" test ! -e "$T/ran"
expect_status 0 "rediss:// --insecure" \
    "$DLOCK_BIN" run --insecure -s "$tls" t -- true
check "--insecure warns" grep -q 'insecure' "$T/err"
expect_status 78 "--cacert of a missing file: 78" \
    "$DLOCK_BIN" run --cacert "$T/missing.pem" -s "$tls" t -- true
expect_status 0 "TLS status" "$DLOCK_BIN" status --cacert "$REDIS_CA" -s "$tls" t
expect_status 0 "unix socket" "$DLOCK_BIN" run -s "unix://$REDIS_SOCK" u -- true

# Client certificates: make the server require one.
redis-cli -p "$P" --no-auth-warning CONFIG SET tls-auth-clients yes >/dev/null
expect_status 0 "client certificate with --cert/--key" \
    "$DLOCK_BIN" run --cacert "$REDIS_CA" --cert "$REDIS_CERTS/client.pem" \
    --key "$REDIS_CERTS/client.key" -s "$tls" c -- true
expect_status 0 "client certificate from DLOCK_TLS_CERT/DLOCK_TLS_KEY" \
    env DLOCK_TLS_CERT="$REDIS_CERTS/client.pem" \
    DLOCK_TLS_KEY="$REDIS_CERTS/client.key" \
    "$DLOCK_BIN" run --cacert "$REDIS_CA" -s "$tls" c -- true
code_nocert=$(timeout 30 "$DLOCK_BIN" run --cacert "$REDIS_CA" -s "$tls" c \
    -- touch "$T/ran-nocert" 2>/dev/null; echo $?)
check "no client certificate: refused (got $code_nocert)" \
    test "$code_nocert" = 69
check "nothing ran without the certificate" test ! -e "$T/ran-nocert"
expect_status 64 "--cert without --key: usage error" \
    "$DLOCK_BIN" run --cacert "$REDIS_CA" --cert "$REDIS_CERTS/client.pem" \
    -s "$tls" c -- true
check "the message names the options, not the library's" \
    file_has "$T/err" "--cert (or DLOCK_TLS_CERT) without --key"
expect_status 64 "DLOCK_TLS_KEY without a certificate: usage error" \
    env DLOCK_TLS_KEY="$REDIS_CERTS/client.key" \
    "$DLOCK_BIN" run --cacert "$REDIS_CA" -s "$tls" c -- true
check "it says the key needs --cert" \
    file_has "$T/err" "--key (or DLOCK_TLS_KEY) without --cert"

finish
