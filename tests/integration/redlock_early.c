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

/* Acquire name (lease) in a thread, and release it unless keep (the
 * hold then stays in l). */
typedef struct cycle {
    dlock_client *c;
    const char *name;
    int64_t lease;
    int keep;
    dlock_lock *l;
    int acq, rel;
    int64_t valid;
    int done;
} cycle;

static void *cycle_main(void *arg)
{
    cycle *y = arg;
    y->acq = dlock_lock_acquire(&y->l, y->c, y->name, 0, y->lease);
    if (y->acq == DLOCK_OK && !y->keep) {
        y->valid = dlock_lock_validity_ms(y->l);
        y->rel = dlock_lock_release(y->l);
    }
    __atomic_store_n(&y->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Wait (bounded: 20 s) until KEY exists (want 1) or is gone (want 0)
 * on server i; 1 once it does. */
static int key_is(int i, const char *key, int want)
{
    int64_t end = th_now_ms() + 20000;
    while (th_cmd_int(&srv[i], "EXISTS %s", key) != want && th_now_ms() < end)
        th_sleep_ms(10);
    return th_cmd_int(&srv[i], "EXISTS %s", key) == want;
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
    cycle y = {.name = "early-a", .lease = 100000};
    pthread_t t;
    int64_t end;
    int w, i;
    (void)state;
    assert_non_null(c);
    /* Warm the pools and the script caches first, every node answering.
     * A call returns at a majority, so the first cycle (its connections
     * opened for it, the scripts sent with their source) may leave a
     * node reached late without a pooled connection; opening one while
     * it is stopped below would cost the connect timeout and mark it
     * down for 500 ms (skipped by the last acquire). Two cycles, each
     * node clear and the watchdog's settle (due within a second) after
     * each. */
    for (w = 0; w < 2; w++) {
        assert_int_equal(dlock_lock_acquire(&l, c, "early-a", 0, 10000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        for (i = 0; i < NS; i++)
            assert_true(key_is(i, "dlock:{early-a}", 0));
        th_sleep_ms(1100);
    }

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
    assert_true(key_is(3, "dlock:{early-a}", 0));
    assert_true(key_is(4, "dlock:{early-a}", 0));

    assert_int_equal(dlock_lock_acquire(&l, c, "early-a", 0, 10000), DLOCK_OK);
    /* Every node, once the ones not waited for applied it (bounded). */
    assert_int_equal(th_nodes_holding(c, "early-a", NS), NS);
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
    assert_true(key_is(4, "dlock:{early-b}", 0));
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{early-b}"), 0);
}

/* A new client's first acquire (every connection opened for it) with
 * two nodes that answer the open's INFO but hold up the script (CLIENT
 * PAUSE WRITE, as a FAILOVER does; a node stopped between the two is the
 * same to the client): the acquire returns with the majority while
 * those nodes are still held (it took its whole step, 60 s, when a
 * connection opened for the call was sent the script by SHA and waited
 * for); once they go on they apply it, and the release clears all. */
static void test_fresh_paused(void **state)
{
    const char *urls[NS];
    cycle y = {.name = "early-f", .lease = 600000, .keep = 1};
    pthread_t t;
    redisReply *r;
    int64_t t0, end;
    int i, was;
    (void)state;
    fixture_urls(urls);
    y.c = th_client(urls, NS, DLOCK_WAIT_FAIR, 60000, 2000);
    assert_non_null(y.c);
    for (i = 3; i < NS; i++) {
        r = th_cmd(&srv[i], "CLIENT PAUSE 40000 WRITE");
        assert_non_null(r);
        freeReplyObject(r);
    }
    t0 = th_now_ms();
    end = t0 + 25000;
    assert_int_equal(pthread_create(&t, NULL, cycle_main, &y), 0);
    while (!__atomic_load_n(&y.done, __ATOMIC_SEQ_CST) && th_now_ms() < end)
        th_sleep_ms(10);
    was = __atomic_load_n(&y.done, __ATOMIC_SEQ_CST);
    print_message("first acquire with two nodes paused: %d (%lld ms)\n", was,
                  (long long)(th_now_ms() - t0));
    for (i = 3; i < NS; i++) {
        r = th_cmd(&srv[i], "CLIENT UNPAUSE");
        assert_non_null(r);
        freeReplyObject(r);
    }
    pthread_join(t, NULL);
    assert_true(was);
    assert_int_equal(y.acq, DLOCK_OK);
    for (i = 0; i < NS; i++)
        assert_true(key_is(i, "dlock:{early-f}", 1));
    assert_int_equal(dlock_lock_release(y.l), DLOCK_OK);
    for (i = 0; i < NS; i++)
        assert_true(key_is(i, "dlock:{early-f}", 0));
    dlock_client_free(y.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_minority),
        cmocka_unit_test(test_noscript_after_return),
        cmocka_unit_test(test_fresh_paused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
