/*
 * threads_reuse.c - reentrancy belongs to a thread, not to a thread id
 * that the C library hands out again: a thread that ends while holding a
 * lock (its handle kept elsewhere) must not lend that hold to a later
 * thread that glibc gives the same pthread_t (it reuses a joined
 * thread's descriptor and stack). Found through the Python binding: the
 * later thread re-entered the lock and got its token, so two threads
 * both believed they held it. Also: the acquire option that refuses
 * re-entry (a worker pool's request de-duplication, issue 30) gives BUSY
 * on the thread that holds the name.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

typedef struct job {
    dlock_client *c;
    dlock_lock *l; /* the hold the thread leaves behind */
    int rc;
    pthread_t self;
} job;

static void *holder_main(void *arg)
{
    job *j = arg;
    j->self = pthread_self();
    j->rc = dlock_lock_acquire(&j->l, j->c, "reuse-x", 0, 30000);
    return NULL;
}

static void *trier_main(void *arg)
{
    job *j = arg;
    j->self = pthread_self();
    j->rc = dlock_lock_acquire(&j->l, j->c, "reuse-x", 0, 30000);
    return NULL;
}

/* A thread takes the lock and ends; later threads (some of which get its
 * pthread_t again) must find it busy. */
static void test_reused_thread_id(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    job h = {c, NULL, -1, 0};
    pthread_t t;
    int i, reused = 0;
    (void)state;
    assert_int_equal(pthread_create(&t, NULL, holder_main, &h), 0);
    pthread_join(t, NULL);
    assert_int_equal(h.rc, DLOCK_OK);
    for (i = 0; i < 20; i++) {
        job j = {c, NULL, -1, 0};
        assert_int_equal(pthread_create(&t, NULL, trier_main, &j), 0);
        pthread_join(t, NULL);
        if (pthread_equal(j.self, h.self))
            reused++;
        if (j.rc == DLOCK_OK)
            dlock_lock_detach(j.l);
        assert_int_equal(j.rc, DLOCK_BUSY);
    }
    fprintf(stderr, "%d of 20 later threads had the holder's pthread_t\n",
            reused);
    assert_int_equal(dlock_lock_release(h.l), DLOCK_OK);
    dlock_client_free(c);
}

/* An acquire of NAME with options o by this thread. */
static int take(dlock_client *c, const char *name, int64_t wait_ms,
                unsigned flags, dlock_lock **l)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = 30000;
    o.flags = flags;
    return dlock_lock_acquire_ex(l, c, name, &o);
}

static void *release_main(void *arg)
{
    dlock_lock *l = arg;
    return (void *)(intptr_t)dlock_lock_release(l);
}

/* The worker pool: two requests for one key on one worker thread. By
 * default the second re-enters (the documented default); with
 * DLOCK_ACQUIRE_NO_REENTRY it is busy, or waits like any other owner, and
 * a later default acquire does not re-enter the request's hold either.
 * The hold may be released from another thread (the request's
 * continuation). */
static void test_no_reentry(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock_lock *first, *second = NULL;
    pthread_t t;
    void *rc;
    (void)state;
    assert_int_equal(take(c, "dedup:K", 0, 0, &first), DLOCK_OK);
    assert_int_equal(take(c, "dedup:K", 0, 0, &second), DLOCK_OK);
    assert_int_equal(dlock_lock_token(second), dlock_lock_token(first));
    assert_int_equal(dlock_lock_release(second), DLOCK_OK);
    assert_int_equal(take(c, "dedup:K", 0, DLOCK_ACQUIRE_NO_REENTRY, &second),
                     DLOCK_BUSY);
    assert_int_equal(dlock_lock_release(first), DLOCK_OK);

    assert_int_equal(take(c, "dedup:K", 0, DLOCK_ACQUIRE_NO_REENTRY, &first),
                     DLOCK_OK);
    assert_int_equal(take(c, "dedup:K", 0, DLOCK_ACQUIRE_NO_REENTRY, &second),
                     DLOCK_BUSY);
    assert_int_equal(take(c, "dedup:K", 0, 0, &second), DLOCK_BUSY);
    assert_int_equal(take(c, "dedup:K", 300, DLOCK_ACQUIRE_NO_REENTRY, &second),
                     DLOCK_TIMEDOUT);
    assert_int_equal(pthread_create(&t, NULL, release_main, first), 0);
    pthread_join(t, &rc);
    assert_int_equal((int)(intptr_t)rc, DLOCK_OK);
    assert_int_equal(take(c, "dedup:K", 0, DLOCK_ACQUIRE_NO_REENTRY, &second),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(second), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reused_thread_id),
        cmocka_unit_test(test_no_reentry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
