/*
 * redlock_early.c - Redlock returns as soon as the outcome is certain
 * (issue 18), without the two liveness bugs that came with it before
 * (issue 5): an acquire that a majority granted returns while stalled
 * nodes have not answered, and the hold's release reaches those nodes
 * behind the acquire (the same connection), so no node keeps the lock
 * once they wake; a release that a majority confirmed returns without
 * the rest, and a node that answers it NOSCRIPT (script cache flushed)
 * still gets the release, sent with the script's source.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

#define NS 5
#define FIXTURE_NS NS
#include "fixture_n.h"

/* A Redlock client; with a long command timeout, a stalled node would
 * hold up a call that waits for every node for lease/10 (10 s below). */
static dlock_client *rl_client(void)
{
    const char *urls[NS];
    fixture_urls(urls);
    return th_client(urls, NS, DLOCK_WAIT_FAIR, 30000, 2000);
}

/* Acquire and release "early-a" (lease 100 s) in a thread. */
typedef struct cycle {
    dlock_client *c;
    int acq, rel;
    int64_t valid;
    volatile int done;
} cycle;

static void *cycle_main(void *arg)
{
    cycle *y = arg;
    dlock_lock *l;
    y->acq = dlock_lock_acquire(&l, y->c, "early-a", 0, 100000);
    if (y->acq == DLOCK_OK) {
        y->valid = dlock_lock_validity_ms(l);
        y->rel = dlock_lock_release(l);
    }
    __atomic_store_n(&y->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Wait (bounded) until KEY is gone on server i; 1 when it is. */
static int gone_on(int i, const char *key)
{
    int64_t end = th_now_ms() + 5000;
    while (th_cmd_int(&srv[i], "EXISTS %s", key) != 0 && th_now_ms() < end)
        th_sleep_ms(10);
    return th_cmd_int(&srv[i], "EXISTS %s", key) == 0;
}

/* Two nodes stopped: the acquire returns with the majority, the release
 * too, while those nodes are still stopped (a call that waited for them
 * would take 10 s each); once the nodes run again they process the
 * acquire, then the release, and keep nothing; the next acquire gets all
 * five. */
static void test_stalled_minority(void **state)
{
    dlock_client *c = rl_client();
    dlock_lock *l;
    dlock_info info;
    cycle y = {0};
    pthread_t t;
    int64_t end;
    (void)state;
    assert_non_null(c);
    /* Warm the pools and the script caches first. */
    assert_int_equal(dlock_lock_acquire(&l, c, "early-a", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);

    th_server_pause(&srv[3]);
    th_server_pause(&srv[4]);
    y.c = c;
    assert_int_equal(pthread_create(&t, NULL, cycle_main, &y), 0);
    end = th_now_ms() + 5000;
    while (!__atomic_load_n(&y.done, __ATOMIC_SEQ_CST) && th_now_ms() < end)
        th_sleep_ms(10);
    assert_true(__atomic_load_n(&y.done, __ATOMIC_SEQ_CST));
    th_server_resume(&srv[3]);
    th_server_resume(&srv[4]);
    pthread_join(t, NULL);
    assert_int_equal(y.acq, DLOCK_OK);
    assert_true(y.valid > 0);
    assert_int_equal(y.rel, DLOCK_OK);
    assert_true(gone_on(3, "dlock:{early-a}"));
    assert_true(gone_on(4, "dlock:{early-a}"));

    assert_int_equal(dlock_lock_acquire(&l, c, "early-a", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(c, "early-a", &info), DLOCK_OK);
    assert_int_equal(info.nodes_holding, NS);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* A node whose script cache was flushed answers the release NOSCRIPT
 * after the client stopped waiting for it (it was stopped for longer
 * than the 1 s command timeout): the client still sends the release's
 * source (here when the client is freed, at the latest), and the node
 * keeps nothing. */
static void test_noscript_after_return(void **state)
{
    const char *urls[NS];
    dlock_client *c;
    dlock_lock *l;
    redisReply *r;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, NS, DLOCK_WAIT_FAIR, 1000, 2000);
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, c, "early-b", 0, 30000), DLOCK_OK);
    r = th_cmd(&srv[4], "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    th_server_pause(&srv[4]);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_sleep_ms(1200); /* past the command timeout: given up on either way */
    th_server_resume(&srv[4]);
    dlock_client_free(c);
    assert_true(gone_on(4, "dlock:{early-b}"));
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{early-b}"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_minority),
        cmocka_unit_test(test_noscript_after_return),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
