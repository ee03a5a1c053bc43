/*
 * string_layout.c - exclusive locks in the string layout (issue 31,
 * dlock_client_set_layout): the lock key is a string "<owner> <count>
 * <token>[ l]" whose TTL is the lease. Exclusion, owner-checked release,
 * reentry, tokens, renewal, notify wake-ups, the operator's view (check,
 * inspect), what the layout refuses, and the mix with hash-layout
 * clients on one name: they refuse each other's holds, never both hold.
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
#include "fixture.h"
#include "th_waiter.h"
#include "th_loop.h"

#define RETAIN_MS 604800000LL

static dlock_client *string_client(int64_t keep_ms)
{
    dlock_client *c = th_client_string(th_url(&srv), keep_ms);
    assert_non_null(c);
    return c;
}

/* The Redis type of NAME's lock key. */
static void assert_type(const char *name, const char *type)
{
    redisReply *r = th_cmd(&srv, "TYPE dlock:{%s}", name);
    assert_non_null(r);
    assert_string_equal(r->str, type);
    freeReplyObject(r);
}

/* Acquire, re-enter, release level by level; the key is a string while
 * held and gone after; another client finds it busy meanwhile. */
static void test_cycle_reentry(void **state)
{
    dlock_client *a = string_client(0), *b = string_client(0);
    dlock_lock *l1, *l2, *lb;
    uint64_t t1;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l1, a, "sl-re", 0, 10000), DLOCK_OK);
    assert_type("sl-re", "string");
    t1 = dlock_lock_token(l1);
    assert_true(t1 > 0);
    assert_int_equal(dlock_lock_acquire(&l2, a, "sl-re", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_token(l2), t1);
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-re", 0, 10000), DLOCK_BUSY);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    assert_type("sl-re", "string"); /* one level left */
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-re", 0, 10000), DLOCK_BUSY);
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    assert_type("sl-re", "none");
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{sl-re}:f"), 0);
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-re", 0, 10000), DLOCK_OK);
    assert_true(dlock_lock_token(lb) > t1);
    assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A release after the lease ran out and another owner took the name
 * does not touch the new hold. */
static void test_owner_checked_release(void **state)
{
    dlock_client *a = string_client(0), *b = string_client(0);
    dlock_lock *la, *lb;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&la, a, "sl-own", 0, 10000), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{sl-own}"), 1); /* lapsed */
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-own", 0, 10000), DLOCK_OK);
    assert_int_not_equal(dlock_lock_release(la), DLOCK_OK);
    assert_type("sl-own", "string");
    assert_int_equal(dlock_lock_check(b, "sl-own", dlock_lock_token(lb)),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* With fence retention tokens come from the fence hash, which stays;
 * renewal, check and inspect read the string. */
static void test_retained_extend_inspect(void **state)
{
    dlock_client *a = string_client(RETAIN_MS);
    dlock_lock *l;
    dlock_info info;
    uint64_t t;
    (void)state;
    /* A token on record far above the clock: the next grant is above it. */
    freeReplyObject(th_cmd(&srv, "HSET dlock:{sl-keep}:f n 9000000000000000"));
    assert_int_equal(dlock_lock_acquire(&l, a, "sl-keep", 0, 5000), DLOCK_OK);
    t = dlock_lock_token(l);
    assert_true(t == 9000000000000001ULL);
    assert_int_equal(dlock_lock_extend(l, 60000), DLOCK_OK);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{sl-keep}") > 5000);
    assert_int_equal(dlock_lock_check(a, "sl-keep", t), DLOCK_OK);
    assert_int_equal(dlock_lock_check(a, "sl-keep", t - 1), DLOCK_STALE);
    assert_int_equal(dlock_lock_inspect(a, "sl-keep", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.reentry, 1);
    assert_int_equal(info.last_token, t);
    assert_true(info.ttl_ms > 5000);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{sl-keep}:f"), 1);
    assert_int_equal(dlock_lock_inspect(a, "sl-keep", &info), DLOCK_OK);
    assert_int_equal(info.held, 0);
    dlock_client_free(a);
}

/* A notify waiter is woken by the release of a 60 s hold (the busy try
 * marked it ' l', so the release announced). */
static void test_notify_wakeup(void **state)
{
    dlock_client *a = string_client(0), *b = string_client(0);
    dlock_lock *la;
    th_waiter w = th_waiter_keeping(b, "sl-wake");
    (void)state;
    w.wait_ms = 30000;
    assert_int_equal(dlock_lock_acquire(&la, a, "sl-wake", 0, 60000), DLOCK_OK);
    assert_int_equal(th_waiter_start(&w), 0);
    assert_int_equal(th_wait_busy(b, 2, 10000), 0);
    assert_int_equal(atomic_load(&w.got), 0);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    assert_int_equal(th_waiter_join(&w), 0);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* NAME's lock value, or "" when it has none; into buf. */
static const char *value_of(const char *name, char *buf, size_t n)
{
    redisReply *r = th_cmd(&srv, "GET dlock:{%s}", name);
    assert_non_null(r);
    snprintf(buf, n, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return buf;
}

/* The fresh uncontended acquire is a plain SET NX PX whose value marks
 * the token "not issued yet" (0); the first dlock_lock_token stamps it
 * while the hold is the owner's, and the stamps increase across holders
 * who ask; a fenced write takes it; a hold that is gone gets none. */
static void test_lazy_token(void **state)
{
    dlock_client *a = string_client(0), *b = string_client(0);
    dlock_lock *la, *lb;
    char v[256], want[256];
    uint64_t t1, t2;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&la, a, "sl-lazy", 0, 10000), DLOCK_OK);
    snprintf(want, sizeof want, "%s 1 0", dlock_lock_owner(la));
    assert_string_equal(value_of("sl-lazy", v, sizeof v), want);
    t1 = dlock_lock_token(la);
    assert_true(t1 > 0);
    assert_int_equal(dlock_lock_token(la), t1);
    snprintf(want, sizeof want, "%s 1 %llu", dlock_lock_owner(la),
             (unsigned long long)t1);
    assert_string_equal(value_of("sl-lazy", v, sizeof v), want);
    assert_int_equal(dlock_lock_check(a, "sl-lazy", t1), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(a, "sl-lazy-res", t1, "x", 1), DLOCK_OK);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    /* A holder that never asks leaves no token behind. Meanwhile an
     * earlier hold's token is stale (a later hold exists: its token, when
     * issued, will be above every earlier one), and one not issued yet
     * (from the future) is nobody's. */
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-lazy", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_check(a, "sl-lazy", t1), DLOCK_STALE);
    assert_int_equal(dlock_lock_check(a, "sl-lazy", t1 * 2), DLOCK_NOT_OWNER);
    assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-lazy", 0, 10000), DLOCK_OK);
    t2 = dlock_lock_token(lb);
    assert_true(t2 > t1);
    assert_int_equal(dlock_fenced_set(b, "sl-lazy-res", t2, "y", 1), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(a, "sl-lazy-res", t1, "z", 1),
                     DLOCK_STALE);
    assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
    /* Lost before it asked: the lease ran out and another owner took it. */
    assert_int_equal(dlock_lock_acquire(&la, a, "sl-lazy", 0, 10000), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{sl-lazy}"), 1);
    freeReplyObject(
        th_cmd(&srv, "SET dlock:{sl-lazy} %s PX 10000", "other 1 0"));
    assert_int_equal(dlock_lock_token(la), 0);
    assert_string_equal(value_of("sl-lazy", v, sizeof v), "other 1 0");
    assert_int_not_equal(dlock_lock_release(la), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{sl-lazy}"), 1);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A busy try marks a plain-SET hold for its release's announcement and
 * stamps its token then (the announcement names it: waiters tell
 * releases apart by it); the holder's token is the stamped one. */
static void test_busy_try_stamps(void **state)
{
    dlock_client *a = string_client(0), *b = string_client(0);
    dlock_lock *la, *lb;
    char v[256], want[256];
    (void)state;
    assert_int_equal(dlock_lock_acquire(&la, a, "sl-stamp", 0, 10000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&lb, b, "sl-stamp", 0, 10000),
                     DLOCK_BUSY);
    /* Read before the holder asks (which would stamp it too). */
    value_of("sl-stamp", v, sizeof v);
    assert_true(dlock_lock_token(la) > 0);
    snprintf(want, sizeof want, "%s 1 %llu l", dlock_lock_owner(la),
             (unsigned long long)dlock_lock_token(la));
    assert_string_equal(v, want);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    assert_type("sl-stamp", "none");
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A fair client of the string layout. */
static dlock_client *fair_string_client(int64_t keep_ms)
{
    dlock_client *c =
        th_client_string_wait(th_url(&srv), keep_ms, DLOCK_WAIT_FAIR);
    assert_non_null(c);
    return c;
}

/* Fair waits in the string layout: waiters queue (<key>:q), the release
 * of a 60 s hold hands the lock to the first, which confirms it with its
 * own lease; the next waiter gets it from that one's release; a waiter
 * that gives up leaves the queue; nothing is left at the end. */
static void fair_handoff(int64_t keep_ms, const char *name)
{
    dlock_client *a = fair_string_client(keep_ms);
    dlock_client *b = fair_string_client(keep_ms);
    dlock_client *d = fair_string_client(keep_ms), *e;
    dlock_lock *la, *lx;
    th_waiter w1 = th_waiter_keeping(b, name);
    th_waiter w2 = th_waiter_keeping(d, name);
    uint64_t ta;
    w1.wait_ms = w2.wait_ms = 30000;
    assert_int_equal(dlock_lock_acquire(&la, a, name, 0, 60000), DLOCK_OK);
    ta = dlock_lock_token(la);
    assert_int_equal(th_waiter_start(&w1), 0);
    assert_int_equal(th_await_queued(&srv, name, 1), 0);
    assert_int_equal(th_waiter_start(&w2), 0);
    assert_int_equal(th_await_queued(&srv, name, 2), 0);
    /* A fair try of a third client respects the queue. */
    e = fair_string_client(keep_ms);
    assert_int_equal(dlock_lock_acquire(&lx, e, name, 0, 1000), DLOCK_BUSY);
    dlock_client_free(e);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    /* Handed over by the release itself, not taken by a later poll. */
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{%s}", name), 1);
    assert_int_equal(th_waiter_join(&w1), 0);
    assert_int_equal(w1.rc, DLOCK_OK);
    assert_true(dlock_lock_token(w1.l) > ta);
    assert_int_equal(atomic_load(&w2.got), 0);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{%s}", name) > 0);
    assert_int_equal(dlock_lock_release(w1.l), DLOCK_OK);
    assert_int_equal(th_waiter_join(&w2), 0);
    assert_int_equal(w2.rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(w2.l), DLOCK_OK);
    assert_type(name, "none");
    assert_int_equal(
        th_cmd_int(&srv, "EXISTS dlock:{%s}:q dlock:{%s}:qt", name, name), 0);
    /* A waiter that gives up leaves the queue. */
    assert_int_equal(dlock_lock_acquire(&la, a, name, 0, 60000), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&lx, b, name, 300, 10000),
                     DLOCK_TIMEDOUT);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{%s}:q", name), 0);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    assert_type(name, "none");
    dlock_client_free(a);
    dlock_client_free(b);
    dlock_client_free(d);
}

static void test_fair_handoff(void **state)
{
    (void)state;
    fair_handoff(0, "sl-fair");
}

static void test_fair_handoff_retained(void **state)
{
    (void)state;
    fair_handoff(RETAIN_MS, "sl-fair-keep");
}

/* A hash-layout client (the default, fair; and a notify one) and a
 * string-layout client on one name: each refuses the other's hold with
 * DLOCK_EINVAL naming the layout; never both hold. */
static void test_mixed_layouts(void **state)
{
    dlock_client *s = string_client(0);
    dlock_client *h = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock_client *hn = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_lock *ls, *lh;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&lh, h, "sl-mix", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&ls, s, "sl-mix", 0, 10000),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(s), "hash layout"));
    assert_int_equal(dlock_lock_acquire(&ls, s, "sl-mix", 1000, 10000),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(lh), DLOCK_OK);

    assert_int_equal(dlock_lock_acquire(&ls, s, "sl-mix", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&lh, h, "sl-mix", 0, 10000),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(h), "string layout"));
    assert_int_equal(dlock_lock_acquire(&lh, h, "sl-mix", 1000, 10000),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_acquire(&lh, hn, "sl-mix", 1000, 10000),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(hn), "string layout"));
    assert_type("sl-mix", "string");
    assert_int_equal(dlock_lock_release(ls), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&lh, hn, "sl-mix", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(lh), DLOCK_OK);
    dlock_client_free(s);
    dlock_client_free(h);
    dlock_client_free(hn);
}

/* What the layout refuses: read locks, elections, an unknown layout. */
static void test_refusals(void **state)
{
    dlock_client *f = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock_client *s = string_client(0);
    dlock_lock *l;
    dlock_election *e;
    (void)state;
    assert_int_equal(dlock_client_set_layout(f, (dlock_layout)7), DLOCK_EINVAL);
    assert_int_equal(dlock_rw_acquire_shared(&l, s, "sl-rw", 0, NULL),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_campaign(&e, s, "sl-el", "v", NULL), DLOCK_EINVAL);
    /* Not once the client holds a lock. */
    assert_int_equal(dlock_lock_acquire(&l, s, "sl-ref", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_client_set_layout(s, DLOCK_LAYOUT_HASH),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_client_set_layout(s, DLOCK_LAYOUT_HASH), DLOCK_OK);
    dlock_client_free(f);
    dlock_client_free(s);
}

/* Make n loops of c in ls; o: a try of the client's strategy with a 60 s
 * lease, w: the same waiting up to wait_ms. Then ls[0] takes NAME with
 * o (checked). */
static void loops_holding(dlock_client *c, dlock_loop **ls, int n,
                          dlock_loop_acquire *o, dlock_loop_acquire *w,
                          int64_t wait_ms, const char *name, th_seen *a)
{
    int i;
    for (i = 0; i < n; i++)
        assert_int_equal(dlock_loop_new(&ls[i], c), DLOCK_OK);
    dlock_loop_acquire_init(o, c);
    o->wait_ms = 0;
    o->lease_ms = 60000;
    *w = *o;
    w->wait_ms = wait_ms;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], name, o, th_note, a),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &a->done), 0);
    assert_int_equal(a->status, DLOCK_OK);
}

/* The event loop takes its commands from the same table: a string hold,
 * another loop's busy try, renewal, a notify waiter woken by the release;
 * a fair acquire and a read lock are refused. */
static void test_loop(void **state)
{
    dlock_client *c = string_client(0);
    dlock_loop *ls[2] = {NULL, NULL};
    dlock_loop_acquire o, w;
    th_seen a = {0}, b = {0}, e = {0}, r = {0}, f = {0};
    (void)state;
    loops_holding(c, ls, 2, &o, &w, 30000, "sl-loop", &a);
    assert_type("sl-loop", "string");
    assert_true(dlock_hold_token(a.hold) > 0);
    assert_int_equal(dlock_loop_extend(NULL, ls[0], a.hold, 90000, th_note, &e),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &e.done), 0);
    assert_int_equal(e.status, DLOCK_OK);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{sl-loop}") > 60000);
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "sl-loop", &w, th_note, &b),
                     DLOCK_OK);
    th_loop_run_for(&ls[1], 1, 100);
    assert_int_equal(b.done, 0);
    assert_int_equal(dlock_loop_release(NULL, ls[0], a.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &b.done), 0);
    assert_int_equal(r.status, DLOCK_OK);
    assert_int_equal(b.status, DLOCK_OK);
    memset(&r, 0, sizeof r);
    assert_int_equal(dlock_loop_release(NULL, ls[1], b.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&ls[1], 1, &r.done), 0);
    assert_int_equal(r.status, DLOCK_OK);
    assert_type("sl-loop", "none");
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "sl-loop", &o, th_note, &f),
        DLOCK_EINVAL);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* Run the n loops ls until NAME's fair queue holds count waiters (checked;
 * after at most 1000 rounds of the loops). */
static void run_until_queued(dlock_loop **ls, int n, const char *name,
                             long long count)
{
    int i;
    for (i = 0;
         i < 1000 && th_cmd_int(&srv, "ZCARD dlock:{%s}:q", name) < count; i++)
        th_loop_run_for(ls, n, 10);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{%s}:q", name), count);
}

/* The loop's fair waits in the string layout: two waiters queue, the
 * release hands the lock to the first (the key is there right after the
 * release), its release to the second; nothing is left. */
static void test_loop_fair(void **state)
{
    dlock_client *c = fair_string_client(0);
    dlock_loop *ls[3] = {NULL, NULL, NULL};
    dlock_loop_acquire o, w;
    th_seen a = {0}, b = {0}, d = {0}, r = {0};
    int i;
    (void)state;
    loops_holding(c, ls, 3, &o, &w, 20000, "sl-lf", &a);
    assert_int_equal(w.strategy, DLOCK_WAIT_FAIR); /* the client's */
    /* b queues first, then d: started together, the one whose
     * subscription is confirmed first would queue first (either). */
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "sl-lf", &w, th_note, &b),
                     DLOCK_OK);
    run_until_queued(ls + 1, 1, "sl-lf", 1);
    assert_int_equal(dlock_loop_lock(NULL, ls[2], "sl-lf", &w, th_note, &d),
                     DLOCK_OK);
    run_until_queued(ls + 1, 2, "sl-lf", 2);
    assert_int_equal(dlock_loop_release(NULL, ls[0], a.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &r.done), 0);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{sl-lf}"), 1);
    assert_int_equal(th_loop_run(ls, 3, &b.done), 0);
    assert_int_equal(b.status, DLOCK_OK);
    assert_int_equal(d.done, 0);
    memset(&r, 0, sizeof r);
    assert_int_equal(dlock_loop_release(NULL, ls[1], b.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 3, &d.done), 0);
    assert_int_equal(d.status, DLOCK_OK);
    memset(&r, 0, sizeof r);
    assert_int_equal(dlock_loop_release(NULL, ls[2], d.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&ls[2], 1, &r.done), 0);
    assert_type("sl-lf", "none");
    for (i = 0; i < 3; i++)
        dlock_loop_free(ls[i]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cycle_reentry),
        cmocka_unit_test(test_owner_checked_release),
        cmocka_unit_test(test_retained_extend_inspect),
        cmocka_unit_test(test_notify_wakeup),
        cmocka_unit_test(test_lazy_token),
        cmocka_unit_test(test_busy_try_stamps),
        cmocka_unit_test(test_fair_handoff),
        cmocka_unit_test(test_fair_handoff_retained),
        cmocka_unit_test(test_mixed_layouts),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_loop_fair),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
