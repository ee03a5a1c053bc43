/*
 * script_cost.c - what the default (fair) path costs Redis, counted: the
 * commands a step runs on the server (INFO commandstats: the EVALSHA and
 * every call inside the script) for an uncontended cycle, a queueing
 * waiter and a release that hands over, each against a budget (issue
 * 18: Redis commands per acquisition). Counts, not times: the numbers do
 * not move with the machine's load. And the fence hash's retention,
 * which grants renew only when less than 7 days are left (acquire.lua,
 * field d): after a renewal it has more than 7 days, and a stale d is
 * renewed by a plain grant and by a hand-over alike.
 */
#include <pthread.h>
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

/* The budgets: Redis commands per step, script internals counted. */
/* A fair try that takes a free lock + release: EXISTS of lock and queue,
 * TIME, HSET, PEXPIRE, the fence hash's HMGET and HSET; HMGET (owner and
 * marks), DEL, the fence's HSET r; the two EVALSHAs. Neither the queue
 * nor a PUBLISH: nobody queued ('#q') or listened ('#l', issue 31). */
#define CYCLE_BUDGET 11
/* The same without fence retention (issue 31): EXISTS of lock, queue and
 * fence hash, TIME, HSET, PEXPIRE; HMGET, DEL of lock and fence hash;
 * and the two EVALSHAs. */
#define CYCLE_BUDGET_NO_RETENTION 8
/* busy try + SUBSCRIBE + queueing attempt; the queueing answer carries
 * the lock's last token granted (one HGET: a waiter tells a lapsed
 * handoff from a live one by it, docs/design.md "Validity of a handed
 * lock"); the first waiter to queue for a hold that was not handed over
 * marks it ('#q', an HSET: its release looks at the queue only then),
 * which the measured waiter is. */
#define JOIN_BUDGET 13
#define HANDOVER_BUDGET 12 /* a release that hands to the next waiter */
/* The string layout (dlock_client_set_layout) without fence retention:
 * a plain SET NX PX (no script: the token is issued lazily); GET and DEL
 * and the release's EVALSHA (issue 31: <= 6; the floor's 3). */
#define CYCLE_BUDGET_STRING 4
/* The same with retention: also the fence hash's HMGET and HSET n, and
 * the release's HSET r. */
#define CYCLE_BUDGET_STRING_RETAINED 9
/* A fair client of the string layout without retention: the fair try
 * adds the EXISTS of the queue (a queue outlives a holder that died). */
#define CYCLE_BUDGET_STRING_FAIR 7
/* Its busy try (EXISTS of the queue, TIME, SET NX, GET, PTTL),
 * SUBSCRIBE and queueing attempt (GET, TIME, the ZADD of its ticket,
 * SET of the mark 'q'; no PTTL, no deadline: s_place.luainc), and the
 * two EVALSHAs (issue 31: 14 before). */
#define JOIN_BUDGET_STRING 12
/* GET, TIME, ZPOPMIN, SET of the new holder, PUBLISH and the EVALSHA
 * (a place with the defaults has no deadline entry to read and remove;
 * 8 before, the hash layout's 12). */
#define HANDOVER_BUDGET_STRING 6

#define RETAIN_MS 604800000LL /* DLOCK__FENCE_RETENTION_MS */

/* INFO commandstats as name -> calls. */
typedef struct stats {
    int n;
    char name[64][32];
    long long calls[64];
} stats;

/* Commands this test itself sends while it measures, not counted: INFO
 * (the snapshots, and every new connection's check) and ZCARD (polls). */
static int ignored(const char *name)
{
    return strcmp(name, "info") == 0 || strcmp(name, "zcard") == 0;
}

static void snap(stats *s)
{
    redisReply *r = th_cmd(&srv, "INFO commandstats");
    const char *p;
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    s->n = 0;
    for (p = r->str; (p = strstr(p, "cmdstat_")) != NULL && s->n < 64;) {
        char name[32];
        long long calls;
        p += 8;
        if (sscanf(p, "%31[^:]:calls=%lld", name, &calls) != 2)
            continue;
        snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
        s->calls[s->n++] = calls;
    }
    freeReplyObject(r);
}

static long long calls_of(const stats *s, const char *name)
{
    int i;
    for (i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0)
            return s->calls[i];
    return 0;
}

/* The commands run between a and b (all but the ignored ones), printed
 * per command under LABEL; *evalsha gets the EVALSHA count. */
static long long delta(const char *label, const stats *a, const stats *b,
                       long long *evalsha)
{
    long long total = 0;
    int i;
    printf("%s:", label);
    for (i = 0; i < b->n; i++) {
        long long d = b->calls[i] - calls_of(a, b->name[i]);
        if (d == 0 || ignored(b->name[i]))
            continue;
        printf(" %s=%lld", b->name[i], d);
        total += d;
    }
    printf(" (total %lld)\n", total);
    *evalsha = calls_of(b, "evalsha") - calls_of(a, "evalsha");
    return total;
}

static dlock_client *client(void)
{
    const char *url = th_url(&srv);
    dlock_client *c = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    assert_non_null(c);
    return c;
}

/* A fair client without fence retention (issue 31). */
static dlock_client *client_none(void)
{
    dlock_client *c = th_client_keep(th_url(&srv), 0);
    assert_non_null(c);
    return c;
}

/* The second of two uncontended cycles of c on NAME (the try that takes
 * the free lock and the release, scripts of them: 2, or 1 for a plain
 * acquire), counted under LABEL against budget; c is freed. */
static void cycle_scripts(dlock_client *c, const char *name, const char *label,
                          long long budget, long long scripts)
{
    dlock_lock *l;
    stats a, b;
    long long n, es;
    assert_int_equal(dlock_lock_acquire(&l, c, name, 1000, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    snap(&a);
    assert_int_equal(dlock_lock_acquire(&l, c, name, 1000, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    snap(&b);
    n = delta(label, &a, &b, &es);
    assert_int_equal(es, scripts);
    assert_true(n <= budget);
    dlock_client_free(c);
}

/* The same with two scripts (acquire and release). */
static void cycle(dlock_client *c, const char *name, const char *label,
                  long long budget)
{
    cycle_scripts(c, name, label, budget, 2);
}

/* An uncontended cycle of the default strategy. The name's first cycle
 * creates its fence hash (and renews its retention); the second is
 * measured. */
static void test_uncontended_cycle(void **state)
{
    (void)state;
    cycle(client(), "sc-free", "uncontended cycle", CYCLE_BUDGET);
}

/* The uncontended cycle of a client without fence retention: nothing
 * is read or written beside the lock hash but the announcement. */
static void test_uncontended_cycle_no_retention(void **state)
{
    (void)state;
    cycle(client_none(), "sc-none", "uncontended cycle, no retention",
          CYCLE_BUDGET_NO_RETENTION);
}

/* A string-layout client (issue 31) without fence retention. */
static dlock_client *client_string(int64_t keep_ms)
{
    dlock_client *c = th_client_string(th_url(&srv), keep_ms);
    assert_non_null(c);
    return c;
}

/* The string layout's uncontended cycle: SET NX PX and GET + DEL. */
static void test_uncontended_cycle_string(void **state)
{
    (void)state;
    cycle_scripts(client_string(0), "sc-str",
                  "uncontended cycle, string layout", CYCLE_BUDGET_STRING, 1);
}

/* A fenced get is one plain HMGET on one server, no script (the gateway's
 * look, issue 30): the same answers as fenced_get.lua gave, a key of
 * another type refused as before. */
static void test_fenced_get_plain(void **state)
{
    dlock_client *c = client();
    char *v = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    stats a, b;
    long long n, es;
    (void)state;
    assert_int_equal(dlock_fenced_set(c, "sc-fg", 7, "seven", 5), DLOCK_OK);
    snap(&a);
    assert_int_equal(dlock_fenced_get(c, "sc-fg", &v, &len, &fence), DLOCK_OK);
    snap(&b);
    n = delta("fenced get", &a, &b, &es);
    assert_string_equal(v, "seven");
    assert_int_equal(len, 5);
    assert_int_equal(fence, 7);
    free(v);
    assert_int_equal(es, 0);
    assert_int_equal(n, 1);
    assert_int_equal(calls_of(&b, "hmget") - calls_of(&a, "hmget"), 1);
    /* None written: no value, fence 0. */
    assert_int_equal(dlock_fenced_get(c, "sc-fg-none", &v, &len, &fence),
                     DLOCK_OK);
    assert_null(v);
    assert_int_equal(len, 0);
    assert_int_equal(fence, 0);
    /* Another type: refused with the server's error. */
    th_cmd_int(&srv, "SET sc-fg-str x");
    assert_int_equal(dlock_fenced_get(c, "sc-fg-str", &v, &len, &fence),
                     DLOCK_ESERVER);
    assert_non_null(strstr(dlock_errmsg(c), "WRONGTYPE"));
    assert_null(v);
    dlock_client_free(c);
}

/* The same with the default fence retention. */
static void test_uncontended_cycle_string_retained(void **state)
{
    (void)state;
    cycle(client_string(RETAIN_MS), "sc-str-keep",
          "uncontended cycle, string layout, retention",
          CYCLE_BUDGET_STRING_RETAINED);
}

/* A fair string-layout client without fence retention. */
static dlock_client *client_string_fair(void)
{
    dlock_client *c = th_client_string_wait(th_url(&srv), 0, DLOCK_WAIT_FAIR);
    assert_non_null(c);
    return c;
}

/* The fair string-layout cycle: EXISTS of the queue, SET NX PX; GET +
 * DEL. */
static void test_uncontended_cycle_string_fair(void **state)
{
    (void)state;
    cycle(client_string_fair(), "sc-str-fair",
          "uncontended cycle, string layout, fair", CYCLE_BUDGET_STRING_FAIR);
}

/* Wait (bounded) until NAME's fair queue holds n waiters. */
static void await_queued(const char *name, long long n)
{
    assert_int_equal(th_await_queued(&srv, name, n), 0);
}

/*
 * Contended: a waiter's way into the queue (the try that finds the lock
 * busy, the subscription, the queueing attempt) and the release that
 * hands the lock to it. A waiter refreshes its place every second and a
 * handed lock is confirmed after one: a step that shows a script more
 * than expected met one of those, and is measured again (at most 5
 * times) rather than counted.
 */
static void contended2(dlock_client *(*make_holder)(void),
                       dlock_client *(*make_waiter)(void), const char *name,
                       long long join_budget, long long hand_budget)
{
    int tries;
    for (tries = 0; tries < 5; tries++) {
        dlock_client *ca = make_holder(), *cb = make_waiter();
        dlock_lock *la;
        th_waiter w = th_waiter_keeping(cb, name);
        stats s0, s1, s2;
        long long join, hand, es_join, es_hand;

        assert_int_equal(dlock_lock_acquire(&la, ca, name, 0, 10000), DLOCK_OK);
        snap(&s0);
        assert_int_equal(th_waiter_start(&w), 0);
        await_queued(name, 1);
        snap(&s1);
        assert_int_equal(dlock_lock_release(la), DLOCK_OK);
        assert_int_equal(th_waiter_join(&w), 0);
        snap(&s2);
        assert_int_equal(w.rc, DLOCK_OK);
        assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
        dlock_client_free(ca);
        dlock_client_free(cb);
        join = delta("busy try, subscribe, queue", &s0, &s1, &es_join);
        hand = delta("release handing over", &s1, &s2, &es_hand);
        if (es_join != 2 || es_hand != 1)
            continue; /* a refresh or a confirm ran meanwhile */
        assert_true(join <= join_budget);
        assert_true(hand <= hand_budget);
        return;
    }
    fail_msg("no undisturbed measurement in 5 tries");
}

static void contended(dlock_client *(*make)(void), const char *name,
                      long long join_budget, long long hand_budget)
{
    contended2(make, make, name, join_budget, hand_budget);
}

static void test_contended(void **state)
{
    (void)state;
    contended(client, "sc-busy", JOIN_BUDGET, HANDOVER_BUDGET);
}

/* The string layout's way into the queue and hand-over (issue 31). */
static void test_contended_string(void **state)
{
    (void)state;
    contended(client_string_fair, "sc-busy-str", JOIN_BUDGET_STRING,
              HANDOVER_BUDGET_STRING);
}

/* Without fence retention: the first time a name is contended its
 * queue's mark ('w': HSETNX and PEXPIRE) and the new fence hash's
 * retention at the hand-over (PEXPIRE) come on top; then, on a name
 * contended before (its fence hash holds the hand-over's token, and
 * stays), the same as with retention. */
static void test_contended_no_retention(void **state)
{
    (void)state;
    contended(client_none, "sc-busy0", JOIN_BUDGET + 2, HANDOVER_BUDGET + 1);
    contended(client_none, "sc-busy0", JOIN_BUDGET, HANDOVER_BUDGET);
}

/* A holder with retention, a waiter without (a deployment switching to
 * 0): the waiter's queueing marks the hold ('#q'), so the holder's
 * release hands it the lock (without the mark it would look at no
 * queue, and the waiter would get the lock by its refresh, which the
 * measurement takes for a disturbance: no hand-over in 5 tries). */
static void test_contended_mixed_retention(void **state)
{
    (void)state;
    contended2(client, client_none, "sc-busymix", JOIN_BUDGET + 2,
               HANDOVER_BUDGET + 1);
}

/* The server's clock in ms. */
static long long server_ms(void)
{
    redisReply *r = th_cmd(&srv, "TIME");
    long long ms;
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* Make NAME's fence hash look renewed 7 days and an hour ago: its TTL an
 * hour short of the retention, and its d (the server second from which a
 * grant renews it) an hour past. */
static void age_fence(const char *name)
{
    long long left = RETAIN_MS - 3600000;
    redisReply *r = th_cmd(&srv, "HSET dlock:{%s}:f d %lld", name,
                           server_ms() / 1000 - 3600);
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&srv, "PEXPIRE dlock:{%s}:f %lld", name, left),
                     1);
}

/* The fence hash's TTL is above the retention, and d is not later than
 * the moment less than the retention is left. */
static void assert_retained(const char *name)
{
    long long pttl = th_cmd_int(&srv, "PTTL dlock:{%s}:f", name);
    long long now = server_ms();
    redisReply *r = th_cmd(&srv, "HGET dlock:{%s}:f d", name);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_true(pttl > RETAIN_MS);
    assert_true(atoll(r->str) * 1000 <= now + pttl - RETAIN_MS + 1000);
    freeReplyObject(r);
}

/* Retention: renewed to twice the retention when less than it is left,
 * by a grant and by a hand-over; a release never shortens it below d. */
static void test_fence_retention(void **state)
{
    dlock_client *ca = client(), *cb = client();
    dlock_lock *la;
    th_waiter w = th_waiter_keeping(cb, "sc-keep");
    (void)state;
    assert_int_equal(dlock_lock_acquire(&la, ca, "sc-keep", 0, 10000),
                     DLOCK_OK);
    assert_retained("sc-keep");
    assert_int_equal(dlock_lock_release(la), DLOCK_OK);
    assert_retained("sc-keep"); /* the first release adds r: TTL kept */

    age_fence("sc-keep");
    assert_int_equal(dlock_lock_acquire(&la, ca, "sc-keep", 0, 10000),
                     DLOCK_OK);
    assert_retained("sc-keep");

    age_fence("sc-keep");
    assert_int_equal(th_waiter_start(&w), 0);
    await_queued("sc-keep", 1);
    assert_int_equal(dlock_lock_release(la), DLOCK_OK); /* hands over */
    assert_int_equal(th_waiter_join(&w), 0);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_retained("sc-keep");
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    dlock_client_free(ca);
    dlock_client_free(cb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uncontended_cycle),
        cmocka_unit_test(test_uncontended_cycle_no_retention),
        cmocka_unit_test(test_uncontended_cycle_string),
        cmocka_unit_test(test_uncontended_cycle_string_retained),
        cmocka_unit_test(test_uncontended_cycle_string_fair),
        cmocka_unit_test(test_contended),
        cmocka_unit_test(test_contended_string),
        cmocka_unit_test(test_contended_no_retention),
        cmocka_unit_test(test_contended_mixed_retention),
        cmocka_unit_test(test_fence_retention),
        cmocka_unit_test(test_fenced_get_plain),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
