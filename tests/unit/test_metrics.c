/*
 * test_metrics.c - unit tests of the histogram buckets (src/metrics.c):
 * every bound falls in its own bucket, a value just above it in the next,
 * the last bucket takes everything beyond 5000 s, negative values count
 * as 0, and the public bounds are the 1-2.5-5 series.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hold/metrics.h"

/* Bounds: 100 us, 250 us, 500 us, 1 ms ... 5000 s; -1 past the end. */
static void test_bounds(void **state)
{
    static const int64_t mant[3] = {100, 250, 500};
    int64_t decade = 1;
    int i;
    (void)state;
    for (i = 0; i < DLOCK_HIST_BUCKETS - 1; i++) {
        assert_int_equal(dlock_histogram_bound_us(i), mant[i % 3] * decade);
        if (i % 3 == 2)
            decade *= 10;
    }
    assert_int_equal(dlock_histogram_bound_us(DLOCK_HIST_BUCKETS - 1), -1);
    assert_int_equal(dlock_histogram_bound_us(-1), -1);
    assert_int_equal(dlock_histogram_bound_us(DLOCK_HIST_BUCKETS), -1);
}

/* A bound is in its bucket (le), one more is in the next. */
static void test_bucket_edges(void **state)
{
    int i;
    (void)state;
    assert_int_equal(dlock__hist_bucket(0), 0);
    for (i = 0; i < DLOCK_HIST_BUCKETS - 1; i++) {
        int64_t b = dlock_histogram_bound_us(i);
        assert_int_equal(dlock__hist_bucket(b), i);
        assert_int_equal(dlock__hist_bucket(b + 1), i + 1);
    }
    assert_int_equal(dlock__hist_bucket(INT64_MAX), DLOCK_HIST_BUCKETS - 1);
}

/* Adding values: counts and sum; a negative duration counts as 0. */
static void test_add(void **state)
{
    dlock__hist h;
    (void)state;
    memset(&h, 0, sizeof h);
    dlock__hist_add(&h, -5);
    dlock__hist_add(&h, 100);
    dlock__hist_add(&h, 1500000);
    assert_int_equal(atomic_load(&h.bucket[0]), 2);
    assert_int_equal(atomic_load(&h.bucket[13]), 1); /* (1 s, 2.5 s] */
    assert_int_equal(atomic_load(&h.sum_us), 1500100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_bucket_edges),
        cmocka_unit_test(test_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
