/*
 * loop_multi.c - several locks at once through the event-loop API
 * (dlock_loop_lock_all) against a real redis-server: all taken, in the
 * caller's order in dlock_op_holds; one held elsewhere makes a try fail
 * and gives back those taken; a cancel, and freeing the loop, give back
 * what was taken; two
 * waits on the same names in opposite orders do not deadlock.
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

typedef struct got {
    int done, status, n;
    dlock_hold *h[4];
    char err[256];
} got;

static void all_cb(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    got *g = ud;
    (void)hold;
    g->status = status;
    g->n = status == DLOCK_OK ? dlock_op_holds(op, g->h) : 0;
    snprintf(g->err, sizeof g->err, "%s", dlock_op_errmsg(op));
    g->done = 1;
}

static void release_all(dlock_loop *l, got *g)
{
    int i;
    for (i = 0; i < g->n; i++) {
        th_seen s = {0};
        assert_int_equal(dlock_loop_release(NULL, l, g->h[i], th_note, &s),
                         DLOCK_OK);
        assert_int_equal(th_loop_run(&l, 1, &s.done), 0);
        assert_int_equal(s.status, DLOCK_OK);
    }
}

static void test_all(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock_loop *ls[2] = {NULL, NULL};
    const char *names[3] = {"lm:c", "lm:a", "lm:b"};
    const char *rev[3] = {"lm:b", "lm:a", "lm:c"};
    dlock_loop_acquire o;
    got g, h, x;
    th_seen b = {0};
    dlock_op *op = NULL;
    (void)state;
    assert_int_equal(dlock_loop_new(&ls[0], c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&ls[1], c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    memset(&g, 0, sizeof g);
    assert_int_equal(dlock_loop_lock_all(NULL, ls[0], names, 3, &o, all_cb, &g),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &g.done), 0);
    assert_int_equal(g.status, DLOCK_OK);
    assert_int_equal(g.n, 3);
    assert_string_equal(dlock_hold_name(g.h[0]), "lm:c");
    assert_string_equal(dlock_hold_name(g.h[2]), "lm:b");
    release_all(ls[0], &g);
    /* lm:b held elsewhere: a try fails, lm:a (taken before it) is back. */
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lm:b", &o, th_note, &b),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&ls[1], 1, &b.done), 0);
    memset(&g, 0, sizeof g);
    assert_int_equal(dlock_loop_lock_all(NULL, ls[0], names, 3, &o, all_cb, &g),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &g.done), 0);
    assert_int_equal(g.status, DLOCK_BUSY);
    assert_non_null(strstr(g.err, "lm:b"));
    th_loop_run_for(ls, 1, 100);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lm:a}"), 0);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lm:c}"), 0);
    /* A cancel while it waits for lm:b gives lm:a back. */
    o.wait_ms = -1;
    memset(&x, 0, sizeof x);
    assert_int_equal(dlock_loop_lock_all(&op, ls[0], names, 3, &o, all_cb, &x),
                     DLOCK_OK);
    th_loop_run_for(ls, 1, 200);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lm:a}"), 1);
    dlock_op_cancel(op);
    assert_int_equal(x.status, DLOCK_CANCELED);
    th_loop_run_for(ls, 1, 200);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lm:a}"), 0);
    /* Freeing the loop while it waits: cancelled, lm:a given back. */
    {
        dlock_loop *l3 = NULL;
        memset(&x, 0, sizeof x);
        assert_int_equal(dlock_loop_new(&l3, c), DLOCK_OK);
        assert_int_equal(
            dlock_loop_lock_all(NULL, l3, names, 3, &o, all_cb, &x), DLOCK_OK);
        th_loop_run_for(&l3, 1, 200);
        assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lm:a}"), 1);
        dlock_loop_free(l3);
        assert_int_equal(x.status, DLOCK_CANCELED);
        th_sleep_ms(100);
        assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lm:a}"), 0);
    }
    {
        th_seen r = {0};
        assert_int_equal(dlock_loop_release(NULL, ls[1], b.hold, th_note, &r),
                         DLOCK_OK);
        assert_int_equal(th_loop_run(&ls[1], 1, &r.done), 0);
    }
    /* Opposite orders, both waiting: both complete. */
    o.wait_ms = 20000;
    memset(&g, 0, sizeof g);
    memset(&h, 0, sizeof h);
    assert_int_equal(dlock_loop_lock_all(NULL, ls[0], names, 3, &o, all_cb, &g),
                     DLOCK_OK);
    assert_int_equal(dlock_loop_lock_all(NULL, ls[1], rev, 3, &o, all_cb, &h),
                     DLOCK_OK);
    {
        /* Whichever got all three first releases them; then the other. */
        int any = 0;
        int64_t end = th_now_ms() + 30000;
        while (!any) {
            assert_true(th_now_ms() < end);
            th_loop_run_for(ls, 2, 10);
            any = g.done || h.done;
        }
        if (!g.done) {
            assert_int_equal(h.status, DLOCK_OK);
            release_all(ls[1], &h);
            assert_int_equal(th_loop_run(ls, 2, &g.done), 0);
            assert_int_equal(g.status, DLOCK_OK);
            release_all(ls[0], &g);
        } else {
            assert_int_equal(g.status, DLOCK_OK);
            release_all(ls[0], &g);
            assert_int_equal(th_loop_run(ls, 2, &h.done), 0);
            assert_int_equal(h.status, DLOCK_OK);
            release_all(ls[1], &h);
        }
    }
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
