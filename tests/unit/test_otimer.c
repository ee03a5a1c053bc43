/*
 * test_otimer.c - unit test of a loop's clock of waiting operations
 * (src/loop/otimer.c): ops put on it at times, moved, taken off, come off
 * in time order, each op always knowing its entry; an empty clock says -1.
 * Random operations are checked against a plain array of the expected
 * times.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loop/loop_impl.h"

#define NOPS 300

static dlock_loop loop;
static dlock_op ops[NOPS];
static int64_t want[NOPS]; /* each op's time on the clock, -1: off */

/* Every entry's op points back at it, the heap order holds, and the
 * entries are exactly the ops with a time. */
static void check_shape(void)
{
    size_t i, on = 0;
    for (i = 0; i < loop.notm; i++) {
        otimer_ent *e = &loop.otm[i];
        assert_int_equal(e->op->tidx, i + 1);
        assert_int_equal(e->t, want[e->op - ops]);
        if (i > 0)
            assert_true(loop.otm[(i - 1) / 2].t <= e->t);
    }
    for (i = 0; i < NOPS; i++) {
        if (want[i] >= 0)
            on++;
        else
            assert_int_equal(ops[i].tidx, 0);
    }
    assert_int_equal(on, loop.notm);
}

static int64_t earliest(void)
{
    int64_t m = -1;
    size_t i;
    for (i = 0; i < NOPS; i++)
        if (want[i] >= 0 && (m < 0 || want[i] < m))
            m = want[i];
    return m;
}

static void test_empty(void **state)
{
    (void)state;
    memset(&loop, 0, sizeof loop);
    assert_int_equal(dloop__otimer_min(&loop), -1);
    assert_null(dloop__otimer_pop(&loop, 1000));
    memset(ops, 0, sizeof ops);
    dloop__otimer_del(&loop, &ops[0]); /* not on it: nothing */
    assert_int_equal(loop.notm, 0);
}

static void test_random(void **state)
{
    int round;
    size_t i;
    (void)state;
    memset(&loop, 0, sizeof loop);
    memset(ops, 0, sizeof ops);
    for (i = 0; i < NOPS; i++)
        want[i] = -1;
    srand(7);
    for (round = 0; round < 20000; round++) {
        size_t k = (size_t)rand() % NOPS;
        int what = rand() % 10;
        if (what < 6) { /* put on, or move (earlier or later) */
            int64_t t = rand() % 1000;
            assert_int_equal(dloop__otimer_set(&loop, &ops[k], t), DLOCK_OK);
            want[k] = t;
        } else if (what < 8) {
            dloop__otimer_del(&loop, &ops[k]);
            want[k] = -1;
        } else { /* pop what is due by a time */
            int64_t now = rand() % 1000;
            dlock_op *op = dloop__otimer_pop(&loop, now);
            int64_t m = earliest();
            if (m < 0 || m > now) {
                assert_null(op);
            } else {
                assert_non_null(op);
                assert_int_equal(want[op - ops], m);
                assert_int_equal(op->tidx, 0);
                want[op - ops] = -1;
            }
        }
        assert_int_equal(dloop__otimer_min(&loop), earliest());
        if (round % 97 == 0)
            check_shape();
    }
    check_shape();
    /* Drained in time order. */
    {
        int64_t last = -1;
        dlock_op *op;
        while ((op = dloop__otimer_pop(&loop, 1000)) != NULL) {
            assert_true(want[op - ops] >= last);
            last = want[op - ops];
            want[op - ops] = -1;
        }
        assert_int_equal(loop.notm, 0);
        assert_int_equal(earliest(), -1);
    }
    free(loop.otm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
