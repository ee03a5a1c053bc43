/*
 * loop_sentinel.c - the event-loop API (include/dlock_loop.h) on a
 * Sentinel client (a master, two replicas, three sentinels): the loop
 * runs the engine and the attempt there (src/loop/multi_node.c).
 * Acquire, extend and release on the master; renewal on the loop's
 * clock; semaphore permits; a waiting op rides out SENTINEL FAILOVER and is granted on the
 * promoted master once the holder's lease has run out.
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
#include "th_loop.h"
#include "th_replication.h"
#include "topology.h"
#include "fixture_sentinel.h"
#include "loop_engine_cases.h"

/* See loop_engine_cases.h: every key lives on the master. */
static th_server *node_of(const char *key)
{
    int p = th_sentinel_master_port(&sent);
    (void)key;
    assert_true(p > 0);
    return th_sentinel_node(&sent, p);
}

/* Bounded waits (liveness, not timing). */
#define LIVE_MS 60000

/* A client of the deployment without a lock-delay (a grant on the
 * promoted master is not held back), waiting fair (the default). */
static dlock_client *client(void)
{
    return client_s(DLOCK_WAIT_FAIR);
}

static dlock_loop *new_loop(dlock_client *c)
{
    dlock_loop *l = th_loop_new(c);
    assert_non_null(l);
    return l;
}

static dlock_loop_acquire opts(dlock_client *c, int64_t wait_ms,
                               int64_t lease_ms, int renew)
{
    dlock_loop_acquire o = th_loop_opts(c, wait_ms, lease_ms);
    o.renew = renew;
    return o;
}

/* Does the current master hold a key for lock NAME? */
static long long master_has(const char *name)
{
    int p = th_sentinel_master_port(&sent);
    assert_true(p > 0);
    return th_cmd_int(th_sentinel_node(&sent, p), "EXISTS dlock:{%s}", name);
}

static void test_acquire_extend_release(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, 900, 1);
    dlock_hold *h, *x;
    th_seen e = {0};
    int p;
    (void)state;
    assert_int_equal(th_loop_lock(l, "lsn:a", &o, &h), DLOCK_OK);
    assert_true(dlock_hold_token(h) > 0);
    assert_int_equal(master_has("lsn:a"), 1);
    assert_int_equal(th_loop_lock(l2, "lsn:a", &o, &x), DLOCK_BUSY);
    /* Renewed on the loop's clock: alive after three leases. */
    th_loop_run_for(&l, 1, 2700);
    assert_int_equal(dlock_hold_status(h), DLOCK_OK);
    assert_int_equal(master_has("lsn:a"), 1);
    assert_int_equal(dlock_loop_extend(NULL, l, h, 60000, th_note, &e),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &e.done), 0);
    assert_int_equal(e.status, DLOCK_OK);
    p = th_sentinel_master_port(&sent);
    assert_true(th_cmd_int(th_sentinel_node(&sent, p), "PTTL dlock:{lsn:a}") >
                30000);
    assert_int_equal(th_loop_release(l, h), DLOCK_OK);
    assert_int_equal(master_has("lsn:a"), 0);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* A waiter (wait_ms LIVE) for a name held without renewal; the master
 * is failed over while it waits; it is granted on the new master. */
static void test_failover_under_waiter(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire hold = opts(c, 0, 4000, 0);
    dlock_loop_acquire wait = opts(c, LIVE_MS, 30000, 1);
    dlock_hold *h;
    th_seen w = {0};
    int old, now;
    int64_t end;
    (void)state;
    assert_int_equal(th_loop_lock(l, "lsn:f", &hold, &h), DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, l2, "lsn:f", &wait, th_note, &w),
                     DLOCK_OK);
    th_loop_run_for(&l2, 1, 300);
    assert_int_equal(w.done, 0);
    old = th_sentinel_master_port(&sent);
    now = th_sentinel_failover(&sent);
    assert_true(now > 0 && now != old);
    end = th_now_ms() + LIVE_MS;
    while (!w.done && th_now_ms() < end)
        th_loop_run_for(&l2, 1, 50);
    if (w.status != DLOCK_OK)
        fprintf(stderr, "waiter: %d (%s)\n", w.status, w.err);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.status, DLOCK_OK);
    assert_int_equal(th_sentinel_master_port(&sent), now);
    assert_int_equal(master_has("lsn:f"), 1);
    assert_int_equal(th_loop_release(l2, w.hold), DLOCK_OK);
    assert_int_equal(master_has("lsn:f"), 0);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* Permits of a semaphore through the loop on Sentinel: LIMIT of them,
 * then BUSY; one released makes room again. */
static void test_permits(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, 30000, 1);
    th_seen p[3] = {{0}, {0}, {0}};
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(
            dlock_loop_sem_acquire(NULL, l, "lsn:sem", 2, &o, th_note, &p[i]),
            DLOCK_OK);
        assert_int_equal(th_loop_run(&l, 1, &p[i].done), 0);
    }
    assert_int_equal(p[0].status, DLOCK_OK);
    assert_int_equal(p[1].status, DLOCK_OK);
    assert_int_equal(p[2].status, DLOCK_BUSY);
    assert_int_equal(th_loop_release(l, p[0].hold), DLOCK_OK);
    memset(&p[2], 0, sizeof p[2]);
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, l, "lsn:sem", 2, &o, th_note, &p[2]),
        DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &p[2].done), 0);
    assert_int_equal(p[2].status, DLOCK_OK);
    /* A waiting permit (fair: queued) is handed the one released. */
    {
        dlock_loop_acquire w = opts(c, LIVE_MS, 30000, 1);
        th_seen q = {0};
        assert_int_equal(
            dlock_loop_sem_acquire(NULL, l, "lsn:sem", 2, &w, th_note, &q),
            DLOCK_OK);
        th_loop_run_for(&l, 1, 300);
        assert_int_equal(q.done, 0);
        assert_int_equal(th_loop_release(l, p[1].hold), DLOCK_OK);
        assert_int_equal(th_loop_run(&l, 1, &q.done), 0);
        assert_int_equal(q.status, DLOCK_OK);
        assert_int_equal(th_loop_release(l, q.hold), DLOCK_OK);
    }
    assert_int_equal(th_loop_release(l, p[2].hold), DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A client of the deployment made with d (it must be made). */
static dlock_client *deployment_client(const th_durable *d)
{
    char err[256];
    dlock_client *c = th_durable_new(surl, d, err, sizeof err, NULL);
    if (c == NULL)
        print_error("client: %s\n", err);
    assert_non_null(c);
    return c;
}

/* A client of the deployment waiting by strategy. */
static dlock_client *client_s(int strategy)
{
    th_durable d;
    th_durable_init(&d);
    d.lock_delay_ms = 0;
    d.wait_strategy = strategy;
    return deployment_client(&d);
}

/* A notify client of the deployment, wait_replicas 1 with the WAIT
 * timeout wait_ms, the command timeout cmd_ms, no lock-delay. */
static dlock_client *durable_client(int64_t wait_ms, int64_t cmd_ms)
{
    th_durable d;
    th_durable_init(&d);
    d.lock_delay_ms = 0;
    d.wait_strategy = DLOCK_WAIT_NOTIFY;
    d.wait_replicas = 1;
    d.wait_timeout_ms = wait_ms;
    d.command_timeout_ms = cmd_ms;
    return deployment_client(&d);
}

/* SIGSTOP (stop 1) or SIGCONT (0) every data node but the master m. */
static void replicas_stop(const th_server *m, int stop)
{
    int i;
    for (i = 0; i < TH_SENTINEL_DATA; i++)
        if (&sent.data[i] != m) {
            if (stop)
                th_server_pause(&sent.data[i]);
            else
                th_server_resume(&sent.data[i]);
        }
}

/* Locks in flight at once for test_waits_shared. */
#define NDUR 50

/* A durable loop (wait_replicas 1) starts NDUR locks at once while the
 * replicas are stopped: each one ends DLOCK_NOT_REPLICATED (its grant
 * given back). They share the loop's one connection to the master, and a
 * WAIT holds a connection up until it is answered (here its whole
 * timeout): with a WAIT per call each waited for those ahead, and all
 * but the first few ended DLOCK_ETIMEDOUT ("no answer in time"). The set
 * now writes one WAIT for the calls that asked meanwhile. Then, with the
 * replicas back, the names are free again. */
static void test_waits_shared(void **state)
{
    char name[32];
    dlock_client *c = durable_client(500, 1000);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    th_seen a[NDUR];
    th_server *m = node_of("dlock:{ls:ws}");
    int i, done = 0, flag = 0;
    int64_t end;
    (void)state;
    replicas_stop(m, 1);
    memset(a, 0, sizeof a);
    for (i = 0; i < NDUR; i++) {
        snprintf(name, sizeof name, "ls:ws:%d", i);
        assert_int_equal(dlock_loop_lock(NULL, l, name, &o, th_note, &a[i]),
                         DLOCK_OK);
    }
    for (end = th_now_ms() + LIVE_MS; !flag && th_now_ms() < end;) {
        th_loop_run_for(&l, 1, 50);
        for (done = 0, i = 0; i < NDUR; i++)
            done += a[i].done;
        flag = done == NDUR;
    }
    replicas_stop(m, 0);
    assert_int_equal(done, NDUR);
    for (i = 0; i < NDUR; i++) {
        if (a[i].status != DLOCK_NOT_REPLICATED)
            fprintf(stderr, "lock %d: %d (%s)\n", i, a[i].status, a[i].err);
        assert_int_equal(a[i].status, DLOCK_NOT_REPLICATED);
    }
    /* Every give-back done: each name waited for (the give-backs need
     * not go in the order of the locks). */
    for (i = 0; i < NDUR; i++) {
        for (end = th_now_ms() + LIVE_MS;
             th_cmd_int(m, "EXISTS dlock:{ls:ws:%d}", i) != 0 &&
             th_now_ms() < end;)
            th_loop_run_for(&l, 1, 50);
        assert_int_equal(th_cmd_int(m, "EXISTS dlock:{ls:ws:%d}", i), 0);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A downgrade on the loop with wait_replicas (WAIT 1 after it) while the
 * replicas are stopped: DLOCK_NOT_REPLICATED, the hold is lost, and both
 * forms are given back on the master (by the client's watchdog): no
 * reader stays and a writer gets the name. */
static void test_downgrade_not_replicated(void **state)
{
    /* The WAIT timeout as long as the command timeout: the hold's
     * renewal's WAIT may be out ahead of the downgrade's on the loop's
     * one connection (before the set shared its WAITs this ended "no
     * answer in time"). */
    dlock_client *c = durable_client(2000, 2000);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    th_seen a = {0}, g = {0};
    th_server *m = node_of("dlock:{ls:dr}");
    int64_t end;
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, l, "ls:dr", &o, th_note, &a),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &a.done), 0);
    assert_int_equal(a.status, DLOCK_OK);
    replicas_stop(m, 1);
    assert_int_equal(dlock_loop_downgrade(NULL, l, a.hold, th_note, &g),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &g.done), 0);
    replicas_stop(m, 0);
    assert_int_equal(g.status, DLOCK_NOT_REPLICATED);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_LOST);
    end = th_now_ms() + LIVE_MS;
    while (th_cmd_int(m, "ZCOUNT dlock:{ls:dr}:r 0 +inf") != 0 &&
           th_now_ms() < end)
        th_sleep_ms(50);
    assert_int_equal(th_cmd_int(m, "ZCOUNT dlock:{ls:dr}:r 0 +inf"), 0);
    o.wait_ms = LIVE_MS; /* the write hold is given back too */
    memset(&g, 0, sizeof g);
    assert_int_equal(dlock_loop_lock(NULL, l, "ls:dr", &o, th_note, &g),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &g.done), 0);
    assert_int_equal(g.status, DLOCK_OK);
    assert_int_equal(th_loop_release(l, g.hold), DLOCK_OK);
    assert_int_equal(th_loop_release(l, a.hold), DLOCK_LOST);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The master stopped (SIGSTOP: it neither answers nor closes) with a
 * lock's request out on the loop's lane to it; the sentinels promote a
 * replica, while tries on another name keep coming. The waiting lock
 * rides the outage and is granted on the promoted master: the lane to
 * the stopped one, quiet, must not hold the node's calls until it
 * resumes. */
static void test_stopped_master(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, 30000, 0);
    dlock_loop_acquire w = opts(c, LIVE_MS, 30000, 0);
    th_seen a = {0}, sink = {0};
    dlock_hold *h;
    int old = th_sentinel_master_port(&sent), now, i;
    th_server *m = th_sentinel_node(&sent, old);
    int64_t end;
    (void)state;
    assert_int_equal(th_loop_lock(l, "lsn:z0", &o, &h), DLOCK_OK);
    assert_int_equal(th_loop_release(l, h), DLOCK_OK);
    th_server_pause(m);
    assert_int_equal(dlock_loop_lock(NULL, l, "lsn:z1", &w, th_note, &a),
                     DLOCK_OK);
    /* Tries on other names meanwhile, till the lane goes quiet. */
    for (end = th_now_ms() + 3000; th_now_ms() < end;) {
        for (i = 0; i < 10; i++)
            assert_int_equal(
                dlock_loop_lock(NULL, l, "lsn:z2", &o, th_note, &sink),
                DLOCK_OK);
        th_loop_run_for(&l, 1, 100);
    }
    now = th_sentinel_wait_master(&sent, old, LIVE_MS);
    assert_true(now > 0 && now != old);
    end = th_now_ms() + LIVE_MS;
    while (!a.done && th_now_ms() < end)
        th_loop_run_for(&l, 1, 50);
    th_server_resume(m);
    if (a.status != DLOCK_OK)
        fprintf(stderr, "waiter: %d (%s)\n", a.status, a.err);
    assert_int_equal(a.done, 1);
    assert_int_equal(a.status, DLOCK_OK);
    assert_int_equal(
        th_cmd_int(th_sentinel_node(&sent, now), "EXISTS dlock:{lsn:z1}"), 1);
    assert_int_equal(th_loop_release(l, a.hold), DLOCK_OK);
    assert_int_equal(th_sentinel_settle(&sent, LIVE_MS), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_extend_release),
        cmocka_unit_test(test_permits),
        cmocka_unit_test(test_failover_under_waiter),
        cmocka_unit_test(test_stopped_master),
        cmocka_unit_test(test_waits_shared),
        cmocka_unit_test(test_wakeup),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_writer_mark),
        cmocka_unit_test(test_sem_fifo),
        cmocka_unit_test(test_elect_fenced),
        cmocka_unit_test(test_downgrade_not_replicated),
        cmocka_unit_test(test_downgrade),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test(test_cancelled_extend),
        cmocka_unit_test(test_downgrade_beside_round),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
