/*
 * waiting_fair_lease.c - a fair hand-over gives the new owner a short
 * lease until it confirms, so that a waiter that dies while being handed
 * the lock holds the others up only briefly: at most 2 s, and never
 * longer than the lease the waiter asked for (a waiter with a 400 ms
 * lease that dies must not keep the lock for 2 s; the chaos suite's
 * holder_kill9 scenario found it). Over tcp, tls and unix. The same in
 * the string layout, whose queue keeps such a waiter's lease in its
 * deadline entry (an odd ticket: s_place.luainc) while a waiter with the
 * defaults has none.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

typedef struct waiter {
    dlock_client *c;
    int64_t lease;
    int rc;
    long long pttl; /* the lock's PTTL right after the hand-over */
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    dlock_lock *l;
    w->rc = dlock_lock_acquire(&l, w->c, "fl-lock", 10000, w->lease);
    if (w->rc == DLOCK_OK) {
        w->pttl = th_cmd_int(&srv, "PTTL dlock:{fl-lock}");
        dlock_lock_release(l);
    }
    return NULL;
}

/* A fair client of srv, in the string layout (retention 0) when string. */
static dlock_client *fair_client(int string)
{
    const char *url = th_url(&srv);
    return string ? th_client_string_wait(url, 0, DLOCK_WAIT_FAIR)
                  : th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
}

/* Hand the lock to a waiter with LEASE; return the lock's PTTL then. */
static long long handed_pttl(int64_t lease, int string)
{
    dlock_client *a = fair_client(string);
    dlock_client *b = fair_client(string);
    waiter w = {b, lease, -1, 0};
    dlock_lock *l;
    pthread_t t;
    int64_t end;
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(dlock_lock_acquire(&l, a, "fl-lock", 0, 10000), DLOCK_OK);
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "ZCARD dlock:{fl-lock}:q") != 1 &&
           th_now_ms() < end)
        th_sleep_ms(5);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{fl-lock}:q"), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
    return w.pttl;
}

static void test_short_lease(void **state)
{
    long long p;
    (void)state;
    p = handed_pttl(400, 0);
    fprintf(stderr, "handed with lease 400: PTTL %lld\n", p);
    assert_true(p > 0 && p <= 400);
}

static void test_short_lease_string(void **state)
{
    long long p;
    (void)state;
    p = handed_pttl(400, 1);
    fprintf(stderr, "string layout, handed with lease 400: PTTL %lld\n", p);
    assert_true(p > 0 && p <= 400);
}

static void test_long_lease_string(void **state)
{
    long long p;
    (void)state;
    p = handed_pttl(30000, 1);
    fprintf(stderr, "string layout, handed with lease 30000: PTTL %lld\n", p);
    assert_true(p > 0 && p <= 2000);
}

static void test_long_lease(void **state)
{
    long long p;
    (void)state;
    p = handed_pttl(30000, 0);
    fprintf(stderr, "handed with lease 30000: PTTL %lld\n", p);
    assert_true(p > 0 && p <= 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_lease),
        cmocka_unit_test(test_long_lease),
        cmocka_unit_test(test_short_lease_string),
        cmocka_unit_test(test_long_lease_string),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
