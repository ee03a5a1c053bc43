/*
 * string_places.c - the string layout's fair queue places (issue 31,
 * s_place.luainc): a place queued with the defaults is its ticket alone
 * (an even score, twice the server's time in us) and lasts 3 s from it;
 * a refreshed place has an odd ticket and its deadline in :qt.
 *
 * test_dead_default_place: a waiter killed right after it queued (its
 * place never refreshed, so it has no deadline entry) is skipped by the
 * hand-over once 3 s have passed: the lock goes to the live waiter
 * behind it, not to the dead one (which would hold it for 2 s).
 * test_order_kept: two waiters whose places were refreshed (odd tickets)
 * and one that joined after them (even) are served in arrival order.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"
#include "th_waiter.h"

static dlock_client *fair_string(void)
{
    dlock_client *c = th_client_string_wait(th_url(&srv), 0, DLOCK_WAIT_FAIR);
    assert_non_null(c);
    return c;
}

/* The queue member at index i of NAME's queue, copied to buf. */
static void member(const char *name, int i, char *buf, size_t len)
{
    redisReply *r = th_cmd(&srv, "ZRANGE dlock:{%s}:q %d %d", name, i, i);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    snprintf(buf, len, "%s", r->element[0]->str);
    freeReplyObject(r);
}

static void test_dead_default_place(void **state)
{
    dlock_client *a = fair_string(), *b = fair_string();
    th_waiter w = th_waiter_keeping(b, "sp-dead");
    char dead[128], live[128];
    dlock_lock *l;
    redisReply *r;
    pid_t child;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, a, "sp-dead", 0, 30000), DLOCK_OK);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dlock_client *c =
            th_client_string_wait(th_url(&srv), 0, DLOCK_WAIT_FAIR);
        dlock_lock *cl;
        if (c != NULL)
            dlock_lock_acquire(&cl, c, "sp-dead", 30000, 30000);
        _exit(0);
    }
    assert_int_equal(th_await_queued(&srv, "sp-dead", 1), 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    member("sp-dead", 0, dead, sizeof dead);
    /* Never refreshed: an even ticket, no deadline entry. */
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{sp-dead}:qt"), 0);
    assert_int_equal(th_waiter_start(&w), 0);
    assert_int_equal(th_await_queued(&srv, "sp-dead", 2), 0);
    member("sp-dead", 1, live, sizeof live);
    th_sleep_ms(3300); /* the dead place's 3 s pass */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    r = th_cmd(&srv, "GET dlock:{sp-dead}");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    print_message("dead %s, live %s, handed: %s\n", dead, live, r->str);
    assert_true(strncmp(r->str, live, strlen(live)) == 0 &&
                r->str[strlen(live)] == ' ');
    freeReplyObject(r);
    assert_int_equal(th_waiter_join(&w), 0);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{sp-dead}:q"), 0);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void test_order_kept(void **state)
{
    dlock_client *a = fair_string(), *c[3];
    th_waiter w[3];
    atomic_int order, entered;
    int seq[3] = {-1, -1, -1}, i;
    dlock_lock *l;
    (void)state;
    atomic_init(&order, 0);
    atomic_init(&entered, 0);
    assert_int_equal(dlock_lock_acquire(&l, a, "sp-order", 0, 30000), DLOCK_OK);
    for (i = 0; i < 3; i++) {
        c[i] = fair_string();
        w[i] = th_waiter_keeping(c[i], "sp-order");
        w[i].hold_ms = 10;
        w[i].id = i;
        w[i].order = &order;
        w[i].seq = seq;
        w[i].entered = &entered;
        if (i == 2) {
            /* The first two refresh (a second after queueing): odd. */
            int64_t end = th_now_ms() + 10000;
            while (th_cmd_int(&srv, "ZCARD dlock:{sp-order}:qt") != 2 &&
                   th_now_ms() < end)
                th_sleep_ms(20);
            assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{sp-order}:qt"), 2);
        }
        assert_int_equal(th_waiter_start(&w[i]), 0);
        assert_int_equal(th_await_queued(&srv, "sp-order", i + 1), 0);
    }
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (i = 0; i < 3; i++) {
        assert_int_equal(th_waiter_join(&w[i]), 0);
        assert_int_equal(w[i].rc, DLOCK_OK);
        dlock_client_free(c[i]);
    }
    print_message("served: %d %d %d\n", seq[0], seq[1], seq[2]);
    for (i = 0; i < 3; i++)
        assert_int_equal(seq[i], i);
    dlock_client_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dead_default_place),
        cmocka_unit_test(test_order_kept),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
