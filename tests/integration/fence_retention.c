/*
 * fence_retention.c - the option fence_retention_ms (issue 31), against a
 * real server. With 0 a released name leaves no key behind (neither the
 * lock hash nor the fence hash), also after a fair hand-over and after
 * an undo; the hold's token lives in the lock hash ('#t') while it is
 * held, so reentry, inspect and dlock_lock_check still see it; tokens
 * still increase across holds, by the server's clock: a fence hash left
 * by an earlier grant is still read, but once a release deleted it the
 * next token follows the clock (a planted n far above it is forgotten),
 * which the retained default never does. A custom retention sets the
 * fence hash's TTL; bad values and options of version 1 are checked.
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
#include "fixture.h"
#include "th_waiter.h"

#define DAY_MS 86400000LL

/* A fair client of srv with this fence retention. */
static dlock_client *client_keep(int64_t keep_ms)
{
    const char *url = th_url(&srv);
    dlock_client *c = th_client_keep(url, keep_ms);
    assert_non_null(c);
    return c;
}

/* Does KEY exist on srv? */
static int exists(const char *key)
{
    return (int)th_cmd_int(&srv, "EXISTS %s", key);
}

/* The server's time in us. */
static uint64_t server_us(void)
{
    redisReply *r = th_cmd(&srv, "TIME");
    uint64_t us;
    assert_non_null(r);
    us = strtoull(r->element[0]->str, NULL, 10) * 1000000 +
         strtoull(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    return us;
}

/* A lock hash field as a number (0 when absent). */
static uint64_t hfield(const char *key, const char *field)
{
    redisReply *r = th_cmd(&srv, "HGET %s %s", key, field);
    uint64_t v = 0;
    assert_non_null(r);
    if (r->type == REDIS_REPLY_STRING)
        v = strtoull(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

/* 0: while held the token is in the lock hash and nowhere else; the
 * release leaves no key; the next holds get higher tokens. */
static void test_none_leaves_nothing(void **state)
{
    dlock_client *c = client_keep(0);
    dlock_lock *l, *l2;
    dlock_info info;
    uint64_t prev = 0;
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(dlock_lock_acquire(&l, c, "fr-none", 0, 10000),
                         DLOCK_OK);
        assert_true(dlock_lock_token(l) > prev);
        prev = dlock_lock_token(l);
        assert_int_equal(hfield("dlock:{fr-none}", "#t"), prev);
        assert_int_equal(exists("dlock:{fr-none}:f"), 0);
        /* Reentry, inspect and check see the hold's token. */
        assert_int_equal(dlock_lock_acquire(&l2, c, "fr-none", 0, 10000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_token(l2), prev);
        assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
        assert_int_equal(dlock_lock_inspect(c, "fr-none", &info), DLOCK_OK);
        assert_int_equal(info.held, 1);
        assert_int_equal(info.reentry, 1);
        assert_int_equal(info.last_token, prev);
        assert_int_equal(dlock_lock_check(c, "fr-none", prev), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        assert_int_equal(exists("dlock:{fr-none}"), 0);
        assert_int_equal(exists("dlock:{fr-none}:f"), 0);
    }
    dlock_client_free(c);
}

/* 0 with a fair hand-over: the waiter gets a higher token (kept in the
 * lock hash, and in the fence hash, which a waiter of an earlier version
 * reads), and its release, with nobody queued, removes the lock and the
 * queue; the fence hash stays for the hand-over's retention (7 to 14
 * days), and the next holder's release keeps it too. */
static void test_none_after_handover(void **state)
{
    dlock_client *ca = client_keep(0), *cb = client_keep(0);
    dlock_lock *la;
    th_waiter w = th_waiter_keeping(cb, "fr-hand");
    uint64_t ta, tw; /* tokens, read while their handles live */
    (void)state;
    assert_int_equal(dlock_lock_acquire(&la, ca, "fr-hand", 0, 10000),
                     DLOCK_OK);
    ta = dlock_lock_token(la);
    assert_int_equal(th_waiter_start(&w), 0);
    assert_int_equal(th_await_queued(&srv, "fr-hand", 1), 0);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK); /* hands over */
    assert_int_equal(th_waiter_join(&w), 0);
    assert_int_equal(w.rc, DLOCK_OK);
    tw = dlock_lock_token(w.l);
    assert_true(tw > ta || ta == 0);
    assert_int_equal(hfield("dlock:{fr-hand}", "#t"), tw);
    assert_int_equal(hfield("dlock:{fr-hand}:f", "n"), tw);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-hand}"), 0);
    assert_int_equal(exists("dlock:{fr-hand}:q"), 0);
    assert_int_equal(exists("dlock:{fr-hand}:qt"), 0);
    assert_int_equal(hfield("dlock:{fr-hand}:f", "n"), tw);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{fr-hand}:f") > 7 * DAY_MS);
    assert_int_equal(dlock_lock_acquire(&la, ca, "fr-hand", 0, 10000),
                     DLOCK_OK);
    assert_true(dlock_lock_token(la) > tw);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-hand}:f"), 1);
    dlock_client_free(ca);
    dlock_client_free(cb);
}

/* Token order with 0 against the default. With the default a token is
 * above the last one on record, whatever the clock: a fence hash whose n
 * is far above the clock (as a grant under a clock that was ahead would
 * leave) makes the next tokens n + 1, n + 2. With 0 and no fence hash,
 * a token is the server's time in us: above the earlier holds' as long
 * as the clock does not step back (the documented price of 0). A client
 * without retention still reads a token on record, and keeps that fence
 * hash (it may be a hand-over's, which a waiter of an earlier version
 * needs). */
static void test_order_by_clock(void **state)
{
    dlock_client *none = client_keep(0), *dflt = client_keep(7 * DAY_MS);
    dlock_lock *l;
    uint64_t ahead = server_us() + 3600ULL * 1000000, t0, t1, prev = 0;
    int i;
    (void)state;
    assert_int_equal(th_cmd_int(&srv, "HSET dlock:{fr-ord}:f n %llu",
                                (unsigned long long)ahead),
                     1);
    assert_int_equal(dlock_lock_acquire(&l, dflt, "fr-ord", 0, 10000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_token(l), ahead + 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, dflt, "fr-ord", 0, 10000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_token(l), ahead + 2); /* retained */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, none, "fr-ord", 0, 10000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_token(l), ahead + 3); /* read */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-ord}:f"), 1); /* and kept */

    for (i = 0; i < 3; i++) {
        t0 = server_us();
        assert_int_equal(dlock_lock_acquire(&l, none, "fr-ord0", 0, 10000),
                         DLOCK_OK);
        t1 = server_us();
        assert_true(dlock_lock_token(l) >= t0 && dlock_lock_token(l) <= t1);
        assert_true(dlock_lock_token(l) > prev);
        prev = dlock_lock_token(l);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        assert_int_equal(exists("dlock:{fr-ord0}:f"), 0);
    }
    dlock_client_free(none);
    dlock_client_free(dflt);
}

/* A retention other than the default: the fence hash lives at least it
 * and at most twice it after a grant, and survives the release. */
static void test_custom_retention(void **state)
{
    dlock_client *c = client_keep(3600000);
    dlock_lock *l;
    long long pttl;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "fr-hour", 0, 10000), DLOCK_OK);
    pttl = th_cmd_int(&srv, "PTTL dlock:{fr-hour}:f");
    assert_true(pttl > 3600000 && pttl <= 7200000);
    assert_int_equal(hfield("dlock:{fr-hour}:f", "n"), dlock_lock_token(l));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-hour}:f"), 1);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{fr-hour}:f") > 3600000);
    dlock_client_free(c);
}

/* 0 and a read-write lock: a writer downgraded to a reader takes its
 * token's field ('#t') out of the lock hash with its own, so that the
 * name is free once the reader is released (it was held by '#t' alone
 * until the writer's lease ran out). */
static void test_none_downgrade(void **state)
{
    dlock_client *c = client_keep(0);
    dlock_lock *w, *r;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&w, c, "fr-rw", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_rw_downgrade(&r, w), DLOCK_OK);
    assert_int_equal(hfield("dlock:{fr-rw}", "#t"), 0);
    assert_int_equal(dlock_lock_release(r), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-rw}"), 0);
    assert_int_equal(exists("dlock:{fr-rw}:r"), 0);
    assert_int_equal(exists("dlock:{fr-rw}:f"), 0);
    assert_int_equal(dlock_lock_acquire(&w, c, "fr-rw", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    dlock_client_free(c);
}

/* A try (no wait) with a 10 s lease. */
static dlock_acquire_options try_opts(void)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = 0;
    o.lease_ms = 10000;
    return o;
}

/* 0 and a semaphore: once its last permit is released and nobody waits,
 * no key is left (zset, fence hash, queue deadlines); tokens still rise
 * from hold to hold; while a permit is held, releasing another leaves
 * the semaphore. With the default the zset and the fence hash stay. */
static void test_none_semaphore(void **state)
{
    dlock_client *c = client_keep(0), *d = client_keep(7 * DAY_MS);
    dlock_acquire_options o = try_opts();
    dlock_lock *p, *q;
    uint64_t prev = 0;
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(dlock_sem_acquire(&p, c, "fr-sem", 2, &o), DLOCK_OK);
        assert_true(dlock_lock_token(p) > prev);
        prev = dlock_lock_token(p);
        assert_int_equal(dlock_sem_acquire(&q, c, "fr-sem", 2, &o), DLOCK_OK);
        assert_int_equal(dlock_lock_release(q), DLOCK_OK);
        assert_int_equal(exists("dlock:{fr-sem}"), 1);
        assert_int_equal(dlock_lock_release(p), DLOCK_OK);
        assert_int_equal(exists("dlock:{fr-sem}"), 0);
        assert_int_equal(exists("dlock:{fr-sem}:f"), 0);
        assert_int_equal(exists("dlock:{fr-sem}:qt"), 0);
    }
    assert_int_equal(dlock_sem_acquire(&p, d, "fr-sem2", 2, &o), DLOCK_OK);
    assert_int_equal(dlock_lock_release(p), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-sem2}"), 1);
    assert_int_equal(exists("dlock:{fr-sem2}:f"), 1);
    dlock_client_free(c);
    dlock_client_free(d);
}

/* 0 and readers: the last reader out of a name nobody else holds leaves
 * no key (the lock hash, the readers' zset, the fence hash with their
 * tokens); tokens still rise. With the default the readers' zset and
 * the fence hash stay. */
static void test_none_readers(void **state)
{
    dlock_client *c = client_keep(0), *d = client_keep(7 * DAY_MS);
    dlock_acquire_options o = try_opts();
    dlock_lock *r1, *r2;
    uint64_t prev = 0;
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(dlock_rw_acquire_shared(&r1, c, "fr-rd", 0, &o),
                         DLOCK_OK);
        assert_true(dlock_lock_token(r1) > prev);
        prev = dlock_lock_token(r1);
        assert_int_equal(dlock_rw_acquire_shared(&r2, d, "fr-rd", 0, &o),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
        assert_int_equal(exists("dlock:{fr-rd}"), 1);
        assert_int_equal(dlock_lock_release(r2), DLOCK_OK);
        /* The last reader out kept retention (d): the keys stay; the
         * next round's last reader is c's. */
        assert_int_equal(dlock_rw_acquire_shared(&r1, c, "fr-rd", 0, &o),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
        assert_int_equal(exists("dlock:{fr-rd}"), 0);
        assert_int_equal(exists("dlock:{fr-rd}:r"), 0);
        assert_int_equal(exists("dlock:{fr-rd}:f"), 0);
    }
    assert_int_equal(dlock_rw_acquire_shared(&r1, d, "fr-rd2", 0, &o),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-rd2}:r"), 1);
    assert_int_equal(exists("dlock:{fr-rd2}:f"), 1);
    dlock_client_free(c);
    dlock_client_free(d);
}

/* 0 with a queued waiter: the queue is never without the fence hash
 * (its mark 'w'), which tells the release to look at the queue. */
static void test_none_queue_marked(void **state)
{
    dlock_client *ca = client_keep(0), *cb = client_keep(0);
    dlock_lock *la;
    th_waiter w = th_waiter_keeping(cb, "fr-mark");
    (void)state;
    assert_int_equal(dlock_lock_acquire(&la, ca, "fr-mark", 0, 10000),
                     DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-mark}:f"), 0);
    assert_int_equal(th_waiter_start(&w), 0);
    assert_int_equal(th_await_queued(&srv, "fr-mark", 1), 0);
    assert_int_equal(hfield("dlock:{fr-mark}:f", "w"), 1);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{fr-mark}:f") > 0);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    assert_int_equal(th_waiter_join(&w), 0);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-mark}"), 0);
    dlock_client_free(ca);
    dlock_client_free(cb);
}

/* 0 and an election: while it leads, the leader hash (:l) is there; a
 * resignation leaves no key (the lock, the fence hash and the leader
 * hash gone); with the default the leader hash stays. */
static void test_none_election(void **state)
{
    dlock_client *c = client_keep(0), *d = client_keep(7 * DAY_MS);
    dlock_election *e;
    (void)state;
    assert_int_equal(dlock_campaign(&e, c, "fr-el", "v1", NULL), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-el}:l"), 1);
    assert_int_equal(dlock_election_resign(e), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-el}"), 0);
    assert_int_equal(exists("dlock:{fr-el}:f"), 0);
    assert_int_equal(exists("dlock:{fr-el}:l"), 0);
    assert_int_equal(dlock_campaign(&e, d, "fr-el2", "v1", NULL), DLOCK_OK);
    assert_int_equal(dlock_election_resign(e), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-el2}:l"), 1);
    dlock_client_free(c);
    dlock_client_free(d);
}

/* Bad values are refused; a version 1 struct gets the default. */
static void test_options(void **state)
{
    const char *url = th_url(&srv);
    dlock_options o;
    dlock_client *c = NULL;
    dlock_lock *l;
    char err[256];
    (void)state;
    dlock_options_init(&o);
    assert_int_equal(o.fence_retention_ms, 7 * DAY_MS);
    o.servers = &url;
    o.nservers = 1;
    o.tls_ca_file = th_ca_file();
    o.fence_retention_ms = 999;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_EINVAL);
    assert_non_null(strstr(err, "fence_retention_ms"));
    o.fence_retention_ms = -1;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_EINVAL);
    o.fence_retention_ms = 0;
    o.version = 1; /* an older program's struct: the field is not read */
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, c, "fr-v1", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(exists("dlock:{fr-v1}:f"), 1); /* the default kept it */
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_leaves_nothing),
        cmocka_unit_test(test_none_after_handover),
        cmocka_unit_test(test_order_by_clock),
        cmocka_unit_test(test_custom_retention),
        cmocka_unit_test(test_none_downgrade),
        cmocka_unit_test(test_none_semaphore),
        cmocka_unit_test(test_none_readers),
        cmocka_unit_test(test_none_queue_marked),
        cmocka_unit_test(test_none_election),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
