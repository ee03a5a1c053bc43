/*
 * loop_cluster.c - the event-loop API (include/dlock_loop.h) on a Redis
 * Cluster client (three masters with a replica each): the loop runs the
 * engine and the attempt there (src/loop/multi_node.c), each call routed
 * by its key's slot. Acquire, extend and release of names on every
 * master; a loop hold never re-entered; the renewal of many holds over
 * several masters on the loop's clock (one call per hold, all in one
 * round); a waiter woken to try again when the holder releases; a
 * waiter riding out a failover of its name's master.
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
#include "dlock_loop.h"
#include "harness.h"
#include "th_cluster.h"
#include "th_loop.h"
#include "th_replication.h"
#include "topology.h"
#include "fixture_cluster.h"

#include "loop_engine_cases.h"

/* See loop_engine_cases.h: the master serving KEY's slot. */
static th_server *node_of(const char *key)
{
    int p = th_cluster_key_port(&cl, key, strlen(key));
    assert_true(p > 0);
    return th_cluster_node(&cl, p);
}

/* Bounded waits (liveness, not timing). */
#define LIVE_MS 60000
/* Names spread over the masters. */
#define NHOLDS 24

/* A client of the cluster without a lock-delay. */
static dlock_client *client(void)
{
    th_durable d;
    th_durable_init(&d);
    d.lock_delay_ms = 0;
    d.wait_strategy = DLOCK_WAIT_NOTIFY;
    return fixture_durable(&d);
}

static dlock_loop *new_loop(dlock_client *c)
{
    dlock_loop *l = th_loop_new(c);
    assert_non_null(l);
    return l;
}

/* The master owning lock NAME's key: does it hold it, and its PTTL. */
static long long key_cmd(const char *name, const char *cmd)
{
    char key[128];
    int p;
    assert_true(snprintf(key, sizeof key, "dlock:{%s}", name) <
                (int)sizeof key);
    p = th_cluster_key_port(&cl, key, strlen(key));
    assert_true(p > 0);
    return th_cmd_int(th_cluster_node(&cl, p), "%s %s", cmd, key);
}

static void test_acquire_extend_release(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    dlock_hold *h[NHOLDS], *x;
    char name[NHOLDS][32];
    th_seen e = {0};
    int i;
    (void)state;
    for (i = 0; i < NHOLDS; i++) {
        snprintf(name[i], sizeof name[i], "lcl:%d", i);
        assert_int_equal(th_loop_lock(l, name[i], &o, &h[i]), DLOCK_OK);
        assert_int_equal(key_cmd(name[i], "EXISTS"), 1);
    }
    assert_int_equal(th_loop_lock(l, name[0], &o, &x), DLOCK_BUSY);
    assert_int_equal(th_loop_lock(l2, name[1], &o, &x), DLOCK_BUSY);
    assert_int_equal(dlock_loop_extend(NULL, l, h[2], 60000, th_note, &e),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &e.done), 0);
    assert_int_equal(e.status, DLOCK_OK);
    assert_true(key_cmd(name[2], "PTTL") > 30000);
    for (i = 0; i < NHOLDS; i++) {
        assert_int_equal(th_loop_release(l, h[i]), DLOCK_OK);
        assert_int_equal(key_cmd(name[i], "EXISTS"), 0);
    }
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* Many short leases over every master, renewed on the loop's clock:
 * every one alive after three leases. */
static void test_renewal(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 900);
    dlock_hold *h[NHOLDS];
    char name[NHOLDS][32];
    int i;
    (void)state;
    for (i = 0; i < NHOLDS; i++) {
        snprintf(name[i], sizeof name[i], "lcr:%d", i);
        assert_int_equal(th_loop_lock(l, name[i], &o, &h[i]), DLOCK_OK);
    }
    th_loop_run_for(&l, 1, 2700);
    for (i = 0; i < NHOLDS; i++) {
        assert_int_equal(dlock_hold_status(h[i]), DLOCK_OK);
        assert_int_equal(key_cmd(name[i], "EXISTS"), 1);
        assert_int_equal(th_loop_release(l, h[i]), DLOCK_OK);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A waiter gets the name once its holder (another loop) releases. */
static void test_waiter(void **state)
{
    dlock_client *c = client();
    dlock_loop *ls[2] = {new_loop(c), new_loop(c)};
    dlock_loop_acquire t = th_loop_opts(c, 0, 30000),
                       w = th_loop_opts(c, LIVE_MS, 30000);
    dlock_hold *h;
    th_seen s = {0};
    (void)state;
    assert_int_equal(th_loop_lock(ls[0], "lcw", &t, &h), DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lcw", &w, th_note, &s),
                     DLOCK_OK);
    th_loop_run_for(ls, 2, 300);
    assert_int_equal(s.done, 0);
    assert_int_equal(th_loop_release(ls[0], h), DLOCK_OK);
    assert_int_equal(th_loop_run(&ls[1], 1, &s.done), 0);
    assert_int_equal(s.status, DLOCK_OK);
    assert_int_equal(key_cmd("lcw", "EXISTS"), 1);
    assert_int_equal(th_loop_release(ls[1], s.hold), DLOCK_OK);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* A waiter for a name held without renewal rides out a failover of the
 * name's master and is granted on the promoted replica. */
static void test_failover_under_waiter(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire hold = th_loop_opts(c, 0, 4000);
    dlock_loop_acquire wait = th_loop_opts(c, LIVE_MS, 30000);
    const char key[] = "dlock:{lcf}";
    dlock_hold *h;
    th_seen s = {0};
    int master, replica;
    int64_t end;
    (void)state;
    hold.renew = 0;
    assert_int_equal(th_loop_lock(l, "lcf", &hold, &h), DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, l2, "lcf", &wait, th_note, &s),
                     DLOCK_OK);
    th_loop_run_for(&l2, 1, 300);
    assert_int_equal(s.done, 0);
    master = th_cluster_key_port(&cl, key, strlen(key));
    replica = th_cluster_replica_port(&cl, master);
    assert_true(master > 0 && replica > 0);
    assert_int_equal(th_cluster_failover(&cl, replica), 0);
    end = th_now_ms() + LIVE_MS;
    while (!s.done && th_now_ms() < end)
        th_loop_run_for(&l2, 1, 50);
    if (s.status != DLOCK_OK)
        fprintf(stderr, "waiter: %d (%s)\n", s.status, s.err);
    assert_int_equal(s.status, DLOCK_OK);
    assert_int_equal(th_cluster_key_port(&cl, key, strlen(key)), replica);
    assert_int_equal(key_cmd("lcf", "EXISTS"), 1);
    assert_int_equal(th_loop_release(l2, s.hold), DLOCK_OK);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* A client of the cluster waiting by strategy. */
static dlock_client *client_s(int strategy)
{
    th_durable d;
    th_durable_init(&d);
    d.lock_delay_ms = 0;
    d.wait_strategy = strategy;
    return fixture_durable(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_extend_release),
        cmocka_unit_test(test_renewal),
        cmocka_unit_test(test_waiter),
        cmocka_unit_test(test_failover_under_waiter),
        cmocka_unit_test(test_wakeup),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_writer_mark),
        cmocka_unit_test(test_sem_fifo),
        cmocka_unit_test(test_elect_fenced),
        cmocka_unit_test(test_downgrade),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test(test_cancelled_extend),
        cmocka_unit_test(test_downgrade_beside_round),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
