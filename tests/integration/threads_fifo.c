/*
 * threads_fifo.c - the threads of one process waiting on one lock are
 * served in arrival order (issue 29 item 1): dlock.h says the other
 * threads of a process "wait their turn in-process", and that turn was
 * taken by whichever thread woke first (8 threads were served in orders
 * like 0123675, and one could wait past its deadline while later ones
 * got in). Fair and notify strategies, with normal releases and with
 * leases that run out (the holder never releases).
 *
 * Arrival: thread i starts only once thread i-1's first attempt has
 * found the lock busy (the client's busy counter) and had 50 ms to join
 * the turn line; the order asserted is the order the threads were
 * started in.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"
#include "th_waiter.h"

#define NTHREADS 8

/* Start NTHREADS waiters of one client on NAME, one after another, while
 * another client holds it; then release (or let the lease run out) and
 * check they entered in the order they came. */
static void served_in_order(int strategy, int64_t lease_ms, int64_t hold_ms,
                            int release)
{
    char name[64];
    dlock_client *a = fixture_client(strategy, 0, 0);
    dlock_client *b = fixture_client(strategy, 0, 0);
    th_waiter w[NTHREADS];
    atomic_int order = 0, entered = 0;
    int seq[NTHREADS];
    dlock_lock *l;
    dlock_stats st;
    int i;

    snprintf(name, sizeof name, "fifo-%d-%d", strategy, release);
    assert_int_equal(dlock_lock_acquire(&l, a, name, 0, lease_ms), DLOCK_OK);
    memset(w, 0, sizeof w);
    for (i = 0; i < NTHREADS; i++) {
        int64_t end = th_now_ms() + 10000;
        w[i].c = b;
        w[i].name = name;
        w[i].wait_ms = 60000;
        w[i].lease_ms = lease_ms;
        w[i].hold_ms = hold_ms;
        w[i].id = i;
        w[i].order = &order;
        w[i].seq = seq;
        w[i].entered = &entered;
        assert_int_equal(th_waiter_start(&w[i]), 0);
        do {
            dlock_client_stats(b, &st);
            th_sleep_ms(2);
        } while (st.busy < (uint64_t)i + 1 && th_now_ms() < end);
        assert_true(st.busy >= (uint64_t)i + 1);
        th_sleep_ms(50);
    }
    if (release)
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    else
        dlock_lock_detach(l); /* its lease runs out */
    for (i = 0; i < NTHREADS; i++) {
        assert_int_equal(th_waiter_join(&w[i]), 0);
        assert_int_equal(w[i].rc, DLOCK_OK);
        if (w[i].l != NULL)
            dlock_lock_detach(w[i].l); /* kept: its lease ran out */
    }
    fprintf(stderr, "strategy %d release %d: served", strategy, release);
    for (i = 0; i < NTHREADS; i++)
        fprintf(stderr, " %d", seq[i]);
    fprintf(stderr, "\n");
    for (i = 0; i < NTHREADS; i++)
        assert_int_equal(seq[i], i);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void test_fair_release(void **state)
{
    (void)state;
    served_in_order(DLOCK_WAIT_FAIR, 10000, 20, 1);
}

static void test_notify_release(void **state)
{
    (void)state;
    served_in_order(DLOCK_WAIT_NOTIFY, 10000, 20, 1);
}

/* Every holder keeps the lock until its 300 ms lease runs out: each
 * thread waits out the one before it. */
static void test_fair_expiry(void **state)
{
    (void)state;
    served_in_order(DLOCK_WAIT_FAIR, 300, TH_WAITER_KEEP, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fair_release),
        cmocka_unit_test(test_notify_release),
        cmocka_unit_test(test_fair_expiry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
