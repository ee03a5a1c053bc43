/*
 * shared_replicated.c - wait_replicas (WAIT) for semaphore permits and
 * read-write locks' readers, on a real master with one replica (two
 * throwaway redis-servers, the second REPLICAOF the first; the client
 * names the master alone, as a plain single-server client does).
 *
 * (a) wait_replicas 1, the replica running: a permit and a reader are
 *     granted, and each is on the replica when its acquire returns.
 * (b) the replica SIGSTOPped: a permit try, a waiting permit acquire, a
 *     reader try and a waiting reader acquire all return
 *     DLOCK_NOT_REPLICATED at once, and nothing is left held on the
 *     master (no permit, no reader).
 * (c) a permit handed over (FIFO) by the holder's release to a queued
 *     waiter while the replica is stopped: the release carries no WAIT,
 *     so the waiter confirms it with WAIT before its acquire returns; it
 *     returns DLOCK_NOT_REPLICATED and the permit is given back.
 * (d) a writer downgraded to a reader while the replica is stopped:
 *     DLOCK_NOT_REPLICATED, and neither the write hold nor the read lease
 *     is left.
 * After each stop the replica is resumed and the same acquires succeed.
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

static th_server master, replica;

/* WAIT's timeout: each refusal while the replica is stopped costs it. */
#define WAIT_MS 300

/* Bounded waits for the servers (liveness, not timing). */
#define LIVE_MS 20000

static int setup(void **state)
{
    (void)state;
    return th_pair_start(&master, &replica, LIVE_MS);
}

static int teardown(void **state)
{
    (void)state;
    th_pair_stop(&master, &replica);
    return 0;
}

/* A client of the master with wait_replicas (the default fair waiting)
 * and WAIT's timeout wait_ms. */
static dlock_client *wclient_wait(int wait_replicas, int64_t wait_ms)
{
    th_durable d;
    dlock_client *c;
    th_durable_init(&d);
    d.command_timeout_ms = 2000;
    d.wait_replicas = wait_replicas;
    d.wait_timeout_ms = wait_ms;
    c = th_durable_new(master.url, &d, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

/* The same with WAIT_MS, the timeout the refusals below cost. */
static dlock_client *wclient(int wait_replicas)
{
    return wclient_wait(wait_replicas, WAIT_MS);
}

/* A permit of semaphore name (limit 1) or a reader of lock name (rw). */
static int take(dlock_client *c, const char *name, int rw, int64_t wait_ms,
                dlock_lock **l)
{
    return th_shared_take(l, c, name, rw, 1, wait_ms, 10000);
}

/* Does server s have a write hold on lock name (its hash's owner)? */
static long long writer_on(const th_server *s, const char *name)
{
    redisReply *r = th_cmd(s, "HGETALL dlock:{%s}", name);
    long long n = 0;
    size_t i;
    assert_non_null(r);
    for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->str[0] != '#') /* '#r', '#w': readers' marks */
            n++;
    freeReplyObject(r);
    return n;
}

/* Each test starts with the replica running (an earlier test that failed
 * may have left it stopped). */
static void replica_running(void)
{
    th_server_resume(&replica);
    assert_int_equal(th_cmd_int(&master, "WAIT 1 %d", LIVE_MS), 1);
}

/* (a) */
static void test_granted_with_replica(void **state)
{
    /* The replica is healthy: WAIT's timeout is a bound, not what is
     * tested (300 ms ran out once under a loaded -j2 run). */
    dlock_client *c = wclient_wait(1, LIVE_MS);
    dlock_lock *l;
    int rw;
    (void)state;
    replica_running();
    for (rw = 0; rw < 2; rw++) {
        const char *name = rw ? "sr-a-rw" : "sr-a-sem";
        assert_int_equal(take(c, name, rw, 0, &l), DLOCK_OK);
        /* WAIT 1 answered before the acquire returned: the replica has
         * the grant now. */
        assert_int_equal(th_shared_held(&replica, name, rw), 1);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* (b), for a permit (rw 0) or a reader (rw 1). */
static void refused_while_replica_stopped(int rw)
{
    dlock_client *c = wclient(1);
    const char *name = rw ? "sr-b-rw" : "sr-b-sem";
    dlock_lock *l;
    int k, rc;
    replica_running();
    th_server_pause(&replica);
    for (k = 0; k < 2; k++) { /* a try, then a waiting acquire */
        rc = take(c, name, rw, k ? 5000 : 0, &l);
        assert_int_equal(th_not_replicated(c, rc, l, name), 0);
        assert_non_null(strstr(dlock_errmsg(c), "replicas"));
        assert_int_equal(th_shared_held(&master, name, rw), 0);
    }
    th_server_resume(&replica);
    assert_int_equal(take(c, name, rw, 5000, &l), DLOCK_OK);
    assert_int_equal(th_shared_held(&replica, name, rw), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void test_permit_refused_while_replica_stopped(void **state)
{
    (void)state;
    refused_while_replica_stopped(0);
}

static void test_reader_refused_while_replica_stopped(void **state)
{
    (void)state;
    refused_while_replica_stopped(1);
}

/* (c) */
static void test_handoff_while_replica_stopped(void **state)
{
    dlock_client *a = wclient(1);
    /* The waiter, on its own thread and client; it keeps what it gets. */
    th_waiter w = {.c = wclient(1),
                   .name = "sr-c-sem",
                   .wait_ms = LIVE_MS,
                   .lease_ms = 10000,
                   .acquire = th_permit1_acquire,
                   .hold_ms = TH_WAITER_KEEP};
    dlock_lock *l;
    int64_t end;
    (void)state;
    replica_running();
    assert_int_equal(take(a, "sr-c-sem", 0, 0, &l), DLOCK_OK);
    assert_int_equal(th_waiter_start(&w), 0);
    /* Queued (FIFO): the release hands the permit to it. */
    end = th_now_ms() + LIVE_MS;
    while (th_cmd_int(&master, "LLEN dlock:{sr-c-sem}:q") < 1 &&
           th_now_ms() < end)
        th_sleep_ms(20);
    assert_int_equal(th_cmd_int(&master, "LLEN dlock:{sr-c-sem}:q"), 1);
    th_server_pause(&replica);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_waiter_join(&w), 0);
    assert_int_equal(th_not_replicated(w.c, w.rc, w.l, "handed permit"), 0);
    assert_int_equal(th_shared_held(&master, "sr-c-sem", 0), 0);
    th_server_resume(&replica);
    assert_int_equal(take(w.c, "sr-c-sem", 0, 5000, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(w.c);
    dlock_client_free(a);
}

/* (d) */
static void test_downgrade_while_replica_stopped(void **state)
{
    dlock_client *c = wclient(1);
    dlock_lock *l, *r = NULL;
    int rc;
    (void)state;
    replica_running();
    assert_int_equal(dlock_lock_acquire(&l, c, "sr-d-rw", 0, 10000), DLOCK_OK);
    assert_int_equal(writer_on(&replica, "sr-d-rw"), 1);
    th_server_pause(&replica);
    rc = dlock_rw_downgrade(&r, l);
    assert_int_equal(th_not_replicated(c, rc, r, "downgrade"), 0);
    assert_int_equal(th_shared_held(&master, "sr-d-rw", 1), 0);
    assert_int_equal(writer_on(&master, "sr-d-rw"), 0);
    th_server_resume(&replica);
    assert_int_equal(dlock_lock_acquire(&l, c, "sr-d-rw", 5000, 10000),
                     DLOCK_OK);
    assert_int_equal(dlock_rw_downgrade(&r, l), DLOCK_OK);
    assert_int_equal(th_shared_held(&replica, "sr-d-rw", 1), 1);
    assert_int_equal(dlock_lock_release(r), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_granted_with_replica),
        cmocka_unit_test(test_permit_refused_while_replica_stopped),
        cmocka_unit_test(test_reader_refused_while_replica_stopped),
        cmocka_unit_test(test_handoff_while_replica_stopped),
        cmocka_unit_test(test_downgrade_while_replica_stopped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
