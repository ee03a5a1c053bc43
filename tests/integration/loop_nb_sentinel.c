/*
 * loop_nb_sentinel.c - the event loop never blocks its thread on a
 * Sentinel client (issue 28). The library counts every blocking wait of
 * its lower tiers (a poll() with a timeout, a sleep, a wait for another
 * thread's work) made while the loop drives an attempt or an engine call
 * (dlock__nb_blocked, base/util.h); these tests make the loop locate the
 * master (a fresh client, a sentinel stopped, a failover) and open its
 * connections, and read that count: it must not move. No clock is
 * measured.
 */
#include <setjmp.h>
#include <signal.h>
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

/* The library's count of blocking waits under the loop (base/util.h). */
uint64_t dlock__nb_blocked(void);

/* A client of the deployment without a lock-delay, never connected. */
static dlock_client *client(void)
{
    char err[256];
    dlock_client *c = th_durable_client(surl, 0, 0, 0, err, sizeof err, NULL);
    if (c == NULL)
        print_error("client: %s\n", err);
    assert_non_null(c);
    return c;
}

/* Take and release NAME through a new loop of c; the status. */
static int lock_once(dlock_client *c, const char *name)
{
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 20000, 5000);
    dlock_hold *h = NULL;
    int rc;
    assert_non_null(l);
    rc = th_loop_lock(l, name, &o, &h);
    if (rc == DLOCK_OK)
        assert_int_equal(th_loop_release(l, h), DLOCK_OK);
    dlock_loop_free(l);
    return rc;
}

/* A fresh client's first acquire locates the master (the sentinels
 * asked, the address checked) and opens its connection on the loop. */
static void test_first_locate(void **state)
{
    dlock_client *c = client();
    uint64_t before = dlock__nb_blocked();
    (void)state;
    assert_int_equal(lock_once(c, "nbs:a"), DLOCK_OK);
    assert_int_equal(dlock__nb_blocked() - before, 0);
    dlock_client_free(c);
}

/* One sentinel stopped (SIGSTOP: its socket accepts, it never answers):
 * the two asked first name one master, a majority of the three, so the
 * locate does not wait for the stopped one (it used to wait out its
 * connect timeout, leaving no time to check the master). */
static void test_sentinel_stopped(void **state)
{
    dlock_client *c = client();
    uint64_t before = dlock__nb_blocked();
    int rc;
    (void)state;
    th_server_pause(&sent.sentinels[TH_SENTINEL_COUNT - 1]);
    rc = lock_once(c, "nbs:b");
    th_server_resume(&sent.sentinels[TH_SENTINEL_COUNT - 1]);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock__nb_blocked() - before, 0);
    dlock_client_free(c);
}

/* After a failover the client's pooled connection points to a replica:
 * the next acquire finds out, locates the new master and goes there,
 * all on the loop. */
static void test_after_failover(void **state)
{
    dlock_client *c = client();
    uint64_t before;
    int old, now;
    (void)state;
    assert_int_equal(lock_once(c, "nbs:c"), DLOCK_OK);
    old = th_sentinel_master_port(&sent);
    now = th_sentinel_failover(&sent);
    assert_true(now > 0 && now != old);
    before = dlock__nb_blocked();
    assert_int_equal(lock_once(c, "nbs:c"), DLOCK_OK);
    assert_int_equal(dlock__nb_blocked() - before, 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_locate),
        cmocka_unit_test(test_sentinel_stopped),
        cmocka_unit_test(test_after_failover),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
