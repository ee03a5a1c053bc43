/*
 * redlock.c - the lock over 5 independent redis-servers (issue 5): mutual
 * exclusion across processes, acquiring with 1 and 2 nodes dead, failing
 * cleanly (DLOCK_NO_QUORUM, failed nodes named, nothing left behind) with
 * 3 dead, a stalled node bounded by the per-node timeout, fencing tokens
 * that keep increasing while nodes crash and come back (AOF always), and
 * validity / extend arithmetic.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

#define NS 5
#define FIXTURE_NS NS
#define FIXTURE_AOF_ALWAYS
#include "fixture_n.h"
#include "th_procs.h"

/* A Redlock client over all 5 servers. */
static dlock_client *rl_client(int64_t cmd_timeout)
{
    const char *urls[NS];
    dlock_client *c;
    fixture_urls(urls);
    c = th_client(urls, NS, DLOCK_WAIT_NOTIFY, cmd_timeout, cmd_timeout);
    if (c == NULL && getpid() != main_pid)
        _exit(9); /* a forked child must not longjmp into cmocka */
    assert_non_null(c);
    return c;
}

/* rl_client(0) as a th_client_fn (arg unused). */
static dlock_client *rl_client_fn(void *arg)
{
    (void)arg;
    return rl_client(0);
}

static void restart(int i)
{
    if (srv[i].pid == 0)
        assert_int_equal(th_server_restart(&srv[i]), 0);
}

/* Try-once acquire, repeated while it fails with NO_QUORUM for at most
 * 3 s: right after a restart the client may still be in its short
 * reconnect back-off for the nodes it saw down ("down (connect failed
 * moments ago)"), which is not what these tests are about. */
static int acquire_retry(dlock_lock **l, dlock_client *c, const char *name,
                         int64_t lease)
{
    int64_t t0 = th_now_ms();
    int rc;
    for (;;) {
        rc = dlock_lock_acquire(l, c, name, 0, lease);
        if (rc != DLOCK_NO_QUORUM || th_now_ms() - t0 > 3000)
            return rc;
        usleep(50 * 1000);
    }
}

/* ---- mutual exclusion across processes --------------------------------- */

static void test_mutual_exclusion(void **state)
{
    enum { NP = 4, ITERS = 25 };
    const th_contend k = {.client = rl_client_fn,
                          .name = "rl-mx",
                          .wait_ms = 30000,
                          .lease_ms = 10000,
                          .procs = NP,
                          .iters = ITERS,
                          .counter_srv = &srv[0],
                          .counter_key = "test:rl:counter"};
    int i;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv[0], "DEL test:rl:counter");
    assert_int_equal(th_contend_run(&k), 0);
    r = th_cmd(&srv[0], "GET test:rl:counter");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(atoll(r->str), NP * ITERS);
    freeReplyObject(r);
    for (i = 0; i < NS; i++)
        assert_int_equal(th_cmd_int(&srv[i], "EXISTS dlock:{rl-mx}"), 0);
}

/* ---- node failures ------------------------------------------------------ */

static void test_minority_down(void **state)
{
    dlock_client *c = rl_client(500);
    dlock_lock *l;
    int rc;
    (void)state;
    th_server_kill9(&srv[1]);
    rc = dlock_lock_acquire(&l, c, "rl-minority", 0, 10000);
    if (rc != DLOCK_OK)
        fprintf(stderr, "1 down: %s (%s)\n", dlock_strerror(rc),
                dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_OK);
    /* The four that run, once the ones not waited for applied it
     * (bounded: it returns at a majority). */
    assert_int_equal(th_nodes_holding(c, "rl-minority", 4), 4);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);

    th_server_kill9(&srv[3]);
    rc = dlock_lock_acquire(&l, c, "rl-minority", 0, 10000);
    if (rc != DLOCK_OK)
        fprintf(stderr, "2 down: %s (%s)\n", dlock_strerror(rc),
                dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_OK);
    assert_true(dlock_lock_validity_ms(l) > 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{rl-minority}"), 0);
    restart(1);
    restart(3);
    dlock_client_free(c);
}

static void test_majority_down(void **state)
{
    dlock_client *c = rl_client(500);
    dlock_lock *l = NULL;
    const int dead[3] = {0, 2, 4};
    int i, rc;
    const char *msg;
    char port[32];
    (void)state;
    for (i = 0; i < 3; i++)
        th_server_kill9(&srv[dead[i]]);
    rc = dlock_lock_acquire(&l, c, "rl-majority", 0, 10000);
    assert_int_equal(rc, DLOCK_NO_QUORUM);
    assert_null(l);
    msg = dlock_errmsg(c);
    fprintf(stderr, "3 down: %s\n", msg);
    for (i = 0; i < 3; i++) {
        snprintf(port, sizeof port, ":%d", srv[dead[i]].port);
        if (strstr(msg, port) == NULL)
            fprintf(stderr, "errmsg does not name node %d (%s)\n", dead[i],
                    port);
        assert_non_null(strstr(msg, port));
    }
    /* The survivors were given back what they granted. */
    assert_int_equal(th_cmd_int(&srv[1], "EXISTS dlock:{rl-majority}"), 0);
    assert_int_equal(th_cmd_int(&srv[3], "EXISTS dlock:{rl-majority}"), 0);
    /* Waiting does not help while they stay down: still NO_QUORUM or
     * TIMEDOUT, never OK, and nothing left behind. */
    rc = dlock_lock_acquire(&l, c, "rl-majority", 300, 10000);
    assert_int_not_equal(rc, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[1], "EXISTS dlock:{rl-majority}"), 0);
    assert_int_equal(th_cmd_int(&srv[3], "EXISTS dlock:{rl-majority}"), 0);
    for (i = 0; i < 3; i++)
        restart(dead[i]);
    /* Back: it works again. */
    rc = acquire_retry(&l, c, "rl-majority", 10000);
    if (rc != DLOCK_OK)
        fprintf(stderr, "after restart: %s (%s)\n", dlock_status_name(rc),
                dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- a stalled node is bounded by the per-node timeout ----------------- */

static void *sleeper(void *arg)
{
    redisReply *r = th_cmd((th_server *)arg, "DEBUG SLEEP 2");
    if (r != NULL)
        freeReplyObject(r);
    return NULL;
}

static void test_stalled_node(void **state)
{
    dlock_client *c = rl_client(200);
    dlock_lock *l;
    pthread_t t;
    int64_t t0, dt;
    int rc;
    (void)state;
    /* Connect to every node first so the stall hits a command. */
    assert_int_equal(dlock_lock_acquire(&l, c, "rl-stall", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_create(&t, NULL, sleeper, &srv[2]);
    usleep(100 * 1000);
    t0 = th_now_ms();
    rc = dlock_lock_acquire(&l, c, "rl-stall", 0, 10000);
    dt = th_now_ms() - t0;
    fprintf(stderr, "stalled node: acquire %s in %lld ms\n",
            dlock_status_name(rc), (long long)dt);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(dt < 1000);
    /* Validity was charged for the time spent, not more. */
    assert_true(dlock_lock_validity_ms(l) <= 10000 - dt);
    dlock_lock_release(l);
    pthread_join(t, NULL);
    dlock_client_free(c);
}

/* ---- fencing tokens across crashes ------------------------------------- */

static void test_tokens_across_crashes(void **state)
{
    enum { ROUNDS = 10 };
    dlock_client *a = rl_client(500);
    dlock_client *b = rl_client(500);
    uint64_t last = 0;
    int round;
    (void)state;
    for (round = 0; round < ROUNDS; round++) {
        dlock_client *c = (round % 2) ? a : b;
        int k1 = round % NS, k2 = (round + 2 + round / NS) % NS;
        dlock_lock *l;
        int rc;
        uint64_t tok;
        /* Different minorities down each round. */
        th_server_kill9(&srv[k1]);
        if (round % 3 != 0 && k2 != k1)
            th_server_kill9(&srv[k2]);
        rc = acquire_retry(&l, c, "rl-tokens", 10000);
        if (rc != DLOCK_OK)
            fprintf(stderr, "round %d: %s (%s)\n", round, dlock_strerror(rc),
                    dlock_errmsg(c));
        assert_int_equal(rc, DLOCK_OK);
        tok = dlock_lock_token(l);
        if (tok <= last)
            fprintf(stderr, "round %d: token %llu after %llu\n", round,
                    (unsigned long long)tok, (unsigned long long)last);
        assert_true(tok > last);
        last = tok;
        /* A node crashes while it is held, too. */
        {
            int k3 = (round + 1) % NS;
            if (srv[k3].pid != 0 && k3 != k2) {
                th_server_kill9(&srv[k3]);
                restart(k3);
            }
        }
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        restart(k1);
        restart(k2);
    }
    dlock_client_free(a);
    dlock_client_free(b);
}

/* ---- validity and extend ----------------------------------------------- */

static void test_validity_extend(void **state)
{
    dlock_client *c = rl_client(500);
    dlock_lock *l;
    int64_t v, drift;
    (void)state;
    /* Defaults: 1% of the lease plus 2 ms. */
    assert_int_equal(dlock_lock_acquire(&l, c, "rl-valid", 0, 2000), DLOCK_OK);
    drift = 2000 / 100 + 2;
    v = dlock_lock_validity_ms(l);
    assert_true(v > 0);
    assert_true(v <= 2000 - drift);
    assert_int_equal(dlock_lock_extend(l, 5000), DLOCK_OK);
    v = dlock_lock_validity_ms(l);
    drift = 5000 / 100 + 2;
    assert_true(v > 2000);
    assert_true(v <= 5000 - drift);
    /* Every node's TTL was raised. */
    {
        int i;
        for (i = 0; i < NS; i++) {
            long long p = th_cmd_int(&srv[i], "PTTL dlock:{rl-valid}");
            assert_true(p > 2000 && p <= 5000);
        }
    }
    /* A minority down: extend still succeeds. */
    th_server_kill9(&srv[4]);
    th_server_kill9(&srv[0]);
    assert_int_equal(dlock_lock_extend(l, 4000), DLOCK_OK);
    assert_true(dlock_lock_validity_ms(l) <= 4000 - (4000 / 100 + 2));
    /* A majority down: extend fails, the handle says not OK anywhere. */
    th_server_kill9(&srv[2]);
    assert_int_not_equal(dlock_lock_extend(l, 4000), DLOCK_OK);
    restart(0);
    restart(2);
    restart(4);
    dlock_lock_release(l);
    dlock_client_free(c);
}

/* dlock_client_check over 5 AOF-always nodes: nothing to say; a node
 * that fsyncs every second and one that may evict are each named. */
static void test_server_check(void **state)
{
    dlock_client *c = rl_client(500);
    char buf[2048], port[96];
    (void)state;
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 0);
    freeReplyObject(th_cmd(&srv[1], "CONFIG SET appendfsync everysec"));
    freeReplyObject(th_cmd(&srv[3], "CONFIG SET maxmemory-policy allkeys-lru"));
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 2);
    fprintf(stderr, "check:\n%s", buf);
    snprintf(port, sizeof port, ":%d: appendonly yes, appendfsync everysec",
             srv[1].port);
    assert_non_null(strstr(buf, port));
    snprintf(port, sizeof port, ":%d: maxmemory-policy is allkeys-lru",
             srv[3].port);
    assert_non_null(strstr(buf, port));
    freeReplyObject(th_cmd(&srv[1], "CONFIG SET appendfsync always"));
    freeReplyObject(th_cmd(&srv[3], "CONFIG SET maxmemory-policy noeviction"));
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutual_exclusion),
        cmocka_unit_test(test_minority_down),
        cmocka_unit_test(test_majority_down),
        cmocka_unit_test(test_stalled_node),
        cmocka_unit_test(test_tokens_across_crashes),
        cmocka_unit_test(test_validity_extend),
        cmocka_unit_test(test_server_check),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
