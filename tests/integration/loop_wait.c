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
    dlock_client *c = th_client_spin(th_url(&srv), DLOCK_WAIT_NOTIFY, 1, 60000);
    dlock_loop *ls[2];
    th_seen a = {0}, b = {0};
    long long before, tries;
    (void)state;
    assert_non_null(c);
    ls[0] = th_loop_new(c);
    ls[1] = th_loop_new(c);
    start_lock(c, ls[0], "lw-persist", -1, 30000, &a);
    assert_int_equal(th_loop_run(ls, 1, &a.done), 0);
    assert_int_equal(a.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "PERSIST dlock:{lw-persist}"), 1);
    before = th_scripts_run(&srv);
    start_lock(c, ls[1], "lw-persist", 1500, 30000, &b);
    assert_int_equal(th_loop_run(&ls[1], 1, &b.done), 0);
    assert_int_equal(b.status, DLOCK_TIMEDOUT);
    tries = th_scripts_run(&srv) - before;
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
    dlock_client *c = th_client_spin(th_url(&srv), DLOCK_WAIT_FAIR, 1, 8);
    dlock_loop *ls[3];
    int i;
    th_seen h = {0}, a = {0}, b = {0};
    long long before, tries;
    (void)state;
    assert_non_null(c);
    for (i = 0; i < 3; i++)
        ls[i] = th_loop_new(c);
    start_lock(c, ls[0], "lw-ahead", -1, 600, &h);
    assert_int_equal(th_loop_run(ls, 1, &h.done), 0);
    assert_int_equal(h.status, DLOCK_OK);
    start_lock(c, ls[1], "lw-ahead", -1, 30000, &a);
    th_loop_run_for(&ls[1], 1, 200); /* busy, subscribed, queued */
    assert_int_equal(a.done, 0);
    assert_true(th_cmd_int(&srv, "ZCARD dlock:{lw-ahead}:q") == 1);
    while (th_cmd_int(&srv, "EXISTS dlock:{lw-ahead}") != 0)
        th_sleep_ms(20); /* the holder's lease runs out, not renewed */
    before = th_scripts_run(&srv);
    start_lock(c, ls[2], "lw-ahead", 1200, 30000, &b);
    assert_int_equal(th_loop_run(&ls[2], 1, &b.done), 0);
    assert_int_equal(b.status, DLOCK_TIMEDOUT);
    tries = th_scripts_run(&srv) - before;
    /* About 150 under the policy; the loop's own rule tried 3 times. */
    if (tries < 10)
        fprintf(stderr, "fair waiter behind a live one: %lld tries\n", tries);
    assert_true(tries >= 10);
    dlock_loop_free(ls[2]);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[0]);
    dlock_client_free(c);
}

/* A notify permit waiter, queued, whose attempt is answered after its
 * deadline (the server paused meanwhile) gives up and leaves the queue,
 * as the blocking wait does (wait.c: a queued wait that fails leaves): a
 * place left behind would be served first by the next release. */
static void test_permit_late_answer_leaves(void **state)
{
    const char *url = th_url(&srv);
    dlock_client *c = th_client(&url, 1, DLOCK_WAIT_NOTIFY, 10000, 0);
    dlock_loop *ls[2];
    dlock_loop_acquire o;
    th_seen h = {0}, b = {0};
    (void)state;
    assert_non_null(c);
    ls[0] = th_loop_new(c);
    ls[1] = th_loop_new(c);
    o = th_loop_opts(c, -1, 30000);
    o.renew = 0;
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, ls[0], "lw-sem", 1, &o, th_note, &h),
        DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &h.done), 0);
    assert_int_equal(h.status, DLOCK_OK);
    o.wait_ms = 1500;
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, ls[1], "lw-sem", 1, &o, th_note, &b),
        DLOCK_OK);
    while (th_cmd_int(&srv, "LLEN dlock:{lw-sem}:q") != 1)
        th_loop_run_for(&ls[1], 1, 10); /* busy, subscribed, queued */
    /* Its refresh (a second on) is answered after its deadline. */
    freeReplyObject(th_cmd(&srv, "CLIENT PAUSE 3000 ALL"));
    assert_int_equal(th_loop_run(&ls[1], 1, &b.done), 0);
    assert_int_equal(b.status, DLOCK_TIMEDOUT);
    th_loop_run_for(&ls[1], 1, 200); /* its leave answered */
    assert_int_equal(th_cmd_int(&srv, "LLEN dlock:{lw-sem}:q"), 0);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[0]);
    th_cmd_int(&srv, "DEL dlock:{lw-sem}");
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_unknown_lease),
        cmocka_unit_test(test_fair_ahead),
        cmocka_unit_test(test_permit_late_answer_leaves),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
