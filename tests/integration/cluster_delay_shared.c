/*
 * cluster_delay_shared.c - the lock-delay for semaphore permits and
 * readers on a real Redis Cluster (six nodes, three masters with a replica
 * each, tests/harness/topology.h).
 *
 * A client with lock_delay_ms set (and no wait_replicas) that saw a master
 * takes a permit and a reader there and gives them back; a CLUSTER
 * FAILOVER then promotes the master's replica (a new master for the
 * slots, which may lack grants of the old one). A permit or a reader of
 * those slots tried at once is refused with DLOCK_LOCK_DELAY ("...
 * (lock-delay)"), and no permit or reader is left on the server (a grant
 * made by the very attempt whose connection saw the new master is given
 * back); another master's slots grant at once; a waiting acquire waits
 * the delay out and gets its permit or reader.
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
#include "topology.h"

#include "fixture_cluster.h"

/* A cluster client with this lock-delay and no WAIT. */
static dlock_client *dclient(int64_t lock_delay_ms)
{
    th_durable d;
    th_durable_init(&d);
    d.command_timeout_ms = 2000;
    d.lock_delay_ms = lock_delay_ms;
    return fixture_durable(&d);
}

/* A try of a permit (rw 0, limit 2) or a reader (rw 1) of name. */
static int try_one(dlock_client *c, const char *name, int rw, int64_t wait_ms,
                   dlock_lock **l)
{
    return th_shared_take(l, c, name, rw, 2, wait_ms, 2000);
}

/* The same tries in th_acquire_fn's shape (th_try_until_delay_fn). */
static int try_permit(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t wait_ms, int64_t lease_ms)
{
    return th_shared_take(l, c, name, 0, 2, wait_ms, lease_ms);
}

static int try_reader(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t wait_ms, int64_t lease_ms)
{
    return th_shared_take(l, c, name, 1, 2, wait_ms, lease_ms);
}

/* Holders of name on the servers now. */
static int64_t holders(dlock_client *c, const char *name)
{
    dlock_shared_info si;
    assert_int_equal(dlock_shared_inspect(c, name, &si, NULL, 0), DLOCK_OK);
    return si.holders;
}

static void test_shared_lock_delay(void **state)
{
    dlock_client *c = dclient(5000);
    char sem[64], rw[64], other[64];
    dlock_lock *l = NULL;
    int port, k, rc;
    (void)state;
    port = th_cluster_slot_port(&cl, 0);
    assert_int_equal(
        th_cluster_pick(&cl, sem, sizeof sem, "sd-sem", 1, port, 1), 0);
    assert_int_equal(th_cluster_pick(&cl, rw, sizeof rw, "sd-rw", 1, port, 1),
                     0);
    assert_int_equal(
        th_cluster_pick(&cl, other, sizeof other, "sd-other", 1, port, 0), 0);

    /* The client sees every master involved (their identities). */
    for (k = 0; k < 2; k++) {
        assert_int_equal(try_one(c, k ? rw : sem, k, 0, &l), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    assert_int_equal(try_one(c, other, 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);

    assert_int_equal(
        th_cluster_failover(&cl, th_cluster_replica_port(&cl, port)), 0);
    assert_int_not_equal(th_cluster_slot_port(&cl, 0), port);
    /* Refused while the delay runs: a try of a permit, then of a reader
     * (the first call may still meet the cluster settling: retried). */
    for (k = 0; k < 2; k++) {
        const char *name = k ? rw : sem;
        l = NULL;
        rc = th_try_until_delay_fn(&l, c, name, k ? try_reader : try_permit,
                                   2000, 4000);
        if (rc != DLOCK_LOCK_DELAY)
            print_error("%s: expected LOCK_DELAY, got %s: %s\n", name,
                        dlock_status_name(rc), dlock_errmsg(c));
        assert_int_equal(rc, DLOCK_LOCK_DELAY);
        assert_null(l);
        assert_non_null(strstr(dlock_errmsg(c), "(lock-delay)"));
        assert_int_equal(holders(c, name), 0);
    }
    /* Another master's slots grant at once. */
    assert_int_equal(try_one(c, other, 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    /* A waiting acquire waits the delay out. */
    for (k = 0; k < 2; k++) {
        const char *name = k ? rw : sem;
        rc = try_one(c, name, k, 30000, &l);
        if (rc != DLOCK_OK)
            print_error("%s: %s: %s\n", name, dlock_status_name(rc),
                        dlock_errmsg(c));
        assert_int_equal(rc, DLOCK_OK);
        assert_int_equal(holders(c, name), 1);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_lock_delay),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
