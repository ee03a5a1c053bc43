/*
 * loop_outage.c - the event-loop API (include/dlock_loop.h) with its
 * server killed under waiting operations: a bounded wait ends (an error
 * or DLOCK_TIMEDOUT, never a hang), a try fails at once with a message,
 * a wait without a bound rides the outage out and acquires once the
 * server is back, and the hold that was held is reported lost.
 */
#include <poll.h>
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

typedef th_seen seen;
#define note th_note

static int lost_n, lost_status;

static void on_lost(dlock_hold *h, int status, void *ud)
{
    (void)h;
    (void)ud;
    lost_n++;
    lost_status = status;
}

/* Run the loops until *flag, or for ms when flag is NULL. */
static void run(dlock_loop **ls, int n, const int *flag, int64_t ms)
{
    if (flag == NULL)
        th_loop_run_for(ls, n, ms);
    else
        assert_int_equal(th_loop_run(ls, n, flag), 0);
}

static void test_killed_under_waiters(void **state)
{
    dlock_client *c = fixture_client(0, 300, 300);
    dlock_loop *ls[3] = {NULL, NULL, NULL};
    dlock_loop_acquire o;
    seen a = {0}, b = {0}, d = {0}, t = {0};
    int i;
    (void)state;
    for (i = 0; i < 3; i++)
        assert_int_equal(dlock_loop_new(&ls[i], c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 2000;
    o.on_lost = on_lost;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "lo:k", &o, note, &a),
                     DLOCK_OK);
    run(ls, 1, &a.done, 0);
    assert_int_equal(a.status, DLOCK_OK);
    o.on_lost = NULL;
    o.wait_ms = 1500; /* a bounded fair wait */
    o.strategy = DLOCK_WAIT_FAIR;
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lo:k", &o, note, &b),
                     DLOCK_OK);
    o.wait_ms = -1; /* an unbounded notify wait */
    o.strategy = DLOCK_WAIT_NOTIFY;
    assert_int_equal(dlock_loop_lock(NULL, ls[2], "lo:k", &o, note, &d),
                     DLOCK_OK);
    run(ls, 3, NULL, 300);
    assert_int_equal(b.done + d.done, 0);
    th_server_kill9(&srv);
    run(ls, 3, &b.done, 0); /* ends: never hangs */
    assert_int_not_equal(b.status, DLOCK_OK);
    assert_null(b.hold);
    /* A try while the server is down fails with a message. */
    o.wait_ms = 0;
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lo:t", &o, note, &t),
                     DLOCK_OK);
    run(ls, 3, &t.done, 0);
    assert_true(t.status <= DLOCK_EINVAL);
    assert_true(strlen(t.err) > 0);
    assert_int_equal(d.done, 0); /* the unbounded wait rides it out */
    run(ls, 3, NULL, 2500);      /* past the holder's lease */
    assert_int_equal(lost_n, 1); /* the holder is told */
    assert_int_equal(d.done, 0);
    assert_int_equal(th_server_restart(&srv), 0);
    run(ls, 3, &d.done, 0);
    assert_int_equal(d.status, DLOCK_OK);
    for (i = 0; i < 3; i++)
        dlock_loop_free(ls[i]);
    dlock_client_free(c);
}

/* A server that stops answering (SIGSTOP): a try fails with
 * DLOCK_ETIMEDOUT after the command timeout, a bounded wait ends, and
 * after SIGCONT the loop works again on a fresh connection. */
static void test_paused(void **state)
{
    dlock_client *c = fixture_client(0, 300, 300);
    dlock_loop *l = NULL;
    dlock_loop_acquire o;
    seen t = {0}, w = {0}, a = {0};
    (void)state;
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:p0", &o, note, &a), DLOCK_OK);
    run(&l, 1, &a.done, 0); /* the connection is open */
    assert_int_equal(a.status, DLOCK_OK);
    th_server_pause(&srv);
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:p1", &o, note, &t), DLOCK_OK);
    o.wait_ms = 1000;
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:p2", &o, note, &w), DLOCK_OK);
    run(&l, 1, &t.done, 0);
    assert_int_equal(t.status, DLOCK_ETIMEDOUT);
    assert_non_null(strstr(t.err, "no answer in time"));
    run(&l, 1, &w.done, 0);
    assert_int_not_equal(w.status, DLOCK_OK);
    th_server_resume(&srv);
    memset(&t, 0, sizeof t);
    o.wait_ms = 0;
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:p3", &o, note, &t), DLOCK_OK);
    run(&l, 1, &t.done, 0);
    assert_int_equal(t.status, DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paused),
        cmocka_unit_test(test_killed_under_waiters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
