/*
 * test_url.c - unit tests of dlock__url_parse() (src/url.c): the URLs a
 * user may write, those that must be refused, and the promise that no
 * error message ever contains the password. No server needed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/url.h"

/* Parse url and expect success; the endpoint is left in *ep for checks
 * (the caller clears it). */
static void parse_ok(dlock__endpoint *ep, const char *url)
{
    char err[DLOCK__ERRLEN] = "";
    int r = dlock__url_parse(ep, url, err, sizeof err);
    if (r != DLOCK_OK)
        print_error("unexpected failure for %s: %s\n", url, err);
    assert_int_equal(r, DLOCK_OK);
}

/* Parse url and expect DLOCK_EINVAL with a message containing want (when
 * not NULL) and never containing secret (when not NULL); the endpoint
 * must come back zeroed. */
static void parse_bad(const char *url, const char *want, const char *secret)
{
    dlock__endpoint ep, zero;
    char err[DLOCK__ERRLEN] = "";
    int r;
    memset(&ep, 0x5a, sizeof ep);
    memset(&zero, 0, sizeof zero);
    r = dlock__url_parse(&ep, url, err, sizeof err);
    if (r != DLOCK_EINVAL)
        print_error("expected EINVAL for \"%s\", got %d\n", url, r);
    assert_int_equal(r, DLOCK_EINVAL);
    assert_true(err[0] != '\0');
    if (want != NULL && strstr(err, want) == NULL)
        print_error("message for \"%s\" is \"%s\", wanted \"%s\"\n", url, err,
                    want);
    if (want != NULL)
        assert_non_null(strstr(err, want));
    if (secret != NULL)
        assert_null(strstr(err, secret));
    assert_memory_equal(&ep, &zero, sizeof ep);
}

/* The common forms: defaults, port, db, TLS. */
static void test_basic(void **state)
{
    dlock__endpoint ep;
    (void)state;

    parse_ok(&ep, "redis://localhost");
    assert_int_equal(ep.kind, DLOCK__EP_TCP);
    assert_string_equal(ep.host, "localhost");
    assert_int_equal(ep.port, 6379);
    assert_int_equal(ep.db, 0);
    assert_null(ep.user);
    assert_null(ep.password);
    assert_null(ep.path);
    assert_string_equal(ep.display, "localhost:6379");
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "redis://127.0.0.1:7000/3");
    assert_string_equal(ep.host, "127.0.0.1");
    assert_int_equal(ep.port, 7000);
    assert_int_equal(ep.db, 3);
    assert_string_equal(ep.display, "127.0.0.1:7000");
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "rediss://cache.example.com:6380/");
    assert_int_equal(ep.kind, DLOCK__EP_TLS);
    assert_string_equal(ep.host, "cache.example.com");
    assert_int_equal(ep.port, 6380);
    assert_int_equal(ep.db, 0);
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "REDIS://h:1/2147483647");
    assert_int_equal(ep.kind, DLOCK__EP_TCP);
    assert_int_equal(ep.port, 1);
    assert_int_equal(ep.db, 2147483647);
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "redis://h:65535/0");
    assert_int_equal(ep.port, 65535);
    dlock__endpoint_clear(&ep);

    /* Clearing twice, or a zeroed endpoint, is harmless. */
    dlock__endpoint_clear(&ep);
    dlock__endpoint_clear(NULL);
}

/* IPv6 literals in brackets; the host is stored without them. */
static void test_ipv6(void **state)
{
    dlock__endpoint ep;
    (void)state;

    parse_ok(&ep, "redis://[::1]:7000/2");
    assert_string_equal(ep.host, "::1");
    assert_int_equal(ep.port, 7000);
    assert_int_equal(ep.db, 2);
    assert_string_equal(ep.display, "[::1]:7000");
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "rediss://u:p@[2001:db8::42]");
    assert_string_equal(ep.host, "2001:db8::42");
    assert_int_equal(ep.port, 6379);
    assert_string_equal(ep.display, "[2001:db8::42]:6379");
    dlock__endpoint_clear(&ep);

    parse_bad("redis://[::1", "IPv6", NULL);
    parse_bad("redis://[]:6379", "IPv6", NULL);
    parse_bad("redis://[not:an:address:zz]:6379", "IPv6", NULL);
    parse_bad("redis://[::1]x:6379", "IPv6", NULL);
    parse_bad("redis://[::1]:", "empty port", NULL);
    parse_bad("redis://::1:6379", NULL, NULL);
}

/* User and password: each optional, percent-decoded. */
static void test_userinfo(void **state)
{
    dlock__endpoint ep;
    (void)state;

    parse_ok(&ep, "redis://alice:s3cret@h:6379");
    assert_string_equal(ep.user, "alice");
    assert_string_equal(ep.password, "s3cret");
    assert_string_equal(ep.display, "h:6379");
    dlock__endpoint_clear(&ep);

    /* Password only. */
    parse_ok(&ep, "redis://:pw@h");
    assert_null(ep.user);
    assert_string_equal(ep.password, "pw");
    dlock__endpoint_clear(&ep);

    /* User only. */
    parse_ok(&ep, "redis://bob@h");
    assert_string_equal(ep.user, "bob");
    assert_null(ep.password);
    dlock__endpoint_clear(&ep);

    /* Empty parts are no value. */
    parse_ok(&ep, "redis://bob:@h");
    assert_string_equal(ep.user, "bob");
    assert_null(ep.password);
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "redis://@h");
    assert_null(ep.user);
    assert_null(ep.password);
    dlock__endpoint_clear(&ep);

    /* Percent-encoding: %40 '@', %3A ':', %2F '/', %25 '%'. */
    parse_ok(&ep, "redis://us%40er:p%3Aa%2Fs%25s@h");
    assert_string_equal(ep.user, "us@er");
    assert_string_equal(ep.password, "p:a/s%s");
    dlock__endpoint_clear(&ep);

    /* Raw '@' and ':' in a password: the last '@' ends it. */
    parse_ok(&ep, "redis://u:p@ss:w0rd@h:7/1");
    assert_string_equal(ep.user, "u");
    assert_string_equal(ep.password, "p@ss:w0rd");
    assert_string_equal(ep.host, "h");
    assert_int_equal(ep.port, 7);
    assert_int_equal(ep.db, 1);
    dlock__endpoint_clear(&ep);

    parse_bad("redis://u:p%zz@h", "percent-encoding in the password", "p%zz");
    parse_bad("redis://u:p%4@h", "percent-encoding", NULL);
    parse_bad("redis://u:p%@h", "percent-encoding", NULL);
    parse_bad("redis://u:p%00x@h", "percent-encoding", NULL);
    parse_bad("redis://u%g1:p@h", "percent-encoding in the user", NULL);
}

/* unix:// with and without user information and ?db=. */
static void test_unix(void **state)
{
    dlock__endpoint ep;
    (void)state;

    parse_ok(&ep, "unix:///var/run/redis/redis.sock");
    assert_int_equal(ep.kind, DLOCK__EP_UNIX);
    assert_string_equal(ep.path, "/var/run/redis/redis.sock");
    assert_string_equal(ep.display, "/var/run/redis/redis.sock");
    assert_null(ep.host);
    assert_int_equal(ep.db, 0);
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "unix:///tmp/r.sock?db=5");
    assert_string_equal(ep.path, "/tmp/r.sock");
    assert_int_equal(ep.db, 5);
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "unix://alice:pw%2Fx@/tmp/r.sock?db=1");
    assert_string_equal(ep.user, "alice");
    assert_string_equal(ep.password, "pw/x");
    assert_string_equal(ep.path, "/tmp/r.sock");
    assert_int_equal(ep.db, 1);
    dlock__endpoint_clear(&ep);

    parse_ok(&ep, "unix://:pw@/tmp/r.sock");
    assert_null(ep.user);
    assert_string_equal(ep.password, "pw");
    dlock__endpoint_clear(&ep);

    parse_bad("unix://", "absolute path", NULL);
    parse_bad("unix://relative/path.sock", "absolute path", NULL);
    parse_bad("unix:///", "empty unix socket path", NULL);
    parse_bad("unix:///tmp/r.sock?db=", "bad database", NULL);
    parse_bad("unix:///tmp/r.sock?db=x", "bad database", NULL);
    parse_bad("unix:///tmp/r.sock?db=-1", "bad database", NULL);
    parse_bad("unix:///tmp/r.sock?db=1&x=2", "bad database", NULL);
    parse_bad("unix:///tmp/r.sock?timeout=1", "unknown parameter", NULL);
    parse_bad("unix://:hunter2@tmp/r.sock", "absolute path", "hunter2");

    {
        /* sun_path holds 107 bytes and the NUL. */
        char url[300] = "unix://";
        size_t n = strlen(url);
        memset(url + n, 'a', 150);
        url[n] = '/';
        url[n + 150] = '\0';
        parse_bad(url, "longer than", NULL);
    }
}

/* Hosts, ports and databases that must be refused. */
static void test_bad_parts(void **state)
{
    (void)state;
    parse_bad("", "empty", NULL);
    parse_bad(NULL, "empty", NULL);
    parse_bad("redis://", "no host", NULL);
    parse_bad("redis://:6379", "no host", NULL);
    parse_bad("redis://u:p@", "no host", "p@");
    parse_bad("redis:///0", "no host", NULL);
    parse_bad("redis://h:0", "bad port \"0\"", NULL);
    parse_bad("redis://h:65536", "bad port \"65536\"", NULL);
    parse_bad("redis://h:99999999999999999999", "bad port", NULL);
    parse_bad("redis://h:abc", "bad port \"abc\"", NULL);
    parse_bad("redis://h:-1", "bad port", NULL);
    parse_bad("redis://h:", "empty port", NULL);
    parse_bad("redis://h:6379:1", "bad port", NULL);
    parse_bad("redis://h/x", "bad database \"x\"", NULL);
    parse_bad("redis://h/-1", "bad database", NULL);
    parse_bad("redis://h/2147483648", "bad database", NULL);
    parse_bad("redis://h/1/", "bad database", NULL);
    parse_bad("redis://h/1/2", "bad database", NULL);
    parse_bad("redis://h:6379/0?x=1", "unexpected '?'", NULL);
    parse_bad("redis://h#frag", "unexpected '#'", NULL);
    parse_bad("redis://ho st", "space", NULL);
    parse_bad("redis://h\t:1", "control", NULL);
    parse_bad("redis://-h", "bad host name", NULL);
    parse_bad("redis://h%41", "bad host name", NULL);
    parse_bad("redis://h!", "bad host name", NULL);
}

/* Schemes other than ours, or none. */
static void test_scheme(void **state)
{
    (void)state;
    parse_bad("http://h:80", "unknown scheme \"http\"", NULL);
    parse_bad("redis:/h", "no scheme", NULL);
    parse_bad("localhost:6379", "no scheme", NULL);
    parse_bad("://h", "scheme", NULL);
    parse_bad("rediss+tls://h", "unknown scheme", NULL);
    parse_bad("tcp://h:6379", "unknown scheme", NULL);
}

/* No failure message may contain the password, whatever is wrong. */
static void test_no_password_in_messages(void **state)
{
    static const char *const urls[] = {
        "redis://user:Zebra42@h:0",
        "redis://user:Zebra42@h:abc",
        "redis://user:Zebra42@h/xyz",
        "redis://user:Zebra42@",
        "redis://user:Zebra42@[::1",
        "redis://user:Zebra42@h?db=1",
        "redis://user:Zeb/ra42@h", /* raw '/' in the password */
        "redis://user:Zebra42/x@h:1",
        "redis://user:Zebra42%zz@h",
        "redis://user:Zebra42 @h",
        "rediss://:Zebra42@h:65536",
        "unix://:Zebra42@tmp/x.sock",
        "unix://:Zebra42@/tmp/x.sock?db=x",
        "unix://:Zebra42@/tmp/x.sock?pw=Zebra42",
        "alice:Zebra42@h://x",
        "http://user:Zebra42@h",
        "user:Zebra42@h:6379",
        "redis//user:Zebra42@h",
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        dlock__endpoint ep;
        char err[DLOCK__ERRLEN] = "";
        int r = dlock__url_parse(&ep, urls[i], err, sizeof err);
        if (r == DLOCK_OK)
            print_error("\"%s\" was accepted\n", urls[i]);
        assert_int_equal(r, DLOCK_EINVAL);
        if (strstr(err, "Zebra") != NULL)
            print_error("message for URL %zu leaks: %s\n", i, err);
        assert_null(strstr(err, "Zebra"));
    }
}

/* A NULL or tiny message buffer is allowed. */
static void test_err_buffer(void **state)
{
    dlock__endpoint ep;
    char tiny[4];
    (void)state;
    assert_int_equal(dlock__url_parse(&ep, "redis://h:0", NULL, 0),
                     DLOCK_EINVAL);
    assert_int_equal(dlock__url_parse(&ep, "redis://h:0", tiny, sizeof tiny),
                     DLOCK_EINVAL);
    assert_int_equal(strlen(tiny), 3);
}

/* ---- redis+sentinel:// -------------------------------------------------- */

static void sparse_ok(dlock__sentinel_url *su, const char *url)
{
    char err[DLOCK__ERRLEN] = "";
    int r = dlock__sentinel_url_parse(su, url, err, sizeof err);
    if (r != DLOCK_OK)
        print_error("unexpected failure for %s: %s\n", url, err);
    assert_int_equal(r, DLOCK_OK);
}

static void sparse_bad(const char *url, const char *want, const char *secret)
{
    dlock__sentinel_url su, zero;
    char err[DLOCK__ERRLEN] = "";
    int r;
    memset(&su, 0x5a, sizeof su);
    memset(&zero, 0, sizeof zero);
    r = dlock__sentinel_url_parse(&su, url, err, sizeof err);
    if (r != DLOCK_EINVAL)
        print_error("expected EINVAL for \"%s\", got %d\n", url, r);
    assert_int_equal(r, DLOCK_EINVAL);
    if (want != NULL && strstr(err, want) == NULL)
        print_error("message for \"%s\" is \"%s\", wanted \"%s\"\n", url, err,
                    want);
    if (want != NULL)
        assert_non_null(strstr(err, want));
    if (secret != NULL)
        assert_null(strstr(err, secret));
    assert_memory_equal(&su, &zero, sizeof su);
}

/* The forms of a sentinel URL: one or several sentinels, default port,
 * IPv6, credentials for the data nodes, db, TLS. */
static void test_sentinel_url(void **state)
{
    dlock__sentinel_url su;
    (void)state;

    assert_true(dlock__url_is_sentinel("redis+sentinel://h/m"));
    assert_true(dlock__url_is_sentinel("REDISS+Sentinel://h/m"));
    assert_false(dlock__url_is_sentinel("redis://h"));
    assert_false(dlock__url_is_sentinel(NULL));

    sparse_ok(&su, "redis+sentinel://127.0.0.1:26380/mymaster");
    assert_int_equal(su.n, 1);
    assert_false(su.tls);
    assert_string_equal(su.sentinel[0].host, "127.0.0.1");
    assert_int_equal(su.sentinel[0].port, 26380);
    assert_int_equal(su.sentinel[0].kind, DLOCK__EP_TCP);
    assert_string_equal(su.master, "mymaster");
    assert_null(su.user);
    assert_null(su.password);
    assert_int_equal(su.db, 0);
    dlock__sentinel_url_clear(&su);

    sparse_ok(&su, "rediss+sentinel://app:p%2Fw@a,b:1,[::1]:7,[::1]/m%41?db=3");
    assert_true(su.tls);
    assert_int_equal(su.n, 4);
    assert_string_equal(su.sentinel[0].host, "a");
    assert_int_equal(su.sentinel[0].port, 26379);
    assert_string_equal(su.sentinel[0].display, "a:26379");
    assert_int_equal(su.sentinel[0].kind, DLOCK__EP_TLS);
    assert_int_equal(su.sentinel[1].port, 1);
    assert_string_equal(su.sentinel[2].host, "::1");
    assert_int_equal(su.sentinel[2].port, 7);
    assert_int_equal(su.sentinel[3].port, 26379);
    assert_string_equal(su.sentinel[3].display, "[::1]:26379");
    assert_string_equal(su.master, "mA");
    assert_string_equal(su.user, "app");
    assert_string_equal(su.password, "p/w");
    assert_int_equal(su.db, 3);
    dlock__sentinel_url_clear(&su);

    /* Only a password; '@' and ':' raw in it. */
    sparse_ok(&su, "redis+sentinel://:s@c:r@h/m");
    assert_null(su.user);
    assert_string_equal(su.password, "s@c:r");
    dlock__sentinel_url_clear(&su);
}

/* Malformed sentinel URLs: each refused with a message that says what is
 * wrong and never the password. */
static void test_sentinel_url_bad(void **state)
{
    (void)state;
    sparse_bad("redis://h/m", "expected redis+sentinel://", NULL);
    sparse_bad("redis+sentinel://", "no master name", NULL);
    sparse_bad("redis+sentinel://h", "no master name", NULL);
    sparse_bad("redis+sentinel://h/", "no master name", NULL);
    sparse_bad("redis+sentinel:///m", "no sentinel host", NULL);
    sparse_bad("redis+sentinel://a,,b/m", "empty entry", NULL);
    sparse_bad("redis+sentinel://a,/m", "empty entry", NULL);
    sparse_bad("redis+sentinel://h:0/m", "bad port", NULL);
    sparse_bad("redis+sentinel://h:99999/m", "bad port", NULL);
    sparse_bad("redis+sentinel://h:/m", "empty port", NULL);
    sparse_bad("redis+sentinel://[::1/m", "IPv6", NULL);
    sparse_bad("redis+sentinel://h!x/m", "bad host name", NULL);
    sparse_bad("redis+sentinel://h/m?db=x", "bad database", NULL);
    sparse_bad("redis+sentinel://h/m?foo=1", "unknown parameter", NULL);
    sparse_bad("redis+sentinel://h/m#x", "unexpected '#'", NULL);
    sparse_bad("redis+sentinel://h/m%20x", "space or control", NULL);
    sparse_bad("redis+sentinel://h/m%zz", "percent-encoding", NULL);
    sparse_bad("redis+sentinel://h /m", "space or control", NULL);
    sparse_bad("redis+sentinel://u:sekrit/x@h/m", "'@' after the hosts",
               "sekrit");
    sparse_bad("redis+sentinel://u:sekrit%zz@h/m", "percent-encoding",
               "sekrit");
    sparse_bad("redis+sentinel://u:sekrit@h:0/m", "bad port", "sekrit");
    sparse_bad("redis+sentinel://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q/m",
               "more than 16", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_userinfo),
        cmocka_unit_test(test_unix),
        cmocka_unit_test(test_bad_parts),
        cmocka_unit_test(test_scheme),
        cmocka_unit_test(test_no_password_in_messages),
        cmocka_unit_test(test_err_buffer),
        cmocka_unit_test(test_sentinel_url),
        cmocka_unit_test(test_sentinel_url_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
