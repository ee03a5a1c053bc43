/*
 * lock_fence_rollback.c - fencing tokens across a failover (issue 17): a
 * replica promoted after it missed the last acquisitions has a fence
 * counter that is behind. Simulated by rolling the fence hash back to an
 * older value (and by deleting it); every acquire path must still hand
 * out a token above every token issued before: a plain acquire, the
 * default (fair) first try, a fair waiter taking a free lock from the
 * queue, and a fair hand-over by the release script. And a release
 * never leaves the fence hash without a TTL.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

static dlock_client *client_for(int strategy)
{
    return fixture_client(strategy, 0, 0);
}

/* Set NAME's fence counter back to older (or delete it when 0), as a
 * replica that missed the last increments would have it. */
static void roll_back(const char *name, uint64_t older)
{
    redisReply *r;
    if (older == 0)
        r = th_cmd(&srv, "DEL dlock:{%s}:f", name);
    else
        r = th_cmd(&srv, "HSET dlock:{%s}:f n %llu", name,
                   (unsigned long long)older);
    assert_non_null(r);
    freeReplyObject(r);
}

/* Acquire NAME (try once), return its token, release it. */
static uint64_t token_of(dlock_client *c, const char *name)
{
    dlock_lock *l;
    uint64_t t;
    assert_int_equal(dlock_lock_acquire(&l, c, name, 0, 10000), DLOCK_OK);
    t = dlock_lock_token(l);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    return t;
}

/* Plain and default first-try acquires: the token after a roll-back (to
 * just below the last token, to far below it, to nothing) is still above
 * the last one. */
static void test_try_paths(void **state)
{
    int strategies[2] = {DLOCK_WAIT_SPIN, DLOCK_WAIT_FAIR};
    int s;
    (void)state;
    for (s = 0; s < 2; s++) {
        dlock_client *c = client_for(strategies[s]);
        const char *name = s == 0 ? "fr-plain" : "fr-fair";
        uint64_t t1 = token_of(c, name), t2, t3, t4;
        roll_back(name, t1 - 5);
        t2 = token_of(c, name);
        fprintf(stderr, "%s: %llu, after roll-back to %llu: %llu\n", name,
                (unsigned long long)t1, (unsigned long long)(t1 - 5),
                (unsigned long long)t2);
        assert_true(t2 > t1);
        roll_back(name, 1000);
        t3 = token_of(c, name);
        assert_true(t3 > t2);
        roll_back(name, 0);
        t4 = token_of(c, name);
        assert_true(t4 > t3);
        dlock_client_free(c);
    }
}

typedef struct waiter {
    dlock_client *c;
    const char *name;
    int rc;
    uint64_t token;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    dlock_lock *l;
    w->rc = dlock_lock_acquire(&l, w->c, w->name, 10000, 10000);
    if (w->rc == DLOCK_OK) {
        w->token = dlock_lock_token(l);
        dlock_lock_release(l);
    }
    return NULL;
}

/* Wait (bounded) until NAME's queue has n waiters. */
static void wait_queued(const char *name, long long n)
{
    int64_t end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "ZCARD dlock:{%s}:q", name) != n &&
           th_now_ms() < end)
        th_sleep_ms(5);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{%s}:q", name), n);
}

/* A fair hand-over (release.lua) after a roll-back, and a queued waiter
 * that takes a free lock (acquire.lua's queue path) after one. */
static void test_queue_paths(void **state)
{
    dlock_client *a = client_for(DLOCK_WAIT_FAIR);
    dlock_client *b = client_for(DLOCK_WAIT_FAIR);
    dlock_lock *l;
    waiter w = {b, "fr-queue", -1, 0};
    pthread_t t;
    uint64_t t1;
    (void)state;

    /* Hand-over: A holds, B queues, the counter is rolled back, A
     * releases and the script hands the lock to B. */
    assert_int_equal(dlock_lock_acquire(&l, a, "fr-queue", 0, 10000), DLOCK_OK);
    t1 = dlock_lock_token(l);
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    wait_queued("fr-queue", 1);
    roll_back("fr-queue", t1 - 5);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    fprintf(stderr, "hand-over: %llu -> %llu\n", (unsigned long long)t1,
            (unsigned long long)w.token);
    assert_true(w.token > t1);

    /* Queue path: A holds, B queues; the lock's key is deleted (the
     * lease "expired") and the counter rolled back; B's next look at
     * the free lock (its refresh, within a second) takes it from the
     * head of the queue. */
    assert_int_equal(dlock_lock_acquire(&l, a, "fr-queue", 0, 10000), DLOCK_OK);
    t1 = dlock_lock_token(l);
    w.rc = -1;
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    wait_queued("fr-queue", 1);
    roll_back("fr-queue", t1 - 5);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{fr-queue}"), 1);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    fprintf(stderr, "queue: %llu -> %llu\n", (unsigned long long)t1,
            (unsigned long long)w.token);
    assert_true(w.token > t1);
    assert_int_equal(dlock_lock_release(l), DLOCK_NOT_OWNER);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A fence hash that expired under a long hold: the release, which
 * records its token there, must not leave it behind without a TTL (a
 * key per lock name, forever). */
static void test_release_keeps_ttl(void **state)
{
    dlock_client *c = client_for(DLOCK_WAIT_FAIR);
    dlock_lock *l;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "fr-ttl", 0, 10000), DLOCK_OK);
    roll_back("fr-ttl", 0); /* the hash "expired" while held */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{fr-ttl}:f") > 0);
    dlock_client_free(c);
}

/* The semaphore and the read-write lock's readers take their tokens
 * from the same counter and by the same formula (the shared piece
 * src/lua/next_token.luainc): a permit taken by a try, a permit handed
 * to a queued waiter by a release (sem_release.lua) and by a raised
 * limit (sem_limit.lua), and a reader's token, each after a roll-back,
 * are above the last token. (A waiter handed a permit by a raised limit
 * takes it although it asked with the old limit.) */
typedef struct sem_waiter {
    dlock_client *c;
    const char *name;
    int64_t limit;
    int rc;
    uint64_t token;
} sem_waiter;

static void *sem_waiter_main(void *arg)
{
    sem_waiter *w = arg;
    dlock_acquire_options o;
    dlock_lock *l;
    dlock_acquire_options_init(&o);
    o.wait_ms = 10000;
    o.lease_ms = 10000;
    w->rc = dlock_sem_acquire(&l, w->c, w->name, w->limit, &o);
    if (w->rc == DLOCK_OK) {
        w->token = dlock_lock_token(l);
        dlock_lock_release(l);
    }
    return NULL;
}

static uint64_t permit_token(dlock_client *c, const char *name,
                             dlock_lock **keep)
{
    dlock_acquire_options o;
    dlock_lock *l;
    uint64_t t;
    dlock_acquire_options_init(&o);
    o.lease_ms = 10000;
    assert_int_equal(dlock_sem_acquire(&l, c, name, 1, &o), DLOCK_OK);
    t = dlock_lock_token(l);
    if (keep != NULL)
        *keep = l;
    else
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    return t;
}

static void sem_wait_queued(const char *name)
{
    int64_t end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "LLEN dlock:{%s}:q", name) != 1 &&
           th_now_ms() < end)
        th_sleep_ms(5);
    assert_int_equal(th_cmd_int(&srv, "LLEN dlock:{%s}:q", name), 1);
}

static void test_shared_paths(void **state)
{
    dlock_client *a = client_for(DLOCK_WAIT_FAIR);
    dlock_client *b = client_for(DLOCK_WAIT_FAIR);
    sem_waiter w = {b, "fr-sem", 1, -1, 0};
    dlock_acquire_options o;
    dlock_lock *l;
    pthread_t t;
    uint64_t t1, t2;
    int64_t old;
    int pass;
    (void)state;

    /* A try. */
    t1 = permit_token(a, "fr-sem", NULL);
    roll_back("fr-sem", t1 - 5);
    t2 = permit_token(a, "fr-sem", NULL);
    fprintf(stderr, "permit: %llu, after roll-back: %llu\n",
            (unsigned long long)t1, (unsigned long long)t2);
    assert_true(t2 > t1);

    /* Handed over by a release (pass 0) and by a raised limit (pass 1). */
    for (pass = 0; pass < 2; pass++) {
        t1 = permit_token(a, "fr-sem", &l);
        w.rc = -1;
        w.limit = 1;
        assert_int_equal(pthread_create(&t, NULL, sem_waiter_main, &w), 0);
        sem_wait_queued("fr-sem");
        roll_back("fr-sem", t1 - 5);
        if (pass == 0)
            assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        else
            assert_int_equal(dlock_sem_set_limit(a, "fr-sem", 2, &old),
                             DLOCK_OK);
        pthread_join(t, NULL);
        assert_int_equal(w.rc, DLOCK_OK);
        fprintf(stderr, "permit handed over by %s: %llu -> %llu\n",
                pass == 0 ? "a release" : "a raised limit",
                (unsigned long long)t1, (unsigned long long)w.token);
        assert_true(w.token > t1);
        if (pass == 1) {
            assert_int_equal(dlock_lock_release(l), DLOCK_OK);
            assert_int_equal(dlock_sem_set_limit(a, "fr-sem", 1, &old),
                             DLOCK_OK);
            assert_int_equal(old, 2);
        }
    }

    /* A reader. */
    dlock_acquire_options_init(&o);
    o.lease_ms = 10000;
    assert_int_equal(dlock_rw_acquire_shared(&l, a, "fr-rw", 0, &o), DLOCK_OK);
    t1 = dlock_lock_token(l);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    roll_back("fr-rw", t1 - 5);
    assert_int_equal(dlock_rw_acquire_shared(&l, a, "fr-rw", 0, &o), DLOCK_OK);
    t2 = dlock_lock_token(l);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    fprintf(stderr, "reader: %llu, after roll-back: %llu\n",
            (unsigned long long)t1, (unsigned long long)t2);
    assert_true(t2 > t1);
    dlock_client_free(a);
    dlock_client_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_try_paths),
        cmocka_unit_test(test_queue_paths),
        cmocka_unit_test(test_release_keeps_ttl),
        cmocka_unit_test(test_shared_paths),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
