/*
 * loop_nb_cluster.c - the event loop never blocks its thread on a Redis
 * Cluster client (issue 28): the slot map loaded on a fresh client, the
 * masters' connections opened, a MOVED after CLUSTER FAILOVER followed
 * to the promoted master, all while the loop drives its jobs. The
 * library counts every blocking wait of its lower tiers made under the
 * loop (dlock__nb_blocked, base/util.h); it must not move. No clock is
 * measured.
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

/* The library's count of blocking waits under the loop (base/util.h). */
uint64_t dlock__nb_blocked(void);

/* Names spread over the masters. */
#define NNAMES 12

/* A client of the cluster without a lock-delay, never connected. */
static dlock_client *client(void)
{
    th_durable d;
    th_durable_init(&d);
    d.lock_delay_ms = 0;
    return fixture_durable(&d);
}

/* Take and release NAME through loop l; the status. */
static int lock_once(dlock_loop *l, dlock_client *c, const char *name)
{
    dlock_loop_acquire o = th_loop_opts(c, 20000, 5000);
    dlock_hold *h = NULL;
    int rc = th_loop_lock(l, name, &o, &h);
    if (rc == DLOCK_OK)
        assert_int_equal(th_loop_release(l, h), DLOCK_OK);
    return rc;
}

/* A fresh client: the map is loaded and every master's connection is
 * opened by the loop's jobs. */
static void test_first_map(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = th_loop_new(c);
    uint64_t before = dlock__nb_blocked();
    char name[32];
    int i;
    (void)state;
    assert_non_null(l);
    for (i = 0; i < NNAMES; i++) {
        snprintf(name, sizeof name, "nbc:%d", i);
        assert_int_equal(lock_once(l, c, name), DLOCK_OK);
    }
    assert_int_equal(dlock__nb_blocked() - before, 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A CLUSTER FAILOVER moves a name's slot: the next acquire meets a
 * MOVED (or a dropped connection), refreshes the map and opens the
 * promoted master's connection, on the loop. */
static void test_after_failover(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = th_loop_new(c);
    const char key[] = "dlock:{nbf}";
    uint64_t before;
    int master, replica;
    (void)state;
    assert_non_null(l);
    assert_int_equal(lock_once(l, c, "nbf"), DLOCK_OK);
    master = th_cluster_key_port(&cl, key, strlen(key));
    replica = th_cluster_replica_port(&cl, master);
    assert_true(master > 0 && replica > 0);
    assert_int_equal(th_cluster_failover(&cl, replica), 0);
    before = dlock__nb_blocked();
    assert_int_equal(lock_once(l, c, "nbf"), DLOCK_OK);
    assert_int_equal(dlock__nb_blocked() - before, 0);
    assert_int_equal(th_cluster_key_port(&cl, key, strlen(key)), replica);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_map),
        cmocka_unit_test(test_after_failover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
