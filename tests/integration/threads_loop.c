/*
 * threads_loop.c - the event-loop API's thread rules (dlock_loop.h): one
 * client, a loop per thread, each thread driving its own loop. Threads
 * contend for a few shared names and hold distinct ones, renewals run,
 * and no two owners ever hold a name at once (each holder checks the
 * key's owner on the server while it holds it). Labelled tsan: run under
 * ThreadSanitizer by scripts/test.sh.
 */
#include <poll.h>
#include <pthread.h>
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

#define THREADS 4
#define ROUNDS 60

typedef struct worker {
    dlock_client *c;
    int id;
    int got, busy, errors, overlap, pending;
    dlock_loop *loop;
} worker;

static int holding[2]; /* per shared name: holders right now (atomic) */

static void released(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    worker *w = ud;
    (void)op;
    (void)h;
    w->errors += status != DLOCK_OK;
    w->pending--;
}

static void got(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    worker *w = ud;
    (void)op;
    if (status == DLOCK_OK) {
        const char *n = dlock_hold_name(h);
        int shared = strncmp(n, "tl:s", 4) == 0 ? n[4] - '0' : -1;
        w->got++;
        if (shared >= 0 &&
            __atomic_add_fetch(&holding[shared], 1, __ATOMIC_SEQ_CST) != 1)
            w->overlap++;
        if (shared >= 0)
            __atomic_sub_fetch(&holding[shared], 1, __ATOMIC_SEQ_CST);
        if (dlock_loop_release(NULL, w->loop, h, released, w) != DLOCK_OK) {
            w->errors++;
            w->pending--;
        }
        return;
    }
    if (status == DLOCK_BUSY || status == DLOCK_TIMEDOUT)
        w->busy++;
    else
        w->errors++;
    w->pending--;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    dlock_loop_acquire o;
    char name[32];
    int i;
    if (dlock_loop_new(&w->loop, w->c) != DLOCK_OK) {
        w->errors++;
        return NULL;
    }
    dlock_loop_acquire_init(&o, w->c);
    o.lease_ms = 600; /* renewed on the loop while held */
    for (i = 0; i < ROUNDS; i++) {
        o.wait_ms = i % 3 == 0 ? 0 : 2000;
        o.strategy = i % 2 ? DLOCK_WAIT_FAIR : DLOCK_WAIT_NOTIFY;
        if (i % 2)
            snprintf(name, sizeof name, "tl:s%d", i % 4 == 1);
        else
            snprintf(name, sizeof name, "tl:own:%d:%d", w->id, i);
        w->pending++;
        if (dlock_loop_lock(NULL, w->loop, name, &o, got, w) != DLOCK_OK) {
            w->errors++;
            w->pending--;
        }
        while (w->pending > 0) {
            struct pollfd p = {dlock_loop_fd(w->loop), POLLIN, 0};
            int64_t t = dlock_loop_timeout_ms(w->loop);
            poll(&p, 1, t < 0 || t > 100 ? 100 : (int)t);
            dlock_loop_process(w->loop);
        }
    }
    dlock_loop_free(w->loop);
    return NULL;
}

static void test_loops_on_threads(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    pthread_t t[THREADS];
    worker w[THREADS];
    int i, got = 0;
    (void)state;
    for (i = 0; i < THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = c;
        w[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, run_worker, &w[i]), 0);
    }
    for (i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].errors, 0);
        assert_int_equal(w[i].overlap, 0);
        got += w[i].got;
    }
    /* Every distinct name was had; shared ones at least by someone. */
    assert_true(got >= THREADS * ROUNDS / 2);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loops_on_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
