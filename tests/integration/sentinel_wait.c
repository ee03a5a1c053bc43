/*
 * sentinel_wait.c - a waiting acquire on Sentinel rides out what an HA
 * setup exists for (issue 29 item 19), within its wait:
 *  - its first attempt falls while the sentinels still name a master
 *    that was just killed (-9): it is granted on the promoted replica;
 *  - wait_replicas with too few replicas answering (SIGSTOPped): each
 *    attempt's grant is given back (DLOCK_NOT_REPLICATED) and the wait
 *    tries again; once the replicas are back it is granted. A try
 *    (wait_ms 0) still says NOT_REPLICATED at once, and so does a wait
 *    with DLOCK_ACQUIRE_NO_OUTAGE_WAIT.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "th_replication.h"
#include "topology.h"

#include "fixture_sentinel.h"

/* A client with wait_replicas (WAIT timeout 500 ms) and no lock-delay. */
static dlock_client *sclient(int wait_replicas)
{
    char err[256];
    int rc;
    dlock_client *c =
        th_durable_client(surl, wait_replicas, 500, 0, err, sizeof err, &rc);
    if (c == NULL)
        print_error("client: %s\n", err);
    assert_non_null(c);
    return c;
}

/* Does the current master hold a key for lock NAME? */
static int master_has_lock(const char *name)
{
    int p = th_sentinel_master_port(&sent);
    assert_true(p > 0);
    return (int)th_cmd_int(th_sentinel_node(&sent, p), "EXISTS dlock:{%s}",
                           name);
}

/* Acquire NAME (wait_ms, flags) on c; the status, the lock in *l. */
static int acquire(dlock_client *c, const char *name, int64_t wait_ms,
                   unsigned flags, dlock_lock **l)
{
    dlock_acquire_options ao;
    int64_t t0 = th_now_ms();
    int rc;
    dlock_acquire_options_init(&ao);
    ao.wait_ms = wait_ms;
    ao.lease_ms = 10000;
    ao.flags = flags;
    rc = dlock_lock_acquire_ex(l, c, name, &ao);
    print_message("%s (wait %lld, flags %u): %s after %lld ms: %s\n", name,
                  (long long)wait_ms, flags, dlock_status_name(rc),
                  (long long)(th_now_ms() - t0), dlock_errmsg(c));
    return rc;
}

/* kill -9 of the master, then at once a waiting acquire: granted on the
 * promoted replica. */
static void test_first_attempt_dead_master(void **state)
{
    dlock_client *c = sclient(0);
    dlock_lock *l = NULL;
    int mp, rc;
    th_server *m;
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    assert_int_equal(acquire(c, "sw-warm", 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    mp = th_sentinel_master_port(&sent);
    m = th_sentinel_node(&sent, mp);
    th_server_kill9(m);
    rc = acquire(c, "sw-dead", 60000, 0, &l);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(th_sentinel_wait_master(&sent, mp, TH_TOPO_WAIT_MS) > 0);
    assert_int_not_equal(th_sentinel_master_port(&sent), mp);
    assert_int_equal(master_has_lock("sw-dead"), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    assert_int_equal(th_server_restart(m), 0);
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
}

/* The replicas of master port *arg resumed after a while (a thread:
 * signals only, no server started). */
static void *resume_later(void *arg)
{
    th_sleep_ms(1500);
    th_sentinel_resume_replicas(&sent, *(int *)arg);
    return NULL;
}

/* Too few replicas: a try and a wait that does not ride say
 * NOT_REPLICATED at once; a waiting acquire is granted once they are
 * back. */
static void test_wait_replicas_rides(void **state)
{
    dlock_client *c = sclient(2);
    dlock_lock *l = NULL;
    pthread_t t;
    int mp, rc;
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    assert_int_equal(acquire(c, "sw-rep-warm", 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    mp = th_sentinel_master_port(&sent);
    th_sentinel_pause_replicas(&sent, mp);
    rc = acquire(c, "sw-rep-try", 0, 0, &l);
    if (rc != DLOCK_NOT_REPLICATED)
        th_sentinel_resume_replicas(&sent, mp);
    assert_int_equal(rc, DLOCK_NOT_REPLICATED);
    rc = acquire(c, "sw-rep-flag", 10000, DLOCK_ACQUIRE_NO_OUTAGE_WAIT, &l);
    if (rc != DLOCK_NOT_REPLICATED)
        th_sentinel_resume_replicas(&sent, mp);
    assert_int_equal(rc, DLOCK_NOT_REPLICATED);
    assert_int_equal(pthread_create(&t, NULL, resume_later, &mp), 0);
    rc = acquire(c, "sw-rep", 20000, 0, &l);
    pthread_join(t, NULL);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(master_has_lock("sw-rep"), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* A notify client of the string layout without retention on the
 * Sentinel group, with WAIT 2 (500 ms), the group settled. */
static dlock_client *string_durable(void)
{
    th_durable d;
    dlock_client *c;
    th_durable_init(&d);
    d.wait_replicas = 2;
    d.wait_timeout_ms = 500;
    d.lock_delay_ms = 0;
    d.wait_strategy = DLOCK_WAIT_NOTIFY;
    d.fence_retention_ms = 0;
    d.string_layout = 1;
    c = th_durable_new(surl, &d, NULL, 0, NULL);
    assert_non_null(c);
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    return c;
}

/* The string layout's plain acquire (SET NX PX, no script) on Sentinel
 * with wait_replicas: WAIT follows it in the same round trip; a grant
 * the replicas did not acknowledge is given back (NOT_REPLICATED, the
 * key gone); the lazy token is issued on the master. */
static void test_string_plain_replicated(void **state)
{
    dlock_client *c;
    dlock_lock *l = NULL;
    redisReply *r;
    char want[256];
    int mp, rc;
    (void)state;
    c = string_durable();
    assert_int_equal(acquire(c, "sw-str", 0, 0, &l), DLOCK_OK);
    mp = th_sentinel_master_port(&sent);
    r = th_cmd(th_sentinel_node(&sent, mp), "GET dlock:{sw-str}");
    assert_non_null(r);
    snprintf(want, sizeof want, "%s 1 0", dlock_lock_owner(l));
    assert_string_equal(r->type == REDIS_REPLY_STRING ? r->str : "", want);
    freeReplyObject(r);
    assert_true(dlock_lock_token(l) > 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_sentinel_pause_replicas(&sent, mp);
    rc = acquire(c, "sw-str-try", 0, 0, &l);
    th_sentinel_resume_replicas(&sent, mp);
    assert_int_equal(rc, DLOCK_NOT_REPLICATED);
    assert_int_equal(master_has_lock("sw-str-try"), 0);
    dlock_client_free(c);
}

/* dlock_lock_fenced_set_release on Sentinel (the string layout, WAIT 2):
 * stored on the master with the token it issued, released, the
 * replicas' acknowledgements counted; replicas paused: done on the master
 * but DLOCK_NOT_REPLICATED. */
static void test_string_set_release(void **state)
{
    dlock_client *c;
    dlock_lock *l = NULL;
    redisReply *r;
    th_server *m;
    int mp, rc;
    (void)state;
    c = string_durable();
    mp = th_sentinel_master_port(&sent);
    m = th_sentinel_node(&sent, mp);
    assert_int_equal(acquire(c, "sw-sr", 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(l, "sw-sr-res", "v1", 2),
                     DLOCK_OK);
    assert_int_equal(master_has_lock("sw-sr"), 0);
    r = th_cmd(m, "GET sw-sr-res"); /* the string form: "<fence> v1" */
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_non_null(strstr(r->str, " v1"));
    assert_string_equal(strstr(r->str, " v1"), " v1");
    freeReplyObject(r);
    assert_int_equal(acquire(c, "sw-sr", 0, 0, &l), DLOCK_OK);
    th_sentinel_pause_replicas(&sent, mp);
    rc = dlock_lock_fenced_set_release(l, "sw-sr-res", "v2", 2);
    th_sentinel_resume_replicas(&sent, mp);
    assert_int_equal(rc, DLOCK_NOT_REPLICATED);
    assert_int_equal(master_has_lock("sw-sr"), 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_replicas_rides),
        cmocka_unit_test(test_string_plain_replicated),
        cmocka_unit_test(test_string_set_release),
        cmocka_unit_test(test_first_attempt_dead_master),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
