/*
 * test_hold.c - the hold tier without servers (src/hold/): every kind's
 * reply classification and refusals as its script answers (kind.h,
 * verdict.h), the kind table's flags, and the wait policy (wait.h): what
 * to do next and until when after each outcome, for every kind and
 * strategy, the outage riding, the lock-delay, the split-vote backoff,
 * the queue's refresh, the handoff's validity.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hold/kind.h"
#include "hold/release.h"
#include "hold/verdict.h"
#include "hold/wait.h"
#include "fake_reply.h"

/* ---- replies built by hand ------------------------------------------------ */

/* {code, "str"}: a refusal naming another kind. */
static redisReply *code_str(fake *f, long long code, char *str)
{
    ints(f, 2, code, 0, 0);
    f->el[1].type = REDIS_REPLY_STRING;
    f->el[1].str = str;
    f->el[1].len = strlen(str);
    return &f->arr;
}

/* ---- classification, per kind --------------------------------------------- */

/* The shapes every kind's script answers (acquire.lua, sem_acquire.lua,
 * rw_acquire.lua): one classification. */
static void test_classify_every_kind(void **state)
{
    fake f;
    int k;
    (void)state;
    for (k = DLOCK__KIND_LOCK; k <= DLOCK__KIND_READ; k++) {
        /* granted: {1, token, depth} (a permit and a reader: depth 1) */
        assert_int_equal(dlock__classify(ints(&f, 3, 1, 77, 1)),
                         DLOCK__R_GRANTED);
        /* busy: {0, pttl}, {0, -2} (waiters ahead), {0, pttl, n} */
        assert_int_equal(dlock__classify(ints(&f, 2, 0, 1500, 0)),
                         DLOCK__R_BUSY);
        assert_int_equal(dlock__classify(ints(&f, 2, 0, -2, 0)), DLOCK__R_BUSY);
        assert_int_equal(dlock__classify(ints(&f, 3, 0, 900, 41)),
                         DLOCK__R_BUSY);
        /* a grant of the wrong size, an unknown code: malformed */
        assert_int_equal(dlock__classify(ints(&f, 2, 1, 77, 0)), DLOCK_EPROTO);
        assert_int_equal(dlock__classify(ints(&f, 2, 5, 0, 0)), DLOCK_EPROTO);
        assert_int_equal(dlock__classify(NULL), DLOCK_EPROTO);
        assert_non_null(dlock__kind_of(k)->acquire_cmd);
        assert_non_null(dlock__kind_of(k)->release_cmd);
        assert_int_equal(dlock__kind_of(k)->id, k);
    }
    /* A reentry whose earlier level expired (locks only answer it). */
    assert_int_equal(dlock__classify(ints(&f, 2, -1, 0, 0)), DLOCK__R_GONE);
}

/* Refusals: {-2, limit} (a permit: another limit), {-3, kind} (the name
 * is another kind); not a refusal otherwise, and never classified as a
 * grant or busy. */
static void test_refusals(void **state)
{
    fake f;
    long long limit = 0;
    const char *other = NULL;
    char lock[] = "lock";
    (void)state;
    assert_int_equal(dlock__refused(ints(&f, 2, -2, 3, 0), &limit, &other),
                     DLOCK__REFUSED_LIMIT);
    assert_int_equal(limit, 3);
    assert_int_equal(dlock__classify(ints(&f, 2, -2, 3, 0)), DLOCK_EPROTO);
    assert_int_equal(dlock__refused(code_str(&f, -3, lock), &limit, &other),
                     DLOCK__REFUSED_KIND);
    assert_string_equal(other, "lock");
    assert_int_equal(dlock__refused(ints(&f, 2, 0, -2, 0), &limit, &other), 0);
    assert_int_equal(dlock__refused(ints(&f, 3, 1, 5, 1), &limit, &other), 0);
    assert_int_equal(dlock__refused(NULL, &limit, &other), 0);
}

/* The table: what differs between the kinds, and only that. */
static void test_kind_table(void **state)
{
    const dlock__kind *l = dlock__kind_of(DLOCK__KIND_LOCK);
    const dlock__kind *p = dlock__kind_of(DLOCK__KIND_PERMIT);
    const dlock__kind *r = dlock__kind_of(DLOCK__KIND_READ);
    (void)state;
    assert_true(l->reentrant && l->redlock_ok && l->queue == DLOCK__Q_FAIR);
    assert_true(!p->reentrant && !p->redlock_ok && p->queue == DLOCK__Q_ALL);
    assert_true(!r->reentrant && r->redlock_ok && r->queue == DLOCK__Q_NONE);
    assert_true(p->fresh_token_on_confirm && !l->fresh_token_on_confirm);
    assert_non_null(l->leave);
    assert_non_null(p->leave);
    assert_null(r->leave);
}

/* ---- the wait's strategy per kind ----------------------------------------- */

static void test_strategy_per_kind(void **state)
{
    const dlock__kind *l = dlock__kind_of(DLOCK__KIND_LOCK);
    const dlock__kind *p = dlock__kind_of(DLOCK__KIND_PERMIT);
    const dlock__kind *r = dlock__kind_of(DLOCK__KIND_READ);
    int q;
    (void)state;
    /* A lock queues under FAIR only. */
    assert_int_equal(dlock__wait_strategy(l, DLOCK_WAIT_FAIR, &q),
                     DLOCK_WAIT_FAIR);
    assert_true(q);
    assert_int_equal(dlock__wait_strategy(l, DLOCK_WAIT_NOTIFY, &q),
                     DLOCK_WAIT_NOTIFY);
    assert_false(q);
    /* A permit queues under NOTIFY and FAIR. */
    dlock__wait_strategy(p, DLOCK_WAIT_NOTIFY, &q);
    assert_true(q);
    dlock__wait_strategy(p, DLOCK_WAIT_SPIN, &q);
    assert_false(q);
    /* A reader has no queue: FAIR waits by notification. */
    assert_int_equal(dlock__wait_strategy(r, DLOCK_WAIT_FAIR, &q),
                     DLOCK_WAIT_NOTIFY);
    assert_false(q);
}

/* The asks of a wait, one rule for every driver: the first try, then
 * FIFO (queued, fair), QUEUE (queued) or WAIT; a permit under spin is
 * not queued, so it asks WAIT. */
static void test_wait_ask(void **state)
{
    static const struct {
        int kind, s, first, ask;
    } t[] = {
        {DLOCK__KIND_LOCK, DLOCK_WAIT_FAIR, 1, DLOCK__ASK_TRY_FAIR},
        {DLOCK__KIND_LOCK, DLOCK_WAIT_FAIR, 0, DLOCK__ASK_FIFO},
        {DLOCK__KIND_LOCK, DLOCK_WAIT_NOTIFY, 1, DLOCK__ASK_TRY},
        {DLOCK__KIND_LOCK, DLOCK_WAIT_NOTIFY, 0, DLOCK__ASK_WAIT},
        {DLOCK__KIND_LOCK, DLOCK_WAIT_SPIN, 0, DLOCK__ASK_WAIT},
        {DLOCK__KIND_PERMIT, DLOCK_WAIT_FAIR, 1, DLOCK__ASK_TRY_FAIR},
        {DLOCK__KIND_PERMIT, DLOCK_WAIT_FAIR, 0, DLOCK__ASK_FIFO},
        {DLOCK__KIND_PERMIT, DLOCK_WAIT_NOTIFY, 0, DLOCK__ASK_QUEUE},
        {DLOCK__KIND_PERMIT, DLOCK_WAIT_SPIN, 0, DLOCK__ASK_WAIT},
        {DLOCK__KIND_READ, DLOCK_WAIT_FAIR, 1, DLOCK__ASK_TRY},
        {DLOCK__KIND_READ, DLOCK_WAIT_FAIR, 0, DLOCK__ASK_WAIT},
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof t / sizeof t[0]; i++) {
        int q, s = dlock__wait_strategy(dlock__kind_of(t[i].kind), t[i].s, &q);
        assert_int_equal(dlock__wait_ask(t[i].first, s, q), t[i].ask);
    }
}

/* Without a subscription: a fair lock's waiter stays queued (polling);
 * a permit's, a reader's and a notify waiter spin. */
static void test_unsubscribed(void **state)
{
    dlock__wait x;
    int k;
    (void)state;
    for (k = DLOCK__KIND_LOCK; k <= DLOCK__KIND_READ; k++) {
        const dlock__kind *kd = dlock__kind_of(k);
        memset(&x, 0, sizeof x);
        x.strategy = dlock__wait_strategy(kd, DLOCK_WAIT_FAIR, &x.queued);
        x.subscribed = 1;
        dlock__wait_unsubscribed(&x, kd);
        assert_false(x.subscribed);
        if (k == DLOCK__KIND_LOCK) {
            assert_true(x.queued);
            assert_int_equal(x.strategy, DLOCK_WAIT_FAIR);
        } else {
            assert_false(x.queued);
            assert_int_equal(x.strategy, DLOCK_WAIT_SPIN);
        }
    }
}

/* ---- the policy ------------------------------------------------------------- */

/* A wait state for kind k under strategy s, subscribed, deadline dl. */
static dlock__wait state_of(int k, int s, int64_t dl)
{
    dlock__wait x;
    memset(&x, 0, sizeof x);
    x.strategy = dlock__wait_strategy(dlock__kind_of(k), s, &x.queued);
    x.subscribed = 1;
    x.deadline = dl;
    x.spin_min_ms = 8;
    x.spin_max_ms = 128;
    x.pttl = -1;
    return x;
}

static dlock__got busy(int64_t pttl)
{
    dlock__got g;
    memset(&g, 0, sizeof g);
    g.pttl = pttl;
    return g;
}

/* Every kind: an error ends the wait; the lock-delay is slept out;
 * after a sleep, try again before the deadline, time out at it. */
static void test_policy_every_kind(void **state)
{
    int k, rc;
    (void)state;
    for (k = DLOCK__KIND_LOCK; k <= DLOCK__KIND_READ; k++) {
        dlock__wait x = state_of(k, DLOCK_WAIT_FAIR, 5000);
        dlock__got g = busy(700);
        int64_t until = 0;
        rc = 0;
        assert_int_equal(dlock__wait_next(&x, DLOCK_OK, &g, 1000, &until, &rc),
                         DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_OK);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK_EINVAL, &g, 1000, &until, &rc),
            DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_EINVAL);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK_LOCK_DELAY, &g, 1000, &until, &rc),
            DLOCK__W_SLEEP);
        assert_int_equal(until, 1700);
        g.pttl = 10000; /* a delay past the deadline: sleep to it */
        dlock__wait_next(&x, DLOCK_LOCK_DELAY, &g, 1000, &until, &rc);
        assert_int_equal(until, 5000);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK__SLEPT, &g, 4999, &until, &rc),
            DLOCK__W_TRY);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK__SLEPT, &g, 5000, &until, &rc),
            DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_TIMEDOUT);
    }
}

/* Every kind in every topology rides out an outage, with backoff, for up
 * to DLOCK__OUTAGE_RETRY_MS in a row; a timeout in the outage says its
 * cause; a busy answer ends the streak. A server error is an outage when
 * the server is not ready, or on Sentinel (a failover's); with no_ride
 * (DLOCK_ACQUIRE_NO_OUTAGE_WAIT) an outage ends the wait. */
static void test_policy_outage(void **state)
{
    int k, rc = 0;
    (void)state;
    assert_true(dlock__outage_retryable(0, DLOCK_EIO, 0));
    assert_true(dlock__outage_retryable(0, DLOCK_ETIMEDOUT, 0));
    assert_true(dlock__outage_retryable(0, DLOCK_NO_QUORUM, 0));
    assert_true(dlock__outage_retryable(0, DLOCK_ESERVER, 1));
    assert_false(dlock__outage_retryable(0, DLOCK_ESERVER, 0));
    assert_true(dlock__outage_retryable(1, DLOCK_ESERVER, 0));
    assert_false(dlock__outage_retryable(1, DLOCK_BUSY, 0));
    assert_false(dlock__outage_retryable(1, DLOCK_EINVAL, 0));
    assert_true(dlock__outage_retryable(0, DLOCK_NOT_REPLICATED, 0));
    {
        dlock__wait x = state_of(DLOCK__KIND_LOCK, DLOCK_WAIT_NOTIFY, -1);
        dlock__got g = busy(-1);
        int64_t until = 0;
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g, 1000, &until, &rc),
                         DLOCK__W_SLEEP);
        g.notready = 1;
        assert_int_equal(
            dlock__wait_next(&x, DLOCK_ESERVER, &g, 1000, &until, &rc),
            DLOCK__W_SLEEP);
        x.no_ride = 1;
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g, 1000, &until, &rc),
                         DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_EIO);
    }
    {
        /* The client's ride (dlock_client_set_outage_ride_ms): 500 ms
         * ends the streak then; -1 rides past the default minute. */
        dlock__wait x = state_of(DLOCK__KIND_LOCK, DLOCK_WAIT_NOTIFY, -1);
        dlock__got g = busy(-1);
        int64_t until = 0;
        x.ride_ms = 500;
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g, 1000, &until, &rc),
                         DLOCK__W_SLEEP);
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g, 1499, &until, &rc),
                         DLOCK__W_SLEEP);
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g, 1500, &until, &rc),
                         DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_EIO);
        x = state_of(DLOCK__KIND_LOCK, DLOCK_WAIT_NOTIFY, -1);
        x.ride_ms = -1;
        dlock__wait_next(&x, DLOCK_EIO, &g, 1000, &until, &rc);
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g,
                                          1000 + 10 * DLOCK__OUTAGE_RETRY_MS,
                                          &until, &rc),
                         DLOCK__W_SLEEP);
    }
    for (k = DLOCK__KIND_LOCK; k <= DLOCK__KIND_READ; k++) {
        dlock__wait x = state_of(k, DLOCK_WAIT_FAIR, -1);
        dlock__got g = busy(-1);
        int64_t until = 0;
        x.sentinel = 1;
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g, 1000, &until, &rc),
                         DLOCK__W_SLEEP);
        assert_true(until > 1000 && until <= 1000 + x.spin_max_ms);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK_ESERVER, &g, 2000, &until, &rc),
            DLOCK__W_SLEEP);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK_BUSY, &g, 3000, &until, &rc),
            DLOCK__W_WAKE);
        assert_int_equal(x.outage_since, 0);
        dlock__wait_next(&x, DLOCK_ETIMEDOUT, &g, 4000, &until, &rc);
        assert_int_equal(dlock__wait_next(&x, DLOCK_EIO, &g,
                                          4000 + DLOCK__OUTAGE_RETRY_MS, &until,
                                          &rc),
                         DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_EIO);
        /* A deadline that passes in an outage returns the outage's error. */
        x = state_of(k, DLOCK_WAIT_FAIR, 1500);
        x.sentinel = 1;
        dlock__wait_next(&x, DLOCK_ETIMEDOUT, &g, 1000, &until, &rc);
        assert_true(until <= 1500);
        assert_int_equal(
            dlock__wait_next(&x, DLOCK__SLEPT, &g, 1500, &until, &rc),
            DLOCK__W_DONE);
        assert_int_equal(rc, DLOCK_ETIMEDOUT);
    }
}

/* Busy, by strategy: spin sleeps a backoff no longer than the lease
 * left; a queued waiter waits for a wake no longer than a third of the
 * waiter TTL; an unqueued one until the lease would have run out; after a
 * split vote, a backoff. */
static void test_policy_busy(void **state)
{
    dlock__wait x;
    dlock__got g;
    int64_t until = 0;
    int rc = 0;
    (void)state;
    x = state_of(DLOCK__KIND_LOCK, DLOCK_WAIT_SPIN, -1);
    g = busy(5);
    assert_int_equal(dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc),
                     DLOCK__W_SLEEP);
    assert_true(until <= 1005);
    x = state_of(DLOCK__KIND_PERMIT, DLOCK_WAIT_NOTIFY, -1);
    g = busy(60000);
    assert_int_equal(dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc),
                     DLOCK__W_WAKE);
    assert_int_equal(until, 1000 + DLOCK__WAITER_TTL_MS / 3);
    g = busy(200);
    dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc);
    assert_int_equal(until, 1200);
    x = state_of(DLOCK__KIND_READ, DLOCK_WAIT_FAIR, -1);
    g = busy(60000);
    assert_int_equal(dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc),
                     DLOCK__W_WAKE);
    assert_int_equal(until, 61000);
    g.split = 1;
    assert_int_equal(dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc),
                     DLOCK__W_SLEEP);
    assert_true(until <= 1000 + x.spin_max_ms);
    /* A fair lock's waiter with another live waiter ahead, or without a
     * subscription: no longer than the backoff. */
    x = state_of(DLOCK__KIND_LOCK, DLOCK_WAIT_FAIR, -1);
    g = busy(-2);
    g.ahead = 1;
    assert_int_equal(dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc),
                     DLOCK__W_WAKE);
    assert_true(until <= 1000 + x.spin_max_ms);
    x.subscribed = 0;
    g.ahead = 0;
    assert_int_equal(dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc),
                     DLOCK__W_SLEEP);
    assert_true(until <= 1000 + x.spin_max_ms);
}

/* The lease the wait aims at is the newest one read (issue 29 item 7): an
 * attempt that finds the holder's lease ending within the millisecond
 * (PTTL 0) tries again at once, whatever an earlier attempt read; the
 * waiter slept out the earlier reading again (a whole lease late) or, in
 * spin mode, its backoff. Every strategy and kind. */
static void test_policy_newest_lease(void **state)
{
    static const int strategies[] = {DLOCK_WAIT_SPIN, DLOCK_WAIT_NOTIFY,
                                     DLOCK_WAIT_FAIR};
    static const int kinds[] = {DLOCK__KIND_LOCK, DLOCK__KIND_PERMIT,
                                DLOCK__KIND_READ};
    size_t s, k;
    (void)state;
    for (s = 0; s < 3; s++)
        for (k = 0; k < 3; k++) {
            dlock__wait x = state_of(kinds[k], strategies[s], -1);
            dlock__got g = busy(450);
            int64_t until = 0;
            int rc = 0;
            dlock__wait_next(&x, DLOCK_BUSY, &g, 1000, &until, &rc);
            assert_true(until <= 1450);
            g = busy(0); /* woken early; now it ends within the ms */
            dlock__wait_next(&x, DLOCK_BUSY, &g, 1300, &until, &rc);
            assert_true(until <= 1301);
            g = busy(-1); /* no lease known: not the old one either */
            dlock__wait_next(&x, DLOCK_BUSY, &g, 1400, &until, &rc);
            assert_true(until != 1400 + 450);
        }
}

/* A handoff's validity: stale when not above the last token the attempt
 * saw, or when too little of the handoff lease is left. */
static void test_handoff_valid(void **state)
{
    (void)state;
    assert_int_equal(dlock__handoff_valid_until(1000, 10, 11, 2000, 10, 1100),
                     2990);
    assert_int_equal(dlock__handoff_valid_until(1000, 10, 10, 2000, 10, 1100),
                     -1);
    assert_int_equal(dlock__handoff_valid_until(1000, 10, 11, 2000, 10, 2600),
                     -1);
}

/* ---- the string layout's fenced value ------------------------------------- */

/* "<fence>" or "<fence> <value>" (s_fenced.luainc): split; anything else
 * (no digits, a leading zero, no space after the digits) refused. */
static void test_fenced_split(void **state)
{
    uint64_t f = 0;
    const char *v = NULL;
    size_t vl = 0;
    (void)state;
    assert_int_equal(dlock__fenced_split("12 a b", 6, &f, &v, &vl), 1);
    assert_int_equal(f, 12);
    assert_int_equal(vl, 3);
    assert_memory_equal(v, "a b", 3);
    assert_int_equal(dlock__fenced_split("7 ", 2, &f, &v, &vl), 1);
    assert_int_equal(f, 7);
    assert_non_null(v); /* an empty value is a value */
    assert_int_equal(vl, 0);
    assert_int_equal(dlock__fenced_split("9", 1, &f, &v, &vl), 1);
    assert_int_equal(f, 9);
    assert_null(v); /* a fence, no value */
    assert_int_equal(dlock__fenced_split("3 \0x", 4, &f, &v, &vl), 1);
    assert_int_equal(vl, 2);
    assert_int_equal(dlock__fenced_split("", 0, &f, &v, &vl), 0);
    assert_int_equal(dlock__fenced_split("x 1", 3, &f, &v, &vl), 0);
    assert_int_equal(dlock__fenced_split("05 x", 4, &f, &v, &vl), 0);
    assert_int_equal(dlock__fenced_split("0", 1, &f, &v, &vl), 0);
    assert_int_equal(dlock__fenced_split("12x", 3, &f, &v, &vl), 0);
    assert_int_equal(
        dlock__fenced_split("99999999999999999999999 x", 25, &f, &v, &vl), 0);
}

/* s_set_release.lua's {stored, t, r}, or (the common case's path) the
 * string "<stored> <t> 1"; -2 another form. */
static void test_set_release_verdict(void **state)
{
    fake f;
    redisReply str;
    long long t = 0;
    (void)state;
    assert_int_equal(dlock__set_release_verdict(ints(&f, 3, 1, 42, 1), &t),
                     DLOCK_OK);
    assert_int_equal(t, 42);
    assert_int_equal(dlock__set_release_verdict(code_str(&f, 0, "77"), &t),
                     DLOCK_EPROTO); /* two elements: not the shape */
    assert_int_equal(dlock__set_release_verdict(ints(&f, 3, -2, 0, 1), &t),
                     DLOCK_EINVAL);
    assert_int_equal(dlock__set_release_verdict(ints(&f, 3, -1, 0, 0), &t),
                     DLOCK_NOT_OWNER);
    memset(&str, 0, sizeof str);
    str.type = REDIS_REPLY_STRING;
    str.str = "1 1700000000000123 1";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_OK);
    assert_int_equal(t, 1700000000000123LL);
    str.str = "0 9000000000000000 1";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_STALE);
    assert_int_equal(t, 9000000000000000LL);
    str.str = "-2 0 1";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_EINVAL);
    str.str = "1 12 1x";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_EPROTO);
    str.str = "1 12";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_EPROTO);
    /* The common case's answer when stored and released: the token. */
    str.str = "1700000000000456";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_OK);
    assert_int_equal(t, 1700000000000456LL);
    str.str = "0123"; /* not canonical */
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_EPROTO);
    str.str = "9999999999999999999"; /* beyond a long long */
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_EPROTO);
    str.str = "12a";
    str.len = strlen(str.str);
    assert_int_equal(dlock__set_release_verdict(&str, &t), DLOCK_EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify_every_kind),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_kind_table),
        cmocka_unit_test(test_strategy_per_kind),
        cmocka_unit_test(test_unsubscribed),
        cmocka_unit_test(test_wait_ask),
        cmocka_unit_test(test_policy_every_kind),
        cmocka_unit_test(test_policy_outage),
        cmocka_unit_test(test_policy_busy),
        cmocka_unit_test(test_policy_newest_lease),
        cmocka_unit_test(test_handoff_valid),
        cmocka_unit_test(test_fenced_split),
        cmocka_unit_test(test_set_release_verdict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
