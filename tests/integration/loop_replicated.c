/*
 * loop_replicated.c - wait_replicas (WAIT) on a loop over one server
 * (dlock_loop.h), on a real master with one replica (two throwaway
 * redis-servers, the second REPLICAOF the first; the client names the
 * master alone).
 *
 * (a) the replica running: a lock, a permit and a reader taken through
 *     the loop are on the replica when their callbacks run (WAIT 1
 *     answered first); a renewed hold stays held past its lease.
 * (b) the replica SIGSTOPped: a lock try, a waiting lock, a permit and
 *     a reader complete with DLOCK_NOT_REPLICATED (a wait tries again,
 *     giving each grant back, until its deadline) and nothing is left on
 *     the master; a fenced set and an extend get DLOCK_NOT_REPLICATED; a
 *     downgrade too (and neither form is left); a hold the loop renews
 *     is found lost (renewals too few replicas acknowledged), its reason
 *     naming the replicas.
 * (c) the replica SIGSTOPped: many lock tries in flight at once all
 *     complete with DLOCK_NOT_REPLICATED (one WAIT for the answers that
 *     came meanwhile, not one each).
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
#include "th_shared.h"

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

/* A client with wait_replicas 1 and the WAIT timeout wait_ms. */
static dlock_client *wclient(int64_t wait_ms)
{
    th_durable d;
    dlock_client *c;
    th_durable_init(&d);
    d.command_timeout_ms = 2000;
    d.wait_replicas = 1;
    d.wait_timeout_ms = wait_ms;
    d.wait_strategy = DLOCK_WAIT_NOTIFY;
    c = th_durable_new(master.url, &d, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

static void replica_running(void)
{
    th_server_resume(&replica);
    assert_int_equal(th_cmd_int(&master, "WAIT 1 %d", LIVE_MS), 1);
}

/* Start kind k's acquire of name (0 lock, 1 permit of 1, 2 reader). */
static void start(dlock_loop *l, int k, const char *name,
                  const dlock_loop_acquire *o, th_seen *s)
{
    int rc = k == 0   ? dlock_loop_lock(NULL, l, name, o, th_note, s)
             : k == 1 ? dlock_loop_sem_acquire(NULL, l, name, 1, o, th_note, s)
                      : dlock_loop_read_acquire(NULL, l, name, o, th_note, s);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &s->done), 0);
}

/* Holds of kind k (as start's) of name on s: the lock hash's existence,
 * live permits or readers (th_shared_held). */
static long long held_on(const th_server *s, int k, const char *name)
{
    return k == 0 ? th_cmd_int(s, "EXISTS dlock:{%s}", name)
                  : th_shared_held(s, name, k - 1);
}

/* Run l until what it sent without waiting (give-backs) is answered. */
static void drain(dlock_loop *l)
{
    int i;
    for (i = 0; i < 300 && dlock_loop_pending(l) > 0; i++)
        th_loop_run_for(&l, 1, 10);
    assert_int_equal(dlock_loop_pending(l), 0);
}

/* (a): the WAIT timeout long (WAIT answers once the replica has it) and
 * the lease 1 s: on a loaded machine the replica took longer than
 * WAIT_MS, and a 300 ms lease had run out on the replica (which hides an
 * expired key) before the test read it. */
static void test_replicated(void **state)
{
    dlock_client *c = wclient(LIVE_MS);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 1000);
    const char *names[3] = {"lr-a-lock", "lr-a-sem", "lr-a-rd"};
    int k;
    (void)state;
    replica_running();
    for (k = 0; k < 3; k++) {
        th_seen s = {0};
        start(l, k, names[k], &o, &s);
        assert_int_equal(s.status, DLOCK_OK);
        /* WAIT 1 answered before the callback: the replica has it. */
        assert_int_equal(held_on(&replica, k, names[k]), 1);
        if (k == 0) { /* renewed with WAIT past three leases */
            th_loop_run_for(&l, 1, 3200);
            assert_int_equal(dlock_hold_status(s.hold), DLOCK_OK);
        }
        assert_int_equal(th_loop_release(l, s.hold), DLOCK_OK);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* (b) */
static void test_replica_stopped(void **state)
{
    dlock_client *c = wclient(WAIT_MS);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 900);
    const char *names[3] = {"lr-b-lock", "lr-b-sem", "lr-b-rd"};
    th_seen held = {0}, x = {0}, f = {0}, d = {0}, ren = {0};
    const char *why = NULL;
    int k, w;
    (void)state;
    replica_running();
    /* Held before the replica stops, not renewed (the renewals would fail
     * meanwhile): for the extend and the downgrade. */
    o.lease_ms = 30000;
    o.renew = 0;
    start(l, 0, "lr-b-held", &o, &held);
    assert_int_equal(held.status, DLOCK_OK);
    o.lease_ms = 900;
    o.renew = 1;
    th_server_pause(&replica);
    for (k = 0; k < 3; k++)
        for (w = 0; w < 2; w++) { /* a try, then a waiting acquire */
            th_seen s = {0};
            o.wait_ms = w ? 1000 : 0; /* a wait tries again until then */
            start(l, k, names[k], &o, &s);
            assert_int_equal(s.status, DLOCK_NOT_REPLICATED);
            assert_non_null(strstr(s.err, "replicas"));
            drain(l);
            assert_int_equal(held_on(&master, k, names[k]), 0);
        }
    o.wait_ms = 0;
    assert_int_equal(
        dlock_loop_fenced_set(NULL, l, "lr-b-value", 5, "v", 1, th_note, &f),
        DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &f.done), 0);
    assert_int_equal(f.status, DLOCK_NOT_REPLICATED);
    assert_int_equal(dlock_loop_extend(NULL, l, held.hold, 900, th_note, &x),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &x.done), 0);
    assert_int_equal(x.status, DLOCK_NOT_REPLICATED);
    assert_int_equal(dlock_loop_downgrade(NULL, l, held.hold, th_note, &d),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &d.done), 0);
    assert_int_equal(d.status, DLOCK_NOT_REPLICATED);
    drain(l);
    assert_int_equal(held_on(&master, 0, "lr-b-held"), 0);
    assert_int_equal(held_on(&master, 2, "lr-b-held"), 0);
    assert_int_equal(dlock_hold_status(held.hold), DLOCK_LOST);
    {
        th_seen s = {0};
        assert_int_equal(dlock_loop_release(NULL, l, held.hold, th_note, &s),
                         DLOCK_OK);
        assert_int_equal(th_loop_run(&l, 1, &s.done), 0);
        assert_int_equal(s.status, DLOCK_LOST);
    }
    /* Renewals WAIT too: with the replica stopped the hold is lost. The
     * grant needs the replica, the renewals then go without it. */
    th_server_resume(&replica);
    start(l, 0, "lr-b-renewed", &o, &ren);
    assert_int_equal(ren.status, DLOCK_OK);
    th_server_pause(&replica);
    th_loop_run_for(&l, 1, 2000);
    assert_int_equal(dlock_hold_lost_reason(ren.hold, &why), DLOCK_LOST);
    assert_non_null(strstr(why, "replicas"));
    th_server_resume(&replica);
    {
        th_seen s = {0};
        assert_int_equal(dlock_loop_release(NULL, l, ren.hold, th_note, &s),
                         DLOCK_OK);
        assert_int_equal(th_loop_run(&l, 1, &s.done), 0);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Locks in flight at once for test_many_stopped. */
#define NMANY 50

/* (c) NMANY lock tries in flight at once with the replica stopped: each
 * ends DLOCK_NOT_REPLICATED and nothing is left on the master. They
 * share the loop's connection, which a WAIT holds up until it is
 * answered (here its whole timeout): a WAIT per try made each wait for
 * those ahead, past the command timeout. */
static void test_many_stopped(void **state)
{
    dlock_client *c = wclient(WAIT_MS);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    th_seen s[NMANY];
    char name[32];
    int i, done = 0;
    int64_t end;
    (void)state;
    replica_running();
    th_server_pause(&replica);
    memset(s, 0, sizeof s);
    for (i = 0; i < NMANY; i++) {
        snprintf(name, sizeof name, "lr-c-%d", i);
        assert_int_equal(dlock_loop_lock(NULL, l, name, &o, th_note, &s[i]),
                         DLOCK_OK);
    }
    for (end = th_now_ms() + LIVE_MS; done < NMANY && th_now_ms() < end;) {
        th_loop_run_for(&l, 1, 50);
        for (done = 0, i = 0; i < NMANY; i++)
            done += s[i].done;
    }
    assert_int_equal(done, NMANY);
    for (i = 0; i < NMANY; i++) {
        if (s[i].status != DLOCK_NOT_REPLICATED)
            fprintf(stderr, "lock %d: %d (%s)\n", i, s[i].status, s[i].err);
        assert_int_equal(s[i].status, DLOCK_NOT_REPLICATED);
    }
    drain(l);
    for (i = 0; i < NMANY; i++)
        assert_int_equal(th_cmd_int(&master, "EXISTS dlock:{lr-c-%d}", i), 0);
    th_server_resume(&replica);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* (d) a loop over the replica itself (a fixed redis:// URL naming a
 * replica): its command connection's open finds a replica, so an
 * acquire ends with DLOCK_EREFUSED naming it and its master, before any
 * lock write (dlock__node_refuses_locks, the engine's rule too). */
static void test_replica_refused(void **state)
{
    th_durable d;
    dlock_client *c;
    dlock_loop *l;
    dlock_loop_acquire o;
    th_seen s;
    (void)state;
    replica_running();
    th_durable_init(&d);
    c = th_durable_new(replica.url, &d, NULL, 0, NULL);
    assert_non_null(c);
    l = th_loop_new(c);
    o = th_loop_opts(c, 0, 1000);
    memset(&s, 0, sizeof s);
    start(l, 0, "lr-d-lock", &o, &s);
    print_message("replica: %d (%s)\n", s.status, s.err);
    assert_int_equal(s.status, DLOCK_EREFUSED);
    assert_non_null(strstr(s.err, "is a replica (of "));
    assert_int_equal(th_cmd_int(&master, "EXISTS dlock:{lr-d-lock}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicated),
        cmocka_unit_test(test_replica_stopped),
        cmocka_unit_test(test_many_stopped),
        cmocka_unit_test(test_replica_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
