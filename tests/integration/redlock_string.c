/*
 * redlock_string.c - the string layout (dlock_client_set_layout) over
 * three servers (Redlock): what one cycle costs each server (INFO
 * commandstats, against a budget), exclusion, a grant on a majority with
 * one server stopped, the give-back of a minority grant, tokens that
 * increase from holder to holder and are the same on every server, the
 * watchdog's renewal (without take-back), the event loop's hold, fenced
 * values in the layout's string form through the engine loop and the
 * blocking calls (on the first server), and the refusal of fair waits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "th_loop.h"

#define NS 3
#define FIXTURE_NS NS
#include "fixture_n.h"

/* Commands per server for one uncontended cycle (the EVALSHA of each
 * step and the calls inside): TIME, the fence hash's HMGET, SET NX PX,
 * its HSET n; GET, DEL, the fence's HSET r (the fence retention is
 * always on over several servers). The hash layout's is 11. */
#define CYCLE_BUDGET_PER_SERVER 9

/* A string-layout Redlock client over the three servers with wait
 * strategy STRATEGY; NULL when the layout is refused. */
static dlock_client *rl_string(int strategy)
{
    const char *urls[NS];
    dlock_client *c;
    fixture_urls(urls);
    c = th_client(urls, NS, strategy, 1000, 2000);
    assert_non_null(c);
    if (dlock_client_set_layout(c, DLOCK_LAYOUT_STRING) != DLOCK_OK) {
        fprintf(stderr, "set_layout: %s\n", dlock_errmsg(c));
        dlock_client_free(c);
        return NULL;
    }
    return c;
}

/* Calls of every command on server i but INFO, summed. */
static long long calls(int i)
{
    redisReply *r = th_cmd(&srv[i], "INFO commandstats");
    const char *p;
    long long total = 0;
    assert_non_null(r);
    for (p = r->str; (p = strstr(p, "cmdstat_")) != NULL;) {
        char name[32];
        long long n;
        p += 8;
        if (sscanf(p, "%31[^:]:calls=%lld", name, &n) == 2 &&
            strcmp(name, "info") != 0)
            total += n;
    }
    freeReplyObject(r);
    return total;
}

/* The token in server i's value of lock NAME (0: no string there). */
static uint64_t token_on(int i, const char *name)
{
    redisReply *r = th_cmd(&srv[i], "GET dlock:{%s}", name);
    unsigned long long tok = 0;
    if (r != NULL && r->type == REDIS_REPLY_STRING &&
        sscanf(r->str, "%*s %*d %llu", &tok) != 1)
        tok = 0;
    if (r != NULL)
        freeReplyObject(r);
    return tok;
}

/* The second of two uncontended cycles costs each server at most the
 * budget (fails while the layout is refused: no client). */
static void test_cycle_cost(void **state)
{
    dlock_client *c = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_lock *l;
    long long before[NS];
    int i;
    (void)state;
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, c, "rs-cost", 1000, 5000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_sleep_ms(100); /* the give-up of a server late to answer */
    for (i = 0; i < NS; i++)
        before[i] = calls(i);
    assert_int_equal(dlock_lock_acquire(&l, c, "rs-cost", 1000, 5000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_sleep_ms(100);
    for (i = 0; i < NS; i++) {
        long long n = calls(i) - before[i];
        printf("server %d: %lld commands a cycle\n", i, n);
        assert_true(n <= CYCLE_BUDGET_PER_SERVER);
    }
    dlock_client_free(c);
}

/* One holder at a time; the tokens increase from holder to holder and a
 * holder's token is in its value on every server. */
static void test_exclusion_tokens(void **state)
{
    dlock_client *a = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_client *b = rl_string(DLOCK_WAIT_SPIN);
    dlock_lock *la, *lb;
    uint64_t last = 0;
    int round, i, same;
    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    for (round = 0; round < 10; round++) {
        dlock_client *x = round % 2 ? a : b, *y = round % 2 ? b : a;
        assert_int_equal(dlock_lock_acquire(&la, x, "rs-ex", 0, 5000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_acquire(&lb, y, "rs-ex", 0, 5000),
                         DLOCK_BUSY);
        assert_true(dlock_lock_token(la) > last);
        last = dlock_lock_token(la);
        /* On a majority at once; a server late to answer has it soon,
         * or not at all (given up on), never with another token. */
        for (i = 0, same = 0; i < NS; i++) {
            uint64_t t = token_on(i, "rs-ex");
            assert_true(t == 0 || t == last);
            same += t == last;
        }
        assert_true(same >= 2);
        assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    }
    for (i = 0; i < NS; i++)
        assert_int_equal(th_cmd_int(&srv[i], "EXISTS dlock:{rs-ex}"), 0);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A server stopped: the other two are a majority (grant, release). */
static void test_node_down(void **state)
{
    dlock_client *c = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_lock *l;
    (void)state;
    assert_non_null(c);
    th_server_pause(&srv[2]);
    assert_int_equal(dlock_lock_acquire(&l, c, "rs-down", 0, 5000), DLOCK_OK);
    assert_true(token_on(0, "rs-down") == dlock_lock_token(l));
    assert_true(token_on(1, "rs-down") == dlock_lock_token(l));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_server_resume(&srv[2]);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{rs-down}"), 0);
    assert_int_equal(th_cmd_int(&srv[1], "EXISTS dlock:{rs-down}"), 0);
    dlock_client_free(c);
}

/* Another owner holds the name on two servers: the grant of the third
 * is a minority, given back (the key gone there), and the acquire is
 * busy. */
static void test_minority_given_back(void **state)
{
    dlock_client *c = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_lock *l;
    int i;
    (void)state;
    assert_non_null(c);
    for (i = 1; i < NS; i++) {
        redisReply *r =
            th_cmd(&srv[i], "SET dlock:{rs-min} %s PX 30000", "other 1 12");
        assert_non_null(r);
        freeReplyObject(r);
    }
    assert_int_equal(dlock_lock_acquire(&l, c, "rs-min", 0, 5000), DLOCK_BUSY);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{rs-min}"), 0);
    for (i = 1; i < NS; i++)
        assert_int_equal(th_cmd_int(&srv[i], "DEL dlock:{rs-min}"), 1);
    dlock_client_free(c);
}

/* The watchdog renews a hold of the layout on every server (s_extend.lua
 * over the three): held after three leases, and one server that lost it
 * is not given it back (no take-back in this layout), but the other two
 * keep it held. */
static void test_watchdog(void **state)
{
    dlock_client *c = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_acquire_options o;
    dlock_lock *l;
    int i;
    (void)state;
    assert_non_null(c);
    dlock_acquire_options_init(&o);
    o.lease_ms = 900;
    o.watchdog = 1;
    assert_int_equal(dlock_lock_acquire_ex(&l, c, "rs-wd", &o), DLOCK_OK);
    th_sleep_ms(2700);
    for (i = 0; i < 2; i++)
        assert_true(token_on(i, "rs-wd") == dlock_lock_token(l));
    assert_int_equal(th_cmd_int(&srv[2], "DEL dlock:{rs-wd}"), 1);
    th_sleep_ms(2700);
    assert_true(token_on(0, "rs-wd") == dlock_lock_token(l));
    assert_true(token_on(1, "rs-wd") == dlock_lock_token(l));
    assert_int_equal(th_cmd_int(&srv[2], "EXISTS dlock:{rs-wd}"), 0);
    assert_true(dlock_lock_validity_ms(l) > 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (i = 0; i < 2; i++)
        assert_int_equal(th_cmd_int(&srv[i], "EXISTS dlock:{rs-wd}"), 0);
    dlock_client_free(c);
}

/* The event loop holds in the layout too (the kind table's scripts):
 * a string on a majority, busy for a second loop, gone on release. */
static void test_loop(void **state)
{
    dlock_client *a = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_client *b = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_loop *la, *lb;
    dlock_loop_acquire oa, ob;
    dlock_hold *h = NULL, *h2 = NULL;
    int i, strings = 0;
    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    la = th_loop_new(a);
    lb = th_loop_new(b);
    oa = th_loop_opts(a, 0, 30000);
    ob = th_loop_opts(b, 0, 30000);
    assert_int_equal(th_loop_lock(la, "rs-loop", &oa, &h), DLOCK_OK);
    for (i = 0; i < NS; i++) {
        redisReply *r = th_cmd(&srv[i], "TYPE dlock:{rs-loop}");
        assert_non_null(r);
        strings += strcmp(r->str, "string") == 0;
        freeReplyObject(r);
    }
    assert_true(strings >= 2);
    assert_int_equal(th_loop_lock(lb, "rs-loop", &ob, &h2), DLOCK_BUSY);
    assert_int_equal(th_loop_release(la, h), DLOCK_OK);
    assert_int_equal(th_loop_lock(lb, "rs-loop", &ob, &h2), DLOCK_OK);
    assert_int_equal(th_loop_release(lb, h2), DLOCK_OK);
    dlock_loop_free(la);
    dlock_loop_free(lb);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* An op started on l with X as its th_vseen (rc: the start's return):
 * run l until its callback; its status. */
static int fv_run(dlock_loop *l, int rc, th_vseen *x)
{
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &x->s.done), 0);
    return x->s.status;
}

/* A fenced set of "rs:fv" on l with TOKEN and VALUE: its status. */
static int fv_set(dlock_loop *l, uint64_t token, const char *value, th_vseen *x)
{
    memset(x, 0, sizeof *x);
    return fv_run(l,
                  dlock_loop_fenced_set(NULL, l, "rs:fv", token, value,
                                        strlen(value), th_vnote, x),
                  x);
}

/* Fenced values through an engine loop (scripts, s_fenced_get.lua for
 * the get) and the blocking calls: one string "<fence> <value>" on the
 * first server, read alike by both; an older token refused. */
static void test_fenced_string(void **state)
{
    dlock_client *c = rl_string(DLOCK_WAIT_NOTIFY);
    dlock_loop *l;
    th_vseen x;
    redisReply *r;
    char *v = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    (void)state;
    assert_non_null(c);
    l = th_loop_new(c);
    assert_int_equal(fv_set(l, 7, "a b", &x), DLOCK_OK);
    r = th_cmd(&srv[0], "GET rs:fv");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "7 a b");
    freeReplyObject(r);
    memset(&x, 0, sizeof x);
    assert_int_equal(
        fv_run(l, dlock_loop_fenced_get(NULL, l, "rs:fv", th_vnote, &x), &x),
        DLOCK_OK);
    assert_string_equal(x.v, "a b");
    assert_int_equal(x.fence, 7);
    memset(&x, 0, sizeof x);
    assert_int_equal(
        fv_run(l, dlock_loop_fenced_read(NULL, l, "rs:fv", 9, th_vnote, &x),
               &x),
        DLOCK_OK);
    assert_int_equal(dlock_fenced_get(c, "rs:fv", &v, &len, &fence), DLOCK_OK);
    assert_string_equal(v, "a b");
    assert_int_equal(fence, 9);
    free(v);
    assert_int_equal(dlock_fenced_set(c, "rs:fv", 8, "old", 3), DLOCK_STALE);
    assert_int_equal(fv_set(l, 8, "old", &x), DLOCK_STALE);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Fair waits have no queue in this layout over several servers: the
 * layout is refused to a fair client, with a message that says so. */
static void test_fair_refused(void **state)
{
    const char *urls[NS];
    dlock_client *c;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, NS, DLOCK_WAIT_FAIR, 1000, 2000);
    assert_non_null(c);
    assert_int_equal(dlock_client_set_layout(c, DLOCK_LAYOUT_STRING),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "fair waits"));
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cycle_cost),
        cmocka_unit_test(test_exclusion_tokens),
        cmocka_unit_test(test_node_down),
        cmocka_unit_test(test_minority_given_back),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_fenced_string),
        cmocka_unit_test(test_fair_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
