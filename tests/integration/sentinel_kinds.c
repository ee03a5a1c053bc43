/*
 * sentinel_kinds.c - waiters of every kind ride out a Sentinel failover
 * (issue 28: one wait for every kind). A lock, a permit and a reader
 * wait while another client holds what keeps each out; the master is
 * killed (-9) and a replica promoted. The waiters' attempts meanwhile
 * fail (refused connections, no master yet): a waiter on Sentinel retries
 * through that rather than return DLOCK_EIO, and each gets in once the
 * holder's lease has run out on the new master. One body for the three
 * kinds, run together through one failover.
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
#include "th_replication.h"
#include "th_shared.h"
#include "th_waiter.h"
#include "topology.h"

#include "fixture_sentinel.h"

/* A client of the deployment, strategy as given; no WAIT (a grant taken
 * while the restarted node is not yet a replica again would be refused
 * for want of acknowledgements, which is not this test's point); a
 * lock-delay of 3 s, not Sentinel's default 30 s: the waiters still wait
 * one out after the failover (within the holder's 6 s lease), without
 * the test waiting 30 s for it. */
static dlock_client *sclient(int strategy)
{
    th_durable d;
    dlock_client *c;
    th_durable_init(&d);
    d.wait_strategy = strategy;
    d.lock_delay_ms = 3000;
    c = th_durable_new(surl, &d, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

/* kill -9 of the master with a waiter of each kind waiting (spinning, so
 * that each tries during the outage): every waiter gets in. */
static void test_failover_under_waiters(void **state)
{
    dlock_client *a, *b;
    dlock_lock *held[TH_NKINDS];
    th_waiter w[TH_NKINDS];
    char names[TH_NKINDS][64];
    th_server *m;
    int i, port;
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
    a = sclient(DLOCK_WAIT_FAIR);
    b = sclient(DLOCK_WAIT_SPIN);
    memset(w, 0, sizeof w);
    for (i = 0; i < TH_NKINDS; i++) {
        const th_kind *k = &th_kinds[i];
        snprintf(names[i], sizeof names[i], "sk-%s", k->what);
        /* Longer than the failover: the waiters wait through it. */
        assert_int_equal(k->blocker(&held[i], a, names[i], 0, 6000), DLOCK_OK);
        w[i].c = b;
        w[i].name = names[i];
        w[i].wait_ms = 60000;
        w[i].lease_ms = 10000;
        w[i].acquire = k->acquire;
        assert_int_equal(th_waiter_start(&w[i]), 0);
    }
    assert_int_equal(th_wait_busy(b, TH_NKINDS, 20000), 0);
    port = th_sentinel_kill_master(&sent);
    assert_true(port > 0);
    for (i = 0; i < TH_SENTINEL_DATA; i++)
        if (sent.data[i].pid <= 0)
            assert_int_equal(th_server_restart(&sent.data[i]), 0);
    for (i = 0; i < TH_NKINDS; i++) {
        assert_int_equal(th_waiter_join(&w[i]), 0);
        print_message("%s waiter: %s after the failover\n", th_kinds[i].what,
                      dlock_status_name(w[i].rc));
        assert_int_equal(w[i].rc, DLOCK_OK);
        dlock_lock_release(held[i]); /* lost with the old master, or not */
    }
    m = th_sentinel_node(&sent, port);
    assert_non_null(m);
    dlock_client_free(a);
    dlock_client_free(b);
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failover_under_waiters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
