/*
 * multi_lapse.c - dlock_lock_acquire_all never returns a set with a lapsed
 * member, against a real redis-server. The first name's lease runs while
 * the call waits for a later one (here without the watchdog, and shorter
 * than the wait): once all are taken the call finds the first one run
 * out, gives all back and takes them again, so that on DLOCK_OK every
 * lock is valid and the server names each one's owner.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

static dlock_client *client(void)
{
    return fixture_client(DLOCK_WAIT_FAIR, 0, 0);
}

/* 1 when the server names L's owner the holder of its name. */
static int server_owner(dlock_client *c, dlock_lock *l)
{
    dlock_info info;
    assert_int_equal(dlock_lock_inspect(c, dlock_lock_name(l), &info),
                     DLOCK_OK);
    return strcmp(info.owner, dlock_lock_owner(l)) == 0;
}

static void test_first_lease_runs_out_while_waiting(void **state)
{
    const char *names[2] = {"ml:b", "ml:a"};
    dlock_client *c1 = client(), *c2 = client();
    dlock_lock *hold = NULL, *l[2];
    dlock_acquire_options ao;
    (void)state;

    /* Another client holds ml:b for 1.2 s and never releases it. */
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 1200;
    assert_int_equal(dlock_lock_acquire_ex(&hold, c1, "ml:b", &ao), DLOCK_OK);

    /* ml:a (taken first: the global order) has a 400 ms lease and no
     * watchdog, and the call waits about 1.2 s for ml:b. */
    ao.lease_ms = 400;
    ao.wait_ms = 10000;
    assert_int_equal(dlock_lock_acquire_all(l, c2, names, 2, &ao), DLOCK_OK);
    for (int i = 0; i < 2; i++) {
        assert_true(dlock_lock_validity_ms(l[i]) > 0);
        assert_int_equal(dlock_lock_status(l[i]), DLOCK_OK);
        assert_true(server_owner(c2, l[i]));
    }
    assert_int_equal(dlock_lock_release_all(l, 2), DLOCK_OK);
    dlock_lock_release(hold); /* long expired: NOT_OWNER */
    dlock_client_free(c1);
    dlock_client_free(c2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_lease_runs_out_while_waiting),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
