/*
 * test_linger.c - unit test of the subscriber thread's linger clock
 * (src/subscriber.c, dlock__sub_linger_left): a channel nobody waits on
 * is due to be unsubscribed LINGER_MS after its last waiter left, and the
 * thread's sleep is bounded by that, not by its 1 s poll period (issue
 * 29 item 5: subscriptions outlived the documented 2 s by up to 1 s).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "notify/notify_impl.h"

/* No channel, or only channels with waiters or nothing subscribed: no
 * linger. */
static void test_none(void **state)
{
    dlock__notifier n;
    chan a, b;
    (void)state;
    memset(&n, 0, sizeof n);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    assert_int_equal(dlock__sub_linger_left(&n, 1000), -1);
    n.chans = &a;
    a.next = &b;
    a.refs = 1; /* waited on */
    a.ok = 1;
    b.refs = 0; /* idle, but subscribed nowhere */
    b.idle_since = 0;
    assert_int_equal(dlock__sub_linger_left(&n, 1000), -1);
    b.ok = 2;
    b.unsent = 2; /* its UNSUBSCRIBE is already on the way */
    assert_int_equal(dlock__sub_linger_left(&n, 1000), -1);
}

/* The first idle channel's remaining linger, 0 once due. */
static void test_left(void **state)
{
    dlock__notifier n;
    chan a, b;
    (void)state;
    memset(&n, 0, sizeof n);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    n.chans = &a;
    a.next = &b;
    a.ok = 1;
    a.idle_since = 10000;
    b.ok = 3;
    b.unsent = 1; /* still subscribed on link 1 */
    b.idle_since = 10500;
    assert_int_equal(dlock__sub_linger_left(&n, 10000), LINGER_MS);
    assert_int_equal(dlock__sub_linger_left(&n, 11000), LINGER_MS - 1000);
    a.refs = 1; /* a waiter came back to a */
    assert_int_equal(dlock__sub_linger_left(&n, 11000), LINGER_MS - 500);
    assert_int_equal(dlock__sub_linger_left(&n, 10500 + LINGER_MS), 0);
    assert_int_equal(dlock__sub_linger_left(&n, 99999), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_left),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
