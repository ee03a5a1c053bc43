/*
 * loop_lock.c - the event-loop API (include/dlock_loop.h, issue 30)
 * against a real redis-server: acquire / extend / release, a loop hold
 * never re-entered (BUSY), 1,000 acquires in flight on one loop over at
 * most two connections, a waiter woken by a release (notify), a fair
 * handoff reaching the op it names, a cancel mid-wait giving its queue
 * place back, renewal on the loop's clock and a stalled loop's loss
 * reported, fenced set / get, and the fenced read that shuts out a
 * holder paused past its lease.
 */
#include <poll.h>
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
#include "th_loop.h"

typedef th_seen seen;
#define note th_note

static void run(dlock_loop **ls, int n, const int *flag)
{
    assert_int_equal(th_loop_run(ls, n, flag), 0);
}

static void run1(dlock_loop *l, const int *flag)
{
    run(&l, 1, flag);
}

static void run_for(dlock_loop *l, int64_t ms)
{
    th_loop_run_for(&l, 1, ms);
}

/* Run l until *count reaches target (a bound of 30 s catches a hang). */
static void run_count(dlock_loop *l, const int *count, int target)
{
    int64_t end = th_now_ms() + 30000;
    while (*count < target) {
        assert_true(th_now_ms() < end);
        run_for(l, 10);
    }
}

static dlock_loop *new_loop(dlock_client *c)
{
    dlock_loop *l = NULL;
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    return l;
}

static dlock_loop_acquire opts(dlock_client *c, int64_t wait_ms, int strategy)
{
    dlock_loop_acquire o;
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = wait_ms;
    o.strategy = strategy;
    return o;
}

static void release(dlock_loop *l, dlock_hold *h)
{
    seen s = {0};
    assert_int_equal(dlock_loop_release(NULL, l, h, note, &s), DLOCK_OK);
    run1(l, &s.done);
    assert_int_equal(s.status, DLOCK_OK);
}

static void test_acquire_extend_release(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    seen a = {0}, b = {0}, x = {0}, e = {0};
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, l, "ll:a", &o, note, &a), DLOCK_OK);
    assert_int_equal(a.done, 0); /* never from inside the call */
    run1(l, &a.done);
    assert_int_equal(a.status, DLOCK_OK);
    assert_non_null(a.hold);
    assert_true(dlock_hold_token(a.hold) > 0);
    assert_true(dlock_hold_validity_ms(a.hold) > 0);
    assert_string_equal(dlock_hold_name(a.hold), "ll:a");
    /* The same loop again: refused, never re-entered. */
    assert_int_equal(dlock_loop_lock(NULL, l, "ll:a", &o, note, &b), DLOCK_OK);
    run1(l, &b.done);
    assert_int_equal(b.status, DLOCK_BUSY);
    assert_null(b.hold);
    assert_non_null(strstr(b.err, "never re-entered"));
    /* Another loop of the same client: another owner, BUSY. */
    assert_int_equal(dlock_loop_lock(NULL, l2, "ll:a", &o, note, &x), DLOCK_OK);
    run1(l2, &x.done);
    assert_int_equal(x.status, DLOCK_BUSY);
    assert_int_equal(dlock_loop_extend(NULL, l, a.hold, 60000, note, &e),
                     DLOCK_OK);
    run1(l, &e.done);
    assert_int_equal(e.status, DLOCK_OK);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{ll:a}") > 30000);
    release(l, a.hold);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{ll:a}"), 0);
    memset(&x, 0, sizeof x);
    assert_int_equal(dlock_loop_lock(NULL, l2, "ll:a", &o, note, &x), DLOCK_OK);
    run1(l2, &x.done);
    assert_int_equal(x.status, DLOCK_OK);
    release(l2, x.hold);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* Bad arguments: a clear code and message, nothing started. */
static void test_bad_args(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    seen a = {0};
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, l, "", NULL, note, &a),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "name"));
    assert_int_equal(dlock_loop_lock(NULL, l, "x", NULL, NULL, &a),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_loop_release(NULL, l, NULL, note, &a), DLOCK_EINVAL);
    assert_int_equal(dlock_loop_new(NULL, c), DLOCK_EINVAL);
    assert_int_equal(a.done, 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

#define MANY 1000

typedef struct many {
    int done, ok;
    dlock_hold *h[MANY];
} many;

static void many_cb(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    many *m = ud;
    (void)op;
    if (status == DLOCK_OK)
        m->h[m->ok++] = hold;
    m->done++;
}

static int many_done;

static void many_rel(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    (void)op;
    (void)hold;
    (void)ud;
    if (status == DLOCK_OK)
        many_done++;
}

static void test_thousand_in_flight(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    long long before = th_cmd_int(&srv, "CLIENT ID");
    many *m = calloc(1, sizeof *m);
    char name[32];
    int i;
    redisReply *r;
    (void)state;
    for (i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "ll:m:%d", i);
        assert_int_equal(dlock_loop_lock(NULL, l, name, &o, many_cb, m),
                         DLOCK_OK);
    }
    run_count(l, &m->done, MANY);
    assert_int_equal(m->ok, MANY);
    /* The connections this loop opened: at most two. */
    r = th_cmd(&srv, "CLIENT LIST");
    assert_non_null(r);
    {
        int conns = 0;
        const char *p = r->str;
        while ((p = strstr(p, "id=")) != NULL) {
            if (atoll(p + 3) > before && atoll(p + 3) < before + 1000000)
                conns++;
            p += 3;
        }
        /* th_cmd's own connection is one of them. */
        assert_true(conns - 1 <= 2);
    }
    freeReplyObject(r);
    many_done = 0;
    for (i = 0; i < MANY; i++)
        assert_int_equal(dlock_loop_release(NULL, l, m->h[i], many_rel, NULL),
                         DLOCK_OK);
    run_count(l, &many_done, MANY);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{ll:m:7}"), 0);
    free(m);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The calls of INFO commandstats' cmdstat_eval (0: none yet). */
static long long eval_calls(void)
{
    redisReply *r = th_cmd(&srv, "INFO commandstats");
    const char *p = strstr(r->str, "cmdstat_eval:calls=");
    long long n = p != NULL ? atoll(p + strlen("cmdstat_eval:calls=")) : 0;
    freeReplyObject(r);
    return n;
}

/* The script cache flushed under a warm connection: requests in flight
 * answered NOSCRIPT are sent again (by SHA behind the source the first
 * one sends; with the source when the cache was flushed after that
 * source), and all complete. Twice on one connection: the second flush
 * found a source written before it on the connection and sent each
 * request again by SHA, then each with its source (50 EVALs where one
 * does: io/pipe.c's dlock__pipe_noscript). */
static void test_script_flush(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    many *m = calloc(1, sizeof *m);
    char name[32];
    long long evals;
    int round, i;
    redisReply *r;
    (void)state;
    for (round = 0; round < 2; round++) {
        memset(m, 0, sizeof *m);
        r = th_cmd(&srv, "SCRIPT FLUSH");
        freeReplyObject(r);
        evals = eval_calls();
        for (i = 0; i < 50; i++) {
            snprintf(name, sizeof name, "ll:sf:%d", i);
            assert_int_equal(dlock_loop_lock(NULL, l, name, &o, many_cb, m),
                             DLOCK_OK);
        }
        run_count(l, &m->done, 50);
        assert_int_equal(m->ok, 50);
        evals = eval_calls() - evals;
        fprintf(stderr, "round %d: %lld EVAL for 50 locks\n", round, evals);
        assert_true(evals <= 2);
        many_done = 0;
        for (i = 0; i < 50; i++)
            assert_int_equal(
                dlock_loop_release(NULL, l, m->h[i], many_rel, NULL), DLOCK_OK);
        run_count(l, &many_done, 50);
    }
    free(m);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A waiter (notify) is woken by the release: the holder's lease is 60 s,
 * the wait (1.5 s) ends long before it could expire. Twice: the second
 * wait reopens the subscriber the first one closed, at once (it once
 * waited out the connect timeout, 2 s, and timed out). */
static void test_notify_wakeup(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *ls[2] = {new_loop(c), new_loop(c)};
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_NOTIFY);
    dlock_loop_acquire w = opts(c, 1500, DLOCK_WAIT_NOTIFY);
    int round;
    (void)state;
    o.lease_ms = 60000;
    for (round = 0; round < 2; round++) {
        seen a = {0}, b = {0};
        assert_int_equal(dlock_loop_lock(NULL, ls[0], "ll:n", &o, note, &a),
                         DLOCK_OK);
        run1(ls[0], &a.done);
        assert_int_equal(a.status, DLOCK_OK);
        assert_int_equal(dlock_loop_lock(NULL, ls[1], "ll:n", &w, note, &b),
                         DLOCK_OK);
        run_for(ls[1], 100);
        assert_int_equal(b.done, 0);
        release(ls[0], a.hold);
        run(ls, 2, &b.done);
        assert_int_equal(b.status, DLOCK_OK);
        release(ls[1], b.hold);
        run_for(ls[1], 50); /* nothing waits: the subscriber closes */
    }
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* Fair: two waiters queue; the release hands the lock to the first, and
 * its release to the second. */
static void test_fair_handoff(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *ls[3] = {new_loop(c), new_loop(c), new_loop(c)};
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    dlock_loop_acquire w = opts(c, 20000, DLOCK_WAIT_FAIR);
    seen a = {0}, b = {0}, d = {0};
    (void)state;
    o.lease_ms = 60000;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "ll:f", &o, note, &a),
                     DLOCK_OK);
    run1(ls[0], &a.done);
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "ll:f", &w, note, &b),
                     DLOCK_OK);
    run_for(ls[1], 200);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{ll:f}:q"), 1);
    assert_int_equal(dlock_loop_lock(NULL, ls[2], "ll:f", &w, note, &d),
                     DLOCK_OK);
    run_for(ls[2], 200);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{ll:f}:q"), 2);
    release(ls[0], a.hold);
    run(ls, 3, &b.done);
    assert_int_equal(b.status, DLOCK_OK);
    assert_int_equal(d.done, 0);
    release(ls[1], b.hold);
    run(ls, 3, &d.done);
    assert_int_equal(d.status, DLOCK_OK);
    release(ls[2], d.hold);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[2]);
    dlock_client_free(c);
}

/* Cancel mid-wait: the callback runs at once with DLOCK_CANCELED, the
 * queue place is given back, and the holder's release frees the lock
 * (nobody left to hand it to). */
static void test_cancel_wait(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *ls[2] = {new_loop(c), new_loop(c)};
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    dlock_loop_acquire w = opts(c, -1, DLOCK_WAIT_FAIR);
    seen a = {0}, b = {0};
    dlock_op *op = NULL;
    (void)state;
    o.lease_ms = 60000;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "ll:c", &o, note, &a),
                     DLOCK_OK);
    run1(ls[0], &a.done);
    assert_int_equal(dlock_loop_lock(&op, ls[1], "ll:c", &w, note, &b),
                     DLOCK_OK);
    run_for(ls[1], 200);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{ll:c}:q"), 1);
    dlock_op_cancel(op);
    assert_int_equal(b.done, 1);
    assert_int_equal(b.status, DLOCK_CANCELED);
    run_for(ls[1], 200);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{ll:c}:q"), 0);
    release(ls[0], a.hold);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{ll:c}"), 0);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* Cancel while the acquire is on the wire: the grant its answer brings
 * is given back (the name is free afterwards), and freeing a loop with a
 * fair waiter gives its queue place back. */
static void test_cancel_in_flight(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *ls[2] = {new_loop(c), new_loop(c)};
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    dlock_loop_acquire w = opts(c, -1, DLOCK_WAIT_FAIR);
    seen a = {0}, b = {0}, x = {0};
    dlock_op *op = NULL;
    (void)state;
    o.lease_ms = 60000;
    assert_int_equal(dlock_loop_lock(&op, ls[0], "ll:cf", &o, note, &a),
                     DLOCK_OK);
    dlock_loop_process(ls[0]); /* the request goes out */
    dlock_op_cancel(op);
    assert_int_equal(a.status, DLOCK_CANCELED);
    run_for(ls[0], 200);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{ll:cf}"), 0);
    /* Take it, queue a waiter on another loop, free that loop. */
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "ll:cf", &o, note, &x),
                     DLOCK_OK);
    run1(ls[0], &x.done);
    assert_int_equal(x.status, DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "ll:cf", &w, note, &b),
                     DLOCK_OK);
    run_for(ls[1], 200);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{ll:cf}:q"), 1);
    dlock_loop_free(ls[1]);
    assert_int_equal(b.status, DLOCK_CANCELED);
    th_sleep_ms(100);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{ll:cf}:q"), 0);
    release(ls[0], x.hold);
    dlock_loop_free(ls[0]);
    dlock_client_free(c);
}

typedef struct lostnote {
    int n, status;
} lostnote;

static void on_lost(dlock_hold *h, int status, void *ud)
{
    lostnote *ln = ud;
    (void)h;
    ln->n++;
    ln->status = status;
}

/* Renewed on the loop's clock: a 300 ms lease outlives 1.2 s of running;
 * then the loop stalls past the lease: the loss is reported. */
static void test_renew_and_stall(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    seen a = {0}, r = {0};
    lostnote ln = {0, 0};
    (void)state;
    o.lease_ms = 300;
    o.on_lost = on_lost;
    o.on_lost_userdata = &ln;
    assert_int_equal(dlock_loop_lock(NULL, l, "ll:r", &o, note, &a), DLOCK_OK);
    run1(l, &a.done);
    assert_int_equal(a.status, DLOCK_OK);
    run_for(l, 1200);
    assert_int_equal(ln.n, 0);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{ll:r}"), 1);
    th_sleep_ms(700); /* the loop does not run: the lease runs out */
    dlock_loop_process(l);
    assert_int_equal(ln.n, 1);
    assert_int_equal(ln.status, DLOCK_LOST);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_LOST);
    assert_int_equal(dlock_loop_release(NULL, l, a.hold, note, &r), DLOCK_OK);
    run1(l, &r.done);
    assert_int_equal(r.status, DLOCK_LOST);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* An extend and the loop's renewal of one hold never overlap on the
 * server with the client believing the longer lease: the server is paused
 * (CLIENT PAUSE) while an extend to 60 s is out, so that the hold's next
 * renewal (a 1.5 s lease, due 500 ms after the grant) would be queued
 * behind it and run last. Once both are answered, the validity the loop
 * believes is never longer than what the server's key has left. (The
 * lease leaves the key 700 ms beyond the pause: with 900 ms, a loaded
 * machine's delay before the pause let the key expire in it.) */
static void test_extend_beside_renewal(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    seen a = {0}, e = {0}, r = {0};
    int64_t pttl, valid;
    (void)state;
    o.lease_ms = 1500;
    assert_int_equal(dlock_loop_lock(NULL, l, "ll:xr", &o, note, &a), DLOCK_OK);
    run1(l, &a.done);
    assert_int_equal(a.status, DLOCK_OK);
    freeReplyObject(th_cmd(&srv, "CLIENT PAUSE 800 ALL"));
    assert_int_equal(dlock_loop_extend(NULL, l, a.hold, 60000, note, &e),
                     DLOCK_OK);
    run1(l, &e.done);
    assert_int_equal(e.status, DLOCK_OK);
    run_for(l, 100); /* a renewal sent during the pause is answered */
    pttl = th_cmd_int(&srv, "PTTL dlock:{ll:xr}");
    valid = dlock_hold_validity_ms(a.hold);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    if (valid > pttl + 50)
        fail_msg("the loop believes %lld ms, the key has %lld ms left",
                 (long long)valid, (long long)pttl);
    assert_int_equal(dlock_loop_release(NULL, l, a.hold, note, &r), DLOCK_OK);
    run1(l, &r.done);
    dlock_loop_free(l);
    dlock_client_free(c);
}

#define NRENEW 450 /* more than one renewal batch (200) of each */

/* The holds' clock over many holds (the heap, lheap.c): NRENEW holds with
 * 900 ms leases renewed through 1.5 s of running (batches of 200); a
 * third released meanwhile, one taken away on the server (its renewal
 * reports the loss, once); the rest still held, none reported lost. */
static void test_renew_many(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    static seen a[NRENEW], r[NRENEW];
    static lostnote ln[NRENEW];
    char name[32];
    int i, held = 0;
    (void)state;
    memset(a, 0, sizeof a);
    memset(r, 0, sizeof r);
    memset(ln, 0, sizeof ln);
    o.lease_ms = 900;
    o.on_lost = on_lost;
    for (i = 0; i < NRENEW; i++) {
        snprintf(name, sizeof name, "ll:m%d", i);
        o.on_lost_userdata = &ln[i];
        assert_int_equal(dlock_loop_lock(NULL, l, name, &o, note, &a[i]),
                         DLOCK_OK);
    }
    run1(l, &a[NRENEW - 1].done);
    for (i = 0; i < NRENEW; i++)
        assert_int_equal(a[i].status, DLOCK_OK);
    run_for(l, 500);
    for (i = 0; i < NRENEW; i += 3)
        assert_int_equal(dlock_loop_release(NULL, l, a[i].hold, note, &r[i]),
                         DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{ll:m1}"), 1);
    run_for(l, 1000);
    for (i = 0; i < NRENEW; i++) {
        snprintf(name, sizeof name, "dlock:{ll:m%d}", i);
        if (i % 3 == 0) {
            assert_int_equal(r[i].status, DLOCK_OK);
            assert_int_equal(ln[i].n, 0);
        } else if (i == 1) {
            assert_int_equal(ln[i].n, 1);
            assert_int_equal(ln[i].status, DLOCK_NOT_OWNER);
            assert_int_equal(dlock_hold_status(a[i].hold), DLOCK_NOT_OWNER);
        } else {
            assert_int_equal(ln[i].n, 0);
            assert_int_equal(dlock_hold_status(a[i].hold), DLOCK_OK);
            assert_true(th_cmd_int(&srv, "PTTL %s", name) > 0);
            held++;
        }
    }
    assert_int_equal(held, NRENEW - NRENEW / 3 - 1);
    for (i = 0; i < NRENEW; i++)
        if (i % 3 != 0) {
            memset(&r[i], 0, sizeof r[i]);
            assert_int_equal(
                dlock_loop_release(NULL, l, a[i].hold, note, &r[i]), DLOCK_OK);
        }
    run1(l, &r[NRENEW - 1].done);
    dlock_loop_free(l);
    dlock_client_free(c);
}

typedef struct gotval {
    int done, status;
    char v[32];
    size_t len;
    uint64_t fence;
    int null;
} gotval;

static void got_cb(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    gotval *g = ud;
    const char *v = dlock_op_value(op, &g->len, &g->fence);
    (void)hold;
    g->done = 1;
    g->status = status;
    g->null = v == NULL;
    if (v != NULL)
        snprintf(g->v, sizeof g->v, "%s", v);
}

static void test_fenced(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    seen s1 = {0}, s2 = {0};
    gotval g = {0}, g2 = {0};
    (void)state;
    assert_int_equal(
        dlock_loop_fenced_set(NULL, l, "ll:res", 10, "ten", 3, note, &s1),
        DLOCK_OK);
    assert_int_equal(
        dlock_loop_fenced_set(NULL, l, "ll:res", 9, "nine", 4, note, &s2),
        DLOCK_OK);
    run1(l, &s2.done);
    assert_int_equal(s1.status, DLOCK_OK);
    assert_int_equal(s2.status, DLOCK_STALE);
    assert_int_equal(dlock_loop_fenced_get(NULL, l, "ll:res", got_cb, &g),
                     DLOCK_OK);
    assert_int_equal(dlock_loop_fenced_get(NULL, l, "ll:none", got_cb, &g2),
                     DLOCK_OK);
    run1(l, &g2.done);
    assert_int_equal(g.status, DLOCK_OK);
    assert_string_equal(g.v, "ten");
    assert_int_equal(g.len, 3);
    assert_int_equal(g.fence, 10);
    assert_int_equal(g2.status, DLOCK_OK);
    assert_true(g2.null);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A fenced set of v (token tok) on l, run to its end: its status. */
static int fset_run(dlock_loop *l, const char *key, uint64_t tok, const char *v)
{
    seen s = {0};
    assert_int_equal(
        dlock_loop_fenced_set(NULL, l, key, tok, v, strlen(v), note, &s),
        DLOCK_OK);
    run1(l, &s.done);
    return s.status;
}

/* A fenced read (tok > 0) or get (tok 0) on l into *g, run to its end. */
static void fread_run(dlock_loop *l, const char *key, uint64_t tok, gotval *g)
{
    memset(g, 0, sizeof *g);
    assert_int_equal(tok > 0
                         ? dlock_loop_fenced_read(NULL, l, key, tok, got_cb, g)
                         : dlock_loop_fenced_get(NULL, l, key, got_cb, g),
                     DLOCK_OK);
    run1(l, &g->done);
}

/* A holder paused past its lease (its lock deleted here, as its expiry
 * would) writes after a newer holder looked: with a plain get the stale
 * write lands; once the newer holder reads with its token (fenced read)
 * the stale write is refused, and a read with the old token too. */
static void test_fenced_read(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_FAIR);
    seen a = {0}, b = {0};
    gotval g;
    uint64_t ta, tb;
    (void)state;
    o.renew = 0;
    assert_int_equal(dlock_loop_lock(NULL, l, "ll:fr", &o, note, &a), DLOCK_OK);
    run1(l, &a.done);
    assert_int_equal(a.status, DLOCK_OK);
    ta = dlock_hold_token(a.hold);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{ll:fr}"), 1);
    assert_int_equal(dlock_loop_lock(NULL, l2, "ll:fr", &o, note, &b),
                     DLOCK_OK);
    run1(l2, &b.done);
    assert_int_equal(b.status, DLOCK_OK);
    tb = dlock_hold_token(b.hold);
    assert_true(tb > ta);
    /* The window: B looks with a plain get, A's stale write lands. */
    fread_run(l2, "ll:frv", 0, &g);
    assert_true(g.null);
    assert_int_equal(fset_run(l, "ll:frv", ta, "a"), DLOCK_OK);
    /* Closed: B reads with its token (sees A's value), A writes again:
     * refused; a read with A's token is refused too. */
    fread_run(l2, "ll:frv", tb, &g);
    assert_int_equal(g.status, DLOCK_OK);
    assert_string_equal(g.v, "a");
    assert_int_equal(g.fence, tb);
    assert_int_equal(fset_run(l, "ll:frv", ta, "a2"), DLOCK_STALE);
    fread_run(l, "ll:frv", ta, &g);
    assert_int_equal(g.status, DLOCK_STALE);
    assert_int_equal(g.fence, tb);
    assert_true(g.null);
    /* B's own write goes through; a read of a key never written raises
     * its fence from nothing: A's first write there is refused. */
    assert_int_equal(fset_run(l2, "ll:frv", tb, "b"), DLOCK_OK);
    fread_run(l2, "ll:frn", tb, &g);
    assert_int_equal(g.status, DLOCK_OK);
    assert_true(g.null);
    assert_int_equal(fset_run(l, "ll:frn", ta, "x"), DLOCK_STALE);
    /* Bad arguments: refused at the call. */
    assert_int_equal(dlock_loop_fenced_read(NULL, l, "ll:frv", 0, got_cb, &g),
                     DLOCK_EINVAL);
    assert_int_equal(
        dlock_loop_fenced_read(NULL, l, "ll:frv", (1ULL << 53) + 1, got_cb, &g),
        DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "token"));
    assert_int_equal(dlock_loop_fenced_read(NULL, l, "", 1, got_cb, &g),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_loop_fenced_read(NULL, l, "ll:frv", 1, NULL, NULL),
                     DLOCK_EINVAL);
    release(l2, b.hold);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* A grant that comes after the lease it was asked with has run out is
 * not a hold: the attempt gives it back and fails DLOCK_NO_QUORUM, as the
 * blocking attempt's verdict says (verdict.h). The server is paused
 * (CLIENT PAUSE 300 WRITE) past a 100 ms lease while the acquire is out;
 * the loop once reported such a grant as held, its validity already
 * gone. */
static void test_grant_too_late(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0);
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = opts(c, 0, DLOCK_WAIT_NOTIFY);
    seen a = {0};
    (void)state;
    o.lease_ms = 100;
    o.renew = 0;
    freeReplyObject(th_cmd(&srv, "CLIENT PAUSE 300 WRITE"));
    assert_int_equal(dlock_loop_lock(NULL, l, "ll:late", &o, note, &a),
                     DLOCK_OK);
    run1(l, &a.done);
    assert_int_equal(a.status, DLOCK_NO_QUORUM);
    assert_non_null(strstr(a.err, "validity used up"));
    run_for(l, 200); /* the give-back is answered (or the key expired) */
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{ll:late}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_extend_release),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_thousand_in_flight),
        cmocka_unit_test(test_script_flush),
        cmocka_unit_test(test_notify_wakeup),
        cmocka_unit_test(test_fair_handoff),
        cmocka_unit_test(test_cancel_wait),
        cmocka_unit_test(test_cancel_in_flight),
        cmocka_unit_test(test_renew_and_stall),
        cmocka_unit_test(test_renew_many),
        cmocka_unit_test(test_extend_beside_renewal),
        cmocka_unit_test(test_fenced),
        cmocka_unit_test(test_fenced_read),
        cmocka_unit_test(test_grant_too_late),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
