/*
 * fenced_release.c - dlock_lock_fenced_set_release against a real
 * redis-server (the blocking twin of the loop's store-and-release):
 * stored with the lock's token (issued by the store for a plain-SET
 * hold) and released in one script; a lease lost stores nothing; a newer
 * fence is STALE and still releases; the refusals (hash layout, a
 * re-entered lock, bad arguments) leave the lock held.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

/* A notify client of the string layout without fence retention: a free
 * name is taken by a plain SET NX PX, its token issued lazily. */
static dlock_client *string_client(void)
{
    dlock_client *c = th_client_string(th_url(&srv), 0);
    assert_non_null(c);
    return c;
}

/* KEY's value and fence as fenced_get reads them. */
static void fenced(dlock_client *c, const char *key, char out[64],
                   uint64_t *fence)
{
    char *v = NULL;
    size_t len = 0;
    assert_int_equal(dlock_fenced_get(c, key, &v, &len, fence), DLOCK_OK);
    snprintf(out, 64, "%s", v != NULL ? v : "(nil)");
    free(v);
}

static void test_stored_and_released(void **state)
{
    dlock_client *c = string_client();
    dlock_lock *l = NULL;
    uint64_t fence = 0;
    char got[64];
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "fr2:a", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l, "fr2:res", "body", 4),
                     DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fr2:a}"), 0);
    fenced(c, "fr2:res", got, &fence);
    assert_string_equal(got, "body");
    assert_true(fence > 0); /* issued by the store */
    /* The next holder's store is accepted over it (a later token). */
    assert_int_equal(dlock_lock_acquire(&l, c, "fr2:a", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l, "fr2:res", "two", 3),
                     DLOCK_OK);
    {
        uint64_t f2 = 0;
        fenced(c, "fr2:res", got, &f2);
        assert_string_equal(got, "two");
        assert_true(f2 > fence);
    }
    dlock_client_free(c);
}

static void test_lost_and_stale(void **state)
{
    dlock_client *c = string_client();
    dlock_lock *l = NULL;
    uint64_t fence = 0;
    char got[64];
    (void)state;
    /* Lost: another owner holds the name now. */
    assert_int_equal(dlock_lock_acquire(&l, c, "fr2:b", 0, 30000), DLOCK_OK);
    th_cmd_int(&srv, "SET dlock:{fr2:b} %s PX 30000", "other:0:1 1 5");
    assert_int_equal(dlock_lock_fenced_set_release(l, "fr2:bres", "x", 1),
                     DLOCK_NOT_OWNER);
    assert_int_equal(th_cmd_int(&srv, "EXISTS fr2:bres"), 0);
    th_cmd_int(&srv, "DEL dlock:{fr2:b}");
    /* Stale: a newer fence; released all the same. */
    th_cmd_int(&srv, "SET fr2:bres %s", "9000000000000000 newer");
    assert_int_equal(dlock_lock_acquire(&l, c, "fr2:b", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l, "fr2:bres", "old", 3),
                     DLOCK_STALE);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fr2:b}"), 0);
    fenced(c, "fr2:bres", got, &fence);
    assert_string_equal(got, "newer");
    dlock_client_free(c);
}

static void test_refused(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0); /* the hash layout */
    dlock_lock *l = NULL, *l2 = NULL;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "fr2:h", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l, "fr2:hres", "v", 1),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "string layout"));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK); /* still held */
    dlock_client_free(c);

    c = string_client();
    assert_int_equal(dlock_lock_acquire(&l, c, "fr2:r", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l2, c, "fr2:r", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l2, "fr2:rres", "v", 1),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "re-entered"));
    assert_int_equal(dlock_lock_fenced_set_release(l2, "", "v", 1),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_fenced_set_release(l2, "k", NULL, 1),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_fenced_set_release(NULL, "k", "v", 1),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l, "fr2:rres", "v", 1),
                     DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fr2:r}"), 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stored_and_released),
        cmocka_unit_test(test_lost_and_stale),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
