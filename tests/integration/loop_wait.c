/*
 * loop_wait.c - the single-server event loop's wait after a busy answer
 * obeys the one wait policy (hold/wait.h, docs/design.md "Waiting"), as
 * the blocking API's wait does (issue 28), against a real redis-server.
 * Counted in attempts (INFO commandstats), not timed:
 *  - a notify waiter whose holder's lease is unknown (the key made
 *    persistent: PTTL -1) waits spin_max_ms or a release, not polling
 *    every 100 ms;
 *  - a fair waiter told that the lock is free but another live waiter is
 *    ahead in the queue (nobody hands a free lock over, and a waiter that
 *    gives up wakes nobody: F6 in docs/reliability.md) tries again after
 *    the spin backoff, not at its next queue refresh (a second).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "dlock_loop.h"
#include "harness.h"
#include "fixture.h"
#include "th_loop.h"

/* A client of srv waiting by strategy with this spin backoff. */
static dlock_client *wait_client(int strategy, int64_t spin_min_ms,
                                 int64_t spin_max_ms)
{
    const char *url = th_url(&srv);
    dlock_options o;
    dlock_client *c = NULL;
    char err[256];
    dlock_options_init(&o);
    o.servers = &url;
    o.nservers = 1;
    o.tls_ca_file = th_ca_file();
    o.wait_strategy = strategy;
    o.spin_min_ms = spin_min_ms;
    o.spin_max_ms = spin_max_ms;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    return c;
}

/* The calls of command cmd (lower case) the server has run so far. */
static long long calls_of(const char *cmd)
{
    redisReply *r = th_cmd(&srv, "INFO commandstats");
    char pat[64];
    long long n = 0;
    const char *p;
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
    if ((p = strstr(r->str, pat)) != NULL)
        assert_int_equal(sscanf(p + strlen(pat), "%lld", &n), 1);
    freeReplyObject(r);
    return n;
}

/* The scripts (EVALSHA, EVAL) the server has run so far. */
static long long scripts_run(void)
{
    return calls_of("evalsha") + calls_of("eval");
}

/* Start a lock acquire of name on l, a loop of c (wait_ms, lease_ms,
 * not renewed), noted in s. */
static void start_lock(dlock_client *c, dlock_loop *l, const char *name,
                       int64_t wait_ms, int64_t lease_ms, th_seen *s)
{
    dlock_loop_acquire o = th_loop_opts(c, wait_ms, lease_ms);
    o.renew = 0;
    assert_int_equal(dlock_loop_lock(NULL, l, name, &o, th_note, s), DLOCK_OK);
}

/* A notify waiter on a hold whose lease the server cannot tell (PTTL -1)
 * sleeps until a release or spin_max_ms (here past its deadline): a
 * first try and one more after subscribing, not one every 100 ms. */
static void test_notify_unknown_lease(void **state)
{
    dlock_client *c = wait_client(DLOCK_WAIT_NOTIFY, 1, 60000);
    dlock_loop *ls[2] = {th_loop_new(c), th_loop_new(c)};
    th_seen a = {0}, b = {0};
    long long before, tries;
    (void)state;
    start_lock(c, ls[0], "lw-persist", -1, 30000, &a);
    assert_int_equal(th_loop_run(ls, 1, &a.done), 0);
    assert_int_equal(a.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "PERSIST dlock:{lw-persist}"), 1);
    before = scripts_run();
    start_lock(c, ls[1], "lw-persist", 1500, 30000, &b);
    assert_int_equal(th_loop_run(&ls[1], 1, &b.done), 0);
    assert_int_equal(b.status, DLOCK_TIMEDOUT);
    tries = scripts_run() - before;
    /* The blocking wait's count (2; the give-back's leave may be in);
     * the loop's own rule polled about 15 times. */
    if (tries > 4)
        fprintf(stderr, "notify waiter, lease unknown: %lld tries\n", tries);
    assert_true(tries <= 4);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    th_cmd_int(&srv, "DEL dlock:{lw-persist}");
    dlock_client_free(c);
}

/* Fair: A queues behind a holder whose lease then runs out, and stops
 * (its loop is not run: its place lives 3 s from its last attempt). B
 * finds the lock free with A ahead: it tries again after the spin
 * backoff (8 ms at most here), not a second later at its refresh. */
static void test_fair_ahead(void **state)
{
    dlock_client *c = wait_client(DLOCK_WAIT_FAIR, 1, 8);
    dlock_loop *ls[3] = {th_loop_new(c), th_loop_new(c), th_loop_new(c)};
    th_seen h = {0}, a = {0}, b = {0};
    long long before, tries;
    (void)state;
    start_lock(c, ls[0], "lw-ahead", -1, 600, &h);
    assert_int_equal(th_loop_run(ls, 1, &h.done), 0);
    assert_int_equal(h.status, DLOCK_OK);
    start_lock(c, ls[1], "lw-ahead", -1, 30000, &a);
    th_loop_run_for(&ls[1], 1, 200); /* busy, subscribed, queued */
    assert_int_equal(a.done, 0);
    assert_true(th_cmd_int(&srv, "ZCARD dlock:{lw-ahead}:q") == 1);
    while (th_cmd_int(&srv, "EXISTS dlock:{lw-ahead}") != 0)
        th_sleep_ms(20); /* the holder's lease runs out, not renewed */
    before = scripts_run();
    start_lock(c, ls[2], "lw-ahead", 1200, 30000, &b);
    assert_int_equal(th_loop_run(&ls[2], 1, &b.done), 0);
    assert_int_equal(b.status, DLOCK_TIMEDOUT);
    tries = scripts_run() - before;
    /* About 150 under the policy; the loop's own rule tried 3 times. */
    if (tries < 10)
        fprintf(stderr, "fair waiter behind a live one: %lld tries\n", tries);
    assert_true(tries >= 10);
    dlock_loop_free(ls[2]);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[0]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_unknown_lease),
        cmocka_unit_test(test_fair_ahead),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
