/*
 * multikey.c - several locks at once (dlock_lock_acquire_all) against a
 * real redis-server: all or nothing, rollback of a partial acquisition,
 * the wait bounding the whole call, one token per key, loss of one key
 * reported like a single lock's, and no deadlock when threads ask for the
 * same keys in opposite orders (with no overlap on any key).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

static dlock_client *client(void)
{
    return fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
}

/* Is NAME held by anyone, as the server says? */
static int held(dlock_client *c, const char *name)
{
    dlock_info info;
    assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_OK);
    return info.held;
}

static void test_all_and_release(void **state)
{
    const char *names[3] = {"mk:b", "mk:a", "mk:c"};
    dlock_lock *l[3];
    dlock_client *c = client();
    (void)state;

    assert_int_equal(dlock_lock_acquire_all(l, c, names, 3, NULL), DLOCK_OK);
    for (int i = 0; i < 3; i++) {
        assert_non_null(l[i]);
        assert_string_equal(dlock_lock_name(l[i]), names[i]);
        assert_true(dlock_lock_token(l[i]) > 0);
        assert_true(held(c, names[i]));
    }
    assert_int_equal(dlock_lock_release_all(l, 3), DLOCK_OK);
    for (int i = 0; i < 3; i++) {
        assert_null(l[i]);
        assert_false(held(c, names[i]));
    }
    dlock_client_free(c);
}

static void test_bad_input(void **state)
{
    const char *dup[3] = {"mk:x", "mk:y", "mk:x"};
    const char *withnull[2] = {"mk:x", NULL};
    dlock_lock *l[3] = {NULL, NULL, NULL};
    dlock_client *c = client();
    (void)state;

    assert_int_equal(dlock_lock_acquire_all(l, c, dup, 3, NULL), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "twice"));
    assert_int_equal(dlock_lock_acquire_all(l, c, dup, 0, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_acquire_all(l, c, withnull, 2, NULL),
                     DLOCK_EINVAL);
    assert_int_equal(
        dlock_lock_acquire_all(l, c, dup, DLOCK_MULTI_MAX + 1, NULL),
        DLOCK_EINVAL);
    assert_int_equal(dlock_lock_acquire_all(NULL, c, dup, 2, NULL),
                     DLOCK_EINVAL);
    assert_false(held(c, "mk:x"));
    assert_false(held(c, "mk:y"));
    assert_int_equal(dlock_lock_release_all(NULL, 1), DLOCK_EINVAL);
    dlock_client_free(c);
}

/* A key in the middle of the order is held elsewhere: the ones before it
 * were taken and must be given back; nothing is left held. */
static void test_rollback(void **state)
{
    const char *names[3] = {"rb:c", "rb:a", "rb:b"};
    dlock_lock *l[3], *other = NULL;
    dlock_acquire_options ao;
    dlock_client *c = client(), *c2 = client();
    int64_t t0;
    (void)state;

    assert_int_equal(dlock_lock_acquire(&other, c2, "rb:b", 0, 30000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_acquire_all(l, c, names, 3, NULL), DLOCK_BUSY);
    assert_non_null(strstr(dlock_errmsg(c), "rb:b"));
    for (int i = 0; i < 3; i++)
        assert_null(l[i]);
    assert_false(held(c, "rb:a"));
    assert_false(held(c, "rb:c"));

    /* With a wait: the wait bounds the whole call, and it ends in
     * TIMEDOUT with nothing held. */
    dlock_acquire_options_init(&ao);
    ao.wait_ms = 300;
    t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire_all(l, c, names, 3, &ao),
                     DLOCK_TIMEDOUT);
    assert_true(th_now_ms() - t0 >= 300);
    assert_false(held(c, "rb:a"));
    assert_false(held(c, "rb:c"));
    assert_true(held(c, "rb:b"));

    /* Once b is free the same call gets all three. */
    assert_int_equal(dlock_lock_release(other), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire_all(l, c, names, 3, NULL), DLOCK_OK);
    assert_int_equal(dlock_lock_release_all(l, 3), DLOCK_OK);
    dlock_client_free(c2);
    dlock_client_free(c);
}

static atomic_int lost_calls;
static char lost_name[64];

static void on_lost(dlock_lock *lock, void *ud)
{
    (void)ud;
    snprintf(lost_name, sizeof lost_name, "%s", dlock_lock_name(lock));
    atomic_fetch_add(&lost_calls, 1);
}

/* One key deleted behind the holder's back: its own callback and status
 * say so, as for a single lock; the others stay held. */
static void test_one_lost(void **state)
{
    const char *names[2] = {"lo:a", "lo:b"};
    dlock_lock *l[2];
    dlock_acquire_options ao;
    dlock_client *c = client();
    int64_t t0;
    (void)state;

    dlock_acquire_options_init(&ao);
    ao.lease_ms = 600;
    ao.watchdog = 1;
    ao.on_lost = on_lost;
    atomic_store(&lost_calls, 0);
    assert_int_equal(dlock_lock_acquire_all(l, c, names, 2, &ao), DLOCK_OK);
    th_cmd_int(&srv, "DEL dlock:{lo:b}");
    t0 = th_now_ms();
    while (atomic_load(&lost_calls) == 0 && th_now_ms() - t0 < 5000)
        th_sleep_ms(20);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_string_equal(lost_name, "lo:b");
    assert_int_equal(dlock_lock_status(l[1]), DLOCK_LOST);
    assert_int_equal(dlock_lock_status(l[0]), DLOCK_OK);
    th_sleep_ms(700); /* past the lease: a is renewed */
    assert_true(held(c, "lo:a"));
    assert_int_equal(dlock_lock_release_all(l, 2), DLOCK_LOST);
    assert_false(held(c, "lo:a"));
    dlock_client_free(c);
}

/* Threads asking for {a,b}, {b,a} and {b,c}: without one global order two
 * of them would each hold one key and wait for the other's. Each key
 * guards a counter updated with a slow read-modify-write: a lost update
 * would show an overlap. */
#define DL_THREADS 6
#define DL_ROUNDS 15

static const char *const sets[3][2] = {
    {"dl:a", "dl:b"}, {"dl:b", "dl:a"}, {"dl:b", "dl:c"}};

static void *dl_worker(void *arg)
{
    int k = (int)(intptr_t)arg;
    const char *url = th_url(&srv);
    dlock_client *c = th_client(&url, 1, DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_acquire_options ao;
    long fails = 0;

    if (c == NULL)
        return (void *)1;
    dlock_acquire_options_init(&ao);
    ao.wait_ms = 20000;
    ao.lease_ms = 10000;
    for (int r = 0; r < DL_ROUNDS; r++) {
        dlock_lock *l[2];
        const char *const *names = sets[k % 3];
        int rc = dlock_lock_acquire_all(l, c, names, 2, &ao);

        if (rc != DLOCK_OK) {
            fprintf(stderr, "worker %d: %s: %s\n", k, dlock_strerror(rc),
                    dlock_errmsg(c));
            fails++;
            continue;
        }
        for (int i = 0; i < 2; i++) {
            char key[32];
            snprintf(key, sizeof key, "count:%s", names[i]);
            if (th_rmw(&srv, key) != 0)
                fails++;
        }
        if (dlock_lock_release_all(l, 2) != DLOCK_OK)
            fails++;
    }
    dlock_client_free(c);
    return (void *)fails;
}

static void test_no_deadlock(void **state)
{
    pthread_t t[DL_THREADS];
    long total = 0, want[3] = {0, 0, 0};
    const char *keys[3] = {"dl:a", "dl:b", "dl:c"};
    dlock_client *c = client();
    (void)state;

    for (int k = 0; k < DL_THREADS; k++)
        assert_int_equal(
            pthread_create(&t[k], NULL, dl_worker, (void *)(intptr_t)k), 0);
    for (int k = 0; k < DL_THREADS; k++) {
        void *r;
        pthread_join(t[k], &r);
        total += (long)r;
    }
    assert_int_equal(total, 0);
    for (int k = 0; k < DL_THREADS; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                if (strcmp(sets[k % 3][i], keys[j]) == 0)
                    want[j] += DL_ROUNDS;
    for (int j = 0; j < 3; j++) {
        redisReply *r = th_cmd(&srv, "GET count:%s", keys[j]);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_int_equal(atol(r->str), want[j]);
        freeReplyObject(r);
        assert_false(held(c, keys[j]));
    }
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_and_release),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_one_lost),
        cmocka_unit_test(test_no_deadlock),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
