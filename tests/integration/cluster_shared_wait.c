/*
 * cluster_shared_wait.c - wait_replicas (WAIT) for semaphore permits and
 * readers on a real Redis Cluster (six nodes, three masters with a
 * replica each, tests/harness/topology.h), where WAIT goes to the master
 * serving the name's slot and counts that master's replica.
 *
 * With wait_replicas 1 and the replica of one master SIGSTOPped: a permit
 * and a reader of a name that master serves are refused with
 * DLOCK_NOT_REPLICATED (a try at once, a waiting acquire at its deadline:
 * it tries again while it waits, issue 29 item 19) and nothing is left
 * held there; a permit handed over (FIFO) by a release to a queued waiter
 * is not returned to it while the replica is stopped (given back; the
 * waiter goes on waiting), and is once it runs again; names another
 * master serves are granted meanwhile. With the replica running again,
 * all are granted and are on the replica when the acquire returns.
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
#include "harness.h"
#include "th_cluster.h"
#include "th_replication.h"
#include "th_shared.h"
#include "th_waiter.h"
#include "topology.h"

#include "fixture_cluster.h"

/* WAIT's timeout: each refusal while the replica is stopped costs it;
 * with a healthy replica it must be ample on a loaded machine (TSan). */
#define WAIT_MS 1000

/* Bounded waits (liveness, not timing). */
#define LIVE_MS 20000

/* A cluster client with wait_replicas 1 (the default fair waiting). */
static dlock_client *wclient(void)
{
    th_durable d;
    th_durable_init(&d);
    d.command_timeout_ms = 2000;
    d.wait_replicas = 1;
    d.wait_timeout_ms = WAIT_MS;
    return fixture_durable(&d);
}

/* A permit of semaphore name (limit 1) or a reader of lock name (rw). */
static int take(dlock_client *c, const char *name, int rw, int64_t wait_ms,
                dlock_lock **l)
{
    return th_shared_take(l, c, name, rw, 1, wait_ms, 10000);
}

static void test_cluster_shared_wait(void **state)
{
    dlock_client *c = wclient();
    /* A FIFO waiter for a permit of hand, on its own thread and client;
     * it keeps what it gets. */
    th_waiter w = {.c = wclient(),
                   .wait_ms = LIVE_MS,
                   .lease_ms = 10000,
                   .acquire = th_permit1_acquire,
                   .hold_ms = TH_WAITER_KEEP};
    char sem[64], rw[64], hand[64], other[64], qkey[96];
    th_server *m, *r;
    dlock_lock *l, *h;
    int port, k, rc;
    int64_t end;
    (void)state;
    port = th_cluster_slot_port(&cl, 0);
    m = th_cluster_node(&cl, port);
    r = th_cluster_replica(&cl, port);
    assert_non_null(m);
    assert_non_null(r);
    assert_int_equal(
        th_cluster_pick(&cl, sem, sizeof sem, "csw-sem", 1, port, 1), 0);
    assert_int_equal(th_cluster_pick(&cl, rw, sizeof rw, "csw-rw", 1, port, 1),
                     0);
    assert_int_equal(
        th_cluster_pick(&cl, hand, sizeof hand, "csw-hand", 1, port, 1), 0);
    assert_int_equal(
        th_cluster_pick(&cl, other, sizeof other, "csw-other", 1, port, 0), 0);

    /* A holder, and a FIFO waiter queued behind it, before the stall. */
    assert_int_equal(take(c, hand, 0, 0, &h), DLOCK_OK);
    w.name = hand;
    assert_int_equal(th_waiter_start(&w), 0);
    snprintf(qkey, sizeof qkey, "LLEN dlock:{%s}:q", hand);
    end = th_now_ms() + LIVE_MS;
    while (th_cmd_int(m, qkey) < 1 && th_now_ms() < end)
        th_sleep_ms(20);
    assert_int_equal(th_cmd_int(m, qkey), 1);

    th_server_pause(r);
    for (k = 0; k < 4; k++) { /* permit, reader; a try, then waiting */
        const char *name = k & 1 ? rw : sem;
        rc = take(c, name, k & 1, k < 2 ? 0 : WAIT_MS, &l);
        assert_int_equal(th_not_replicated(c, rc, l, name), 0);
        assert_int_equal(th_shared_held(m, name, k & 1), 0);
    }
    /* Another master's replica acknowledges. */
    assert_int_equal(take(c, other, 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    /* The release hands the permit to the waiter: it does not count
     * while the replica is stopped (the waiter tries again, each grant
     * given back); once the replica runs, the waiter gets it. */
    assert_int_equal(dlock_lock_release(h), DLOCK_OK);
    th_sleep_ms(3 * WAIT_MS);
    assert_int_equal(atomic_load(&w.got), 0);
    th_server_resume(r);
    assert_int_equal(th_waiter_join(&w), 0);
    if (w.rc != DLOCK_OK)
        print_error("handed permit: %s: %s\n", dlock_status_name(w.rc),
                    dlock_errmsg(w.c));
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(th_shared_held(r, hand, 0), 1);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);

    for (k = 0; k < 3; k++) {
        const char *name = k == 1 ? rw : k == 2 ? hand : sem;
        assert_int_equal(take(c, name, k == 1, 5000, &l), DLOCK_OK);
        assert_int_equal(th_shared_held(r, name, k == 1), 1);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(w.c);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_shared_wait),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
