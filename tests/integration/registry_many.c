/*
 * registry_many.c - the registry of held locks with many holds (issue 30:
 * it is a hash table by name and thread now, grown as holds come): 300
 * locks held by one thread are each re-entered (same token, no new hold),
 * other threads do not re-enter them, the releases leave nothing behind,
 * and the table still finds what is linked after it has grown and shrunk.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

#define NHOLDS 300

typedef struct other {
    dlock_client *c;
    int busy; /* tries that found the lock held (not re-entered) */
} other;

/* Another thread tries every name once: none is re-entered. */
static void *other_main(void *arg)
{
    other *o = arg;
    char name[32];
    int i;
    for (i = 0; i < NHOLDS; i += 7) {
        dlock_lock *l;
        snprintf(name, sizeof name, "reg-%d", i);
        if (dlock_lock_acquire(&l, o->c, name, 0, 10000) == DLOCK_BUSY)
            o->busy++;
        else
            dlock_lock_release(l);
    }
    return NULL;
}

static void test_many_holds(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    static dlock_lock *l[NHOLDS], *again[NHOLDS];
    other o = {c, 0};
    pthread_t t;
    char name[32];
    int i, round;
    (void)state;
    for (round = 0; round < 2; round++) {
        for (i = 0; i < NHOLDS; i++) {
            snprintf(name, sizeof name, "reg-%d", i);
            assert_int_equal(dlock_lock_acquire(&l[i], c, name, 0, 10000),
                             DLOCK_OK);
        }
        for (i = 0; i < NHOLDS; i++) {
            snprintf(name, sizeof name, "reg-%d", i);
            assert_int_equal(dlock_lock_acquire(&again[i], c, name, 0, 10000),
                             DLOCK_OK);
            assert_int_equal(dlock_lock_token(again[i]),
                             dlock_lock_token(l[i]));
        }
        o.busy = 0;
        assert_int_equal(pthread_create(&t, NULL, other_main, &o), 0);
        pthread_join(t, NULL);
        assert_int_equal(o.busy, (NHOLDS + 6) / 7);
        /* Release in another order than taken: every level, then the
         * keys are gone. */
        for (i = NHOLDS - 1; i >= 0; i--)
            assert_int_equal(dlock_lock_release(again[i]), DLOCK_OK);
        for (i = 0; i < NHOLDS; i += 2)
            assert_int_equal(dlock_lock_release(l[i]), DLOCK_OK);
        for (i = 1; i < NHOLDS; i += 2)
            assert_int_equal(dlock_lock_release(l[i]), DLOCK_OK);
        for (i = 0; i < NHOLDS; i += 37) {
            char cmd[64];
            snprintf(cmd, sizeof cmd, "EXISTS dlock:{reg-%d}", i);
            assert_int_equal(th_cmd_int(&srv, cmd), 0);
        }
    }
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_holds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
