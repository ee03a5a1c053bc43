/*
 * test_cluster_url.c - unit tests of dlock__cluster_parse_url() and of
 * dlock_client_new() with cluster URLs (src/cluster.c, src/topology.c):
 * the seed lists a user may write, those that must be refused with
 * DLOCK_EINVAL, and that no message quotes the password. No server
 * needed: the slot map is loaded on first use, not here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "topo/cluster.h"
#include "dlock.h"

#define MAXS 8

/* Parse url and expect n seeds in eps (the caller clears them). */
static void parse_ok(dlock__endpoint *eps, const char *url, int n)
{
    char err[DLOCK__ERRLEN] = "";
    int r = dlock__cluster_parse_url(url, eps, MAXS, err, sizeof err);
    if (r != n)
        print_error("%s: got %d (%s), wanted %d seeds\n", url, r, err, n);
    assert_int_equal(r, n);
}

static void clear(dlock__endpoint *eps, int n)
{
    for (int i = 0; i < n; i++)
        dlock__endpoint_clear(&eps[i]);
}

/* Parse url and expect DLOCK_EINVAL with want in the message and never
 * the secret. */
static void parse_bad(const char *url, const char *want, const char *secret)
{
    dlock__endpoint eps[MAXS];
    char err[DLOCK__ERRLEN] = "";
    int r = dlock__cluster_parse_url(url, eps, MAXS, err, sizeof err);
    if (r != DLOCK_EINVAL || (want != NULL && strstr(err, want) == NULL))
        print_error("\"%s\": got %d \"%s\", wanted EINVAL \"%s\"\n", url, r,
                    err, want ? want : "");
    assert_int_equal(r, DLOCK_EINVAL);
    if (want != NULL)
        assert_non_null(strstr(err, want));
    if (secret != NULL)
        assert_null(strstr(err, secret));
}

static void test_seeds(void **state)
{
    dlock__endpoint e[MAXS];
    (void)state;
    parse_ok(e, "redis+cluster://127.0.0.1:7000", 1);
    assert_int_equal(e[0].kind, DLOCK__EP_TCP);
    assert_string_equal(e[0].host, "127.0.0.1");
    assert_int_equal(e[0].port, 7000);
    assert_null(e[0].password);
    clear(e, 1);

    parse_ok(e, "REDIS+CLUSTER://a:1,b:2,[::1]:3", 3);
    assert_string_equal(e[1].host, "b");
    assert_int_equal(e[1].port, 2);
    assert_string_equal(e[2].host, "::1");
    assert_string_equal(e[2].display, "[::1]:3");
    clear(e, 3);

    /* User information applies to every seed; a ',' inside the password
     * is not a seed separator (the last '@' ends it). */
    parse_ok(e, "rediss+cluster://bob:p%2Cw,x@h1:7000,h2/0", 2);
    assert_int_equal(e[0].kind, DLOCK__EP_TLS);
    assert_string_equal(e[0].user, "bob");
    assert_string_equal(e[0].password, "p,w,x");
    assert_string_equal(e[1].password, "p,w,x");
    assert_int_equal(e[1].port, 6379);
    clear(e, 2);
    assert_true(dlock__cluster_is_url("rediss+cluster://h"));
    assert_false(dlock__cluster_is_url("redis://h"));
}

static void test_refused(void **state)
{
    (void)state;
    parse_bad("redis+cluster://", "no seed", NULL);
    parse_bad("redis+cluster://u:secret@", "no seed", "secret");
    parse_bad("redis+cluster://a:1,,b:2", "empty seed", NULL);
    parse_bad("redis+cluster://a:1,", "empty seed", NULL);
    parse_bad("redis+cluster://,a:1", "empty seed", NULL);
    parse_bad("redis+cluster://a:99999", "seed 1: bad port", NULL);
    parse_bad("redis+cluster://a:1,b:x", "seed 2: bad port", NULL);
    parse_bad("redis+cluster://a:1/3", "database 0 only", NULL);
    parse_bad("redis+cluster://u:secret@a b:1", "space", "secret");
    parse_bad("redis+cluster://u:secret@a:1?x=1", NULL, "secret");
    parse_bad("redis+cluster://a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9",
              "more than 8 seeds", NULL);
    parse_bad("cluster://a:1", "expected redis+cluster://", NULL);
}

/* dlock_client_new: a cluster URL alone is a client (no connection
 * yet); beside other servers, or malformed, it is EINVAL. */
static void test_client_new(void **state)
{
    const char *one[1] = {"redis+cluster://127.0.0.1:1,127.0.0.1:2"};
    const char *mixed[2] = {"redis+cluster://127.0.0.1:1", "redis://h"};
    const char *bad[1] = {"redis+cluster://u:hunter2@a:0"};
    dlock_options o;
    dlock_client *c = NULL;
    char err[256];
    (void)state;
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.wait_strategy = DLOCK_WAIT_FAIR; /* one owner per lock: allowed */
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    dlock_client_free(c);
    o.servers = mixed;
    o.nservers = 2;
    o.wait_strategy = DLOCK_WAIT_NOTIFY;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_EINVAL);
    assert_non_null(strstr(err, "must be the only server"));
    o.servers = bad;
    o.nservers = 1;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_EINVAL);
    assert_null(strstr(err, "hunter2"));
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_client_new),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
