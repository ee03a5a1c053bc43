/*
 * loop_engine_cases.h - cases the event-loop API must pass on every
 * topology with one master per name (Sentinel, Cluster: src/loop/
 * multi_node.c), included by loop_sentinel.c and loop_cluster.c, which
 * say where a name's keys live (its master: the test's `node_of`).
 * Counts and orders, never times: a waiter woken by notification makes a
 * handful of tries however long the hold; fair waiters of two clients
 * are granted in the order they queued; election and fenced values go
 * to the name's master through the loop.
 */
#ifndef LOOP_ENGINE_CASES_H
#define LOOP_ENGINE_CASES_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "dlock_loop.h"
#include "harness.h"
#include "th_loop.h"

/* Bounded waits in these cases (liveness, not timing). */
#define EC_LIVE_MS 30000

/* The test's: the server holding KEY now (over Redlock: the first),
 * and a client waiting by strategy. */
static th_server *node_of(const char *key);
static dlock_client *client_s(int strategy);

/* Script calls (EVALSHA and EVAL) s has run so far. */
static long long ec_script_calls(th_server *s)
{
    static const char *const names[2] = {"cmdstat_evalsha:calls=",
                                         "cmdstat_eval:calls="};
    redisReply *r = th_cmd(s, "INFO commandstats");
    long long n = 0;
    int k;
    assert_non_null(r);
    assert_non_null(r->str);
    for (k = 0; k < 2; k++) {
        const char *p = strstr(r->str, names[k]);
        if (p != NULL)
            n += atoll(p + strlen(names[k]));
    }
    freeReplyObject(r);
    return n;
}

typedef struct ec_later {
    dlock_lock *lk;
    int64_t ms;
} ec_later;

static void *ec_release_later(void *arg)
{
    ec_later *x = arg;
    th_sleep_ms(x->ms);
    dlock_lock_release(x->lk);
    return NULL;
}

/* A waiter of c (its strategy) behind hc's hold of NAME, released by
 * another thread 1.5 s later: its tries, counted on the name's master,
 * are a handful (the first, the one once subscribed, the one the wake
 * brings); a spin backoff of 1 to 128 ms makes tens. */
static void ec_wake_case(dlock_client *hc, dlock_client *c, const char *name)
{
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, EC_LIVE_MS, 30000);
    dlock_lock *lk = NULL;
    th_seen w = {0};
    ec_later x;
    pthread_t t;
    char key[128];
    long long before, calls;
    snprintf(key, sizeof key, "dlock:{%s}", name);
    assert_non_null(l);
    assert_int_equal(dlock_lock_acquire(&lk, hc, name, 0, 30000), DLOCK_OK);
    before = ec_script_calls(node_of(key));
    x.lk = lk;
    x.ms = 1500;
    assert_int_equal(pthread_create(&t, NULL, ec_release_later, &x), 0);
    assert_int_equal(dlock_loop_lock(NULL, l, name, &o, th_note, &w), DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &w.done), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.status, DLOCK_OK);
    calls = ec_script_calls(node_of(key)) - before;
    print_message("%s: %lld script calls on its master\n", name, calls);
    assert_true(calls <= 6);
    assert_int_equal(th_loop_release(l, w.hold), DLOCK_OK);
    dlock_loop_free(l);
}

typedef struct ec_order {
    int order[8];
    int n;
} ec_order;

typedef struct ec_waiter {
    ec_order *g;
    int i;
    th_seen s;
} ec_waiter;

static void ec_note_order(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    ec_waiter *f = ud;
    th_note(op, status, hold, &f->s);
    if (status == DLOCK_OK)
        f->g->order[f->g->n++] = f->i;
}

/* Fair FIFO: four loops of two clients (fair) queue one after the other
 * for NAME behind a holder; each is granted in turn, in queue order, by
 * the previous one's release (a handoff on the master). */
static void ec_fifo_case(dlock_client *c0, dlock_client *c1, const char *name)
{
    enum { N = 4 };
    dlock_client *c[2] = {c0, c1};
    dlock_loop *h0 = th_loop_new(c0), *ls[N];
    ec_waiter f[N];
    ec_order g = {{0}, 0};
    dlock_loop_acquire t = th_loop_opts(c0, 0, 120000);
    dlock_hold *h = NULL;
    char q[160];
    int i;
    int64_t end;
    snprintf(q, sizeof q, "dlock:{%s}:q", name);
    assert_int_equal(th_loop_lock(h0, name, &t, &h), DLOCK_OK);
    for (i = 0; i < N; i++) {
        dlock_loop_acquire o = th_loop_opts(c[i % 2], EC_LIVE_MS, 30000);
        o.strategy = DLOCK_WAIT_FAIR;
        ls[i] = th_loop_new(c[i % 2]);
        assert_non_null(ls[i]);
        memset(&f[i], 0, sizeof f[i]);
        f[i].g = &g;
        f[i].i = i;
        assert_int_equal(
            dlock_loop_lock(NULL, ls[i], name, &o, ec_note_order, &f[i]),
            DLOCK_OK);
        end = th_now_ms() + EC_LIVE_MS;
        while (th_cmd_int(node_of(q), "ZCARD %s", q) != i + 1 &&
               th_now_ms() < end)
            th_loop_run_for(ls, i + 1, 20);
        assert_int_equal(th_cmd_int(node_of(q), "ZCARD %s", q), i + 1);
    }
    assert_int_equal(th_loop_release(h0, h), DLOCK_OK);
    for (i = 0; i < N; i++) {
        int k;
        end = th_now_ms() + EC_LIVE_MS;
        while (g.n == i && th_now_ms() < end)
            th_loop_run_for(ls, N, 20);
        assert_int_equal(g.n, i + 1);
        k = g.order[i];
        assert_int_equal(f[k].s.status, DLOCK_OK);
        assert_int_equal(th_loop_release(ls[k], f[k].s.hold), DLOCK_OK);
    }
    for (i = 0; i < N; i++) {
        print_message("%s: granted %d: waiter %d\n", name, i, g.order[i]);
        assert_int_equal(g.order[i], i);
        dlock_loop_free(ls[i]);
    }
    dlock_loop_free(h0);
}

/* Run loops ls[0..n) until s is done (30 s at most). */
static void ec_run(dlock_loop **ls, int n, th_seen *s)
{
    assert_int_equal(th_loop_run(ls, n, &s->done), 0);
}

/* What a leader look or a fenced get said, kept from its callback. */
typedef struct ec_look {
    th_seen s;
    dlock_leader_info li;
    char value[64];
    uint64_t fence;
} ec_look;

static void ec_note_look(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    ec_look *x = ud;
    size_t len = 0;
    const char *v = dlock_op_value(op, &len, &x->fence);
    if (dlock_op_leader(op, &x->li) != DLOCK_OK)
        memset(&x->li, 0, sizeof x->li);
    snprintf(x->value, sizeof x->value, "%.*s", v != NULL ? (int)len : 0,
             v != NULL ? v : "");
    th_note(op, status, hold, &x->s);
}

/* Election and fenced values through the loop on the name's master: a
 * campaign wins and proclaims; a leader look sees it; a leader wait
 * wakes on a new proclamation (a message on the name's channel) and on
 * the next leader's (a second campaign, waiting, wins once the first
 * resigns); the epochs fence writes: the new leader's set stands, the
 * old one's is STALE, a get sees the new value, a read with the old
 * epoch is STALE. */
static void ec_elect_fenced_case(dlock_client *c, const char *name,
                                 const char *fkey)
{
    dlock_loop *ls[3] = {th_loop_new(c), th_loop_new(c), th_loop_new(c)};
    dlock_loop_acquire now = th_loop_opts(c, 0, 30000);
    dlock_loop_acquire wait = th_loop_opts(c, EC_LIVE_MS, 30000);
    th_seen a = {0}, b = {0}, p = {0}, s = {0};
    ec_look look, lw;
    uint64_t ta, tb;
    memset(&look, 0, sizeof look);
    memset(&lw, 0, sizeof lw);
    assert_int_equal(
        dlock_loop_campaign(NULL, ls[0], name, "a", &now, th_note, &a),
        DLOCK_OK);
    ec_run(ls, 1, &a);
    assert_int_equal(a.status, DLOCK_OK);
    ta = dlock_hold_token(a.hold);
    assert_int_equal(dlock_loop_leader(NULL, ls[1], name, ec_note_look, &look),
                     DLOCK_OK);
    ec_run(&ls[1], 1, &look.s);
    assert_int_equal(look.s.status, DLOCK_OK);
    assert_int_equal(look.li.leading, 1);
    assert_string_equal(look.li.value, "a");
    assert_true(look.li.epoch == ta);
    /* A leader wait on what the look saw, and a second campaign: both
     * wait. */
    assert_int_equal(dlock_loop_leader_wait(NULL, ls[1], name, &look.li,
                                            EC_LIVE_MS, ec_note_look, &lw),
                     DLOCK_OK);
    assert_int_equal(
        dlock_loop_campaign(NULL, ls[2], name, "b", &wait, th_note, &b),
        DLOCK_OK);
    th_loop_run_for(ls, 3, 300);
    assert_int_equal(lw.s.done + b.done, 0);
    /* A new proclamation wakes the leader wait. */
    assert_int_equal(
        dlock_loop_proclaim(NULL, ls[0], a.hold, "a2", th_note, &p), DLOCK_OK);
    ec_run(ls, 1, &p);
    assert_int_equal(p.status, DLOCK_OK);
    ec_run(&ls[1], 1, &lw.s);
    if (lw.s.status != DLOCK_OK)
        print_error("leader wait: %d (%s)\n", lw.s.status, lw.s.err);
    assert_int_equal(lw.s.status, DLOCK_OK);
    assert_string_equal(lw.li.value, "a2");
    /* Resign: the waiting campaign wins with a newer epoch; a leader
     * wait on "a2" sees it. */
    look = lw;
    memset(&lw, 0, sizeof lw);
    assert_int_equal(dlock_loop_leader_wait(NULL, ls[1], name, &look.li,
                                            EC_LIVE_MS, ec_note_look, &lw),
                     DLOCK_OK);
    assert_int_equal(th_loop_release(ls[0], a.hold), DLOCK_OK);
    ec_run(&ls[2], 1, &b);
    assert_int_equal(b.status, DLOCK_OK);
    tb = dlock_hold_token(b.hold);
    assert_true(tb > ta);
    ec_run(&ls[1], 1, &lw.s);
    assert_int_equal(lw.s.status, DLOCK_OK);
    assert_int_equal(lw.li.leading, 1);
    assert_string_equal(lw.li.value, "b");
    assert_true(lw.li.epoch == tb);
    /* Fenced by the epochs, on the key's master. */
    assert_int_equal(
        dlock_loop_fenced_set(NULL, ls[2], fkey, tb, "vb", 2, th_note, &s),
        DLOCK_OK);
    ec_run(&ls[2], 1, &s);
    assert_int_equal(s.status, DLOCK_OK);
    memset(&s, 0, sizeof s);
    assert_int_equal(
        dlock_loop_fenced_set(NULL, ls[0], fkey, ta, "va", 2, th_note, &s),
        DLOCK_OK);
    ec_run(ls, 1, &s);
    assert_int_equal(s.status, DLOCK_STALE);
    memset(&look, 0, sizeof look);
    assert_int_equal(
        dlock_loop_fenced_get(NULL, ls[1], fkey, ec_note_look, &look),
        DLOCK_OK);
    ec_run(&ls[1], 1, &look.s);
    assert_int_equal(look.s.status, DLOCK_OK);
    assert_string_equal(look.value, "vb");
    assert_true(look.fence == tb);
    assert_int_equal(th_cmd_int(node_of(fkey), "EXISTS %s", fkey), 1);
    memset(&s, 0, sizeof s);
    assert_int_equal(dlock_loop_fenced_read(NULL, ls[1], fkey, ta, th_note, &s),
                     DLOCK_OK);
    ec_run(&ls[1], 1, &s);
    assert_int_equal(s.status, DLOCK_STALE);
    assert_int_equal(th_loop_release(ls[2], b.hold), DLOCK_OK);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[2]);
}

/* Notify and fair waiters behind a long hold wake on the release. */
static void test_wakeup(void **state)
{
    dlock_client *hc = client_s(DLOCK_WAIT_SPIN);
    dlock_client *n = client_s(DLOCK_WAIT_NOTIFY);
    dlock_client *f = client_s(DLOCK_WAIT_FAIR);
    (void)state;
    ec_wake_case(hc, n, "ec:wake-n");
    ec_wake_case(hc, f, "ec:wake-f");
    dlock_client_free(n);
    dlock_client_free(f);
    dlock_client_free(hc);
}

/* Fair FIFO order across loops of two clients. */
static void test_fifo(void **state)
{
    dlock_client *a = client_s(DLOCK_WAIT_FAIR);
    dlock_client *b = client_s(DLOCK_WAIT_FAIR);
    (void)state;
    ec_fifo_case(a, b, "ec:fifo");
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A writer (a lock of a read-write lock's name) waiting behind a reader
 * marks the name (new readers are kept out), and a writer cancelled
 * takes its mark off on every node at once (rw_leave.lua): a new
 * reader then gets in. */
static void test_writer_mark(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_NOTIFY);
    dlock_loop *ls[3] = {th_loop_new(c), th_loop_new(c), th_loop_new(c)};
    dlock_loop_acquire now = th_loop_opts(c, 0, 30000);
    dlock_loop_acquire wait = th_loop_opts(c, EC_LIVE_MS, 30000);
    th_seen r1 = {0}, w = {0}, r2 = {0}, r3 = {0};
    dlock_op *op = NULL;
    int64_t end;
    (void)state;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "ec:rw", &now, th_note, &r1),
        DLOCK_OK);
    ec_run(ls, 1, &r1);
    assert_int_equal(r1.status, DLOCK_OK);
    assert_int_equal(dlock_loop_lock(&op, ls[1], "ec:rw", &wait, th_note, &w),
                     DLOCK_OK);
    th_loop_run_for(&ls[1], 1, 300);
    assert_int_equal(w.done, 0);
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[2], "ec:rw", &now, th_note, &r2),
        DLOCK_OK);
    ec_run(&ls[2], 1, &r2);
    assert_int_equal(r2.status, DLOCK_BUSY); /* a writer waits */
    dlock_op_cancel(op);
    assert_int_equal(w.status, DLOCK_CANCELED);
    end = th_now_ms() + EC_LIVE_MS;
    while (dlock_loop_pending(ls[1]) > 0 && th_now_ms() < end)
        th_loop_run_for(&ls[1], 1, 20);
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[2], "ec:rw", &now, th_note, &r3),
        DLOCK_OK);
    ec_run(&ls[2], 1, &r3);
    assert_int_equal(r3.status, DLOCK_OK);
    assert_int_equal(th_loop_release(ls[2], r3.hold), DLOCK_OK);
    assert_int_equal(th_loop_release(ls[0], r1.hold), DLOCK_OK);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[2]);
    dlock_client_free(c);
}

#ifndef EC_NO_SEM
/* Fair FIFO of N waiters on one loop: permits of a semaphore of limit
 * 1 (a loop holds several permits of one name, each its own owner),
 * queued one after the other behind the holder, are handed over in
 * queue order. Not over Redlock (no semaphores there). */
static void test_sem_fifo(void **state)
{
    enum { N = 3 };
    dlock_client *c = client_s(DLOCK_WAIT_FAIR);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire now = th_loop_opts(c, 0, 30000);
    ec_waiter f[N];
    ec_order g = {{0}, 0};
    th_seen h = {0};
    int i;
    int64_t end;
    (void)state;
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, l, "ec:sf", 1, &now, th_note, &h),
        DLOCK_OK);
    ec_run(&l, 1, &h);
    assert_int_equal(h.status, DLOCK_OK);
    for (i = 0; i < N; i++) {
        dlock_loop_acquire o = th_loop_opts(c, EC_LIVE_MS, 30000);
        memset(&f[i], 0, sizeof f[i]);
        f[i].g = &g;
        f[i].i = i;
        assert_int_equal(dlock_loop_sem_acquire(NULL, l, "ec:sf", 1, &o,
                                                ec_note_order, &f[i]),
                         DLOCK_OK);
        end = th_now_ms() + EC_LIVE_MS;
        while (th_cmd_int(node_of("dlock:{ec:sf}:q"), "LLEN dlock:{ec:sf}:q") !=
                   i + 1 &&
               th_now_ms() < end)
            th_loop_run_for(&l, 1, 20);
        assert_int_equal(
            th_cmd_int(node_of("dlock:{ec:sf}:q"), "LLEN dlock:{ec:sf}:q"),
            i + 1);
    }
    assert_int_equal(th_loop_release(l, h.hold), DLOCK_OK);
    for (i = 0; i < N; i++) {
        int k;
        end = th_now_ms() + EC_LIVE_MS;
        while (g.n == i && th_now_ms() < end)
            th_loop_run_for(&l, 1, 20);
        assert_int_equal(g.n, i + 1);
        k = g.order[i];
        assert_int_equal(k, i);
        assert_int_equal(th_loop_release(l, f[k].s.hold), DLOCK_OK);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}
#endif

/* Election and fenced values through the loop on the names' masters. */
static void test_elect_fenced(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_FAIR);
    (void)state;
    ec_elect_fenced_case(c, "ec:el", "ec:fv");
    dlock_client_free(c);
}

/* 1 once KEY is gone from s (a release confirmed by a majority may reach
 * the other nodes a moment later), 0 after EC_LIVE_MS. */
static int ec_gone(th_server *s, const char *key)
{
    int64_t end = th_now_ms() + EC_LIVE_MS;
    while (th_cmd_int(s, "EXISTS %s", key) != 0) {
        if (th_now_ms() > end)
            return 0;
        th_sleep_ms(20);
    }
    return 1;
}

/* A loop's write hold downgraded to a read hold (dlock_loop_downgrade)
 * on the name's nodes: a reader waiting on another loop gets in, the
 * hold keeps its token and is renewed as a reader past its lease, a
 * writer's try is then BUSY, a reader's hold is not downgraded, and
 * both releases leave nothing. */
static void test_downgrade(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_NOTIFY);
    dlock_loop *ls[2] = {th_loop_new(c), th_loop_new(c)};
    /* Renewed (a lease of 1 s: 600 ms was lost once under ASan on a
     * loaded machine, a renewal later than the lease). */
    dlock_loop_acquire o = th_loop_opts(c, 0, 1000);
    th_seen wr = {0}, rd = {0}, d = {0}, t = {0}, bad = {0};
    uint64_t token;
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "ec:dg", &o, th_note, &wr),
                     DLOCK_OK);
    ec_run(ls, 1, &wr);
    assert_int_equal(wr.status, DLOCK_OK);
    token = dlock_hold_token(wr.hold);
    o.wait_ms = EC_LIVE_MS;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[1], "ec:dg", &o, th_note, &rd),
        DLOCK_OK);
    th_loop_run_for(ls, 2, 200);
    assert_int_equal(rd.done, 0); /* the writer holds it */
    assert_int_equal(dlock_loop_downgrade(NULL, ls[0], wr.hold, th_note, &d),
                     DLOCK_OK);
    ec_run(ls, 2, &d);
    assert_int_equal(d.status, DLOCK_OK);
    assert_ptr_equal(d.hold, wr.hold);
    assert_int_equal(dlock_hold_token(d.hold), token);
    ec_run(ls, 2, &rd); /* woken, in */
    assert_int_equal(rd.status, DLOCK_OK);
    /* Renewed as a reader past its lease (twice); two readers, no
     * writer. */
    th_loop_run_for(ls, 2, 2200);
    if (dlock_hold_status(d.hold) != DLOCK_OK) {
        const char *why = NULL;
        dlock_hold_lost_reason(d.hold, &why);
        fprintf(stderr, "ec:dg: the reader's hold: %d (%s)\n",
                dlock_hold_status(d.hold), why != NULL ? why : "");
    }
    assert_int_equal(dlock_hold_status(d.hold), DLOCK_OK);
    assert_int_equal(
        th_cmd_int(node_of("dlock:{ec:dg}:r"), "ZCARD dlock:{ec:dg}:r"), 2);
    o.wait_ms = 0;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "ec:dg", &o, th_note, &t),
                     DLOCK_OK);
    ec_run(ls, 1, &t);
    assert_int_equal(t.status, DLOCK_BUSY);
    assert_int_equal(dlock_loop_downgrade(NULL, ls[0], d.hold, th_note, &bad),
                     DLOCK_EINVAL);
    assert_int_equal(th_loop_release(ls[0], d.hold), DLOCK_OK);
    assert_int_equal(th_loop_release(ls[1], rd.hold), DLOCK_OK);
    assert_true(ec_gone(node_of("dlock:{ec:dg}"), "dlock:{ec:dg}"));
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* The client's watchdog thread renews an engine loop's holds
 * (dlock_loop_set_watchdog): the loop stalls for several leases and the
 * hold is still held, on the servers and by the loop's look; released
 * through the loop, the renewals stop and the key goes. */
static void test_watchdog(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_NOTIFY);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 600);
    th_seen a = {0};
    th_server *s = node_of("dlock:{ec:wd}");
    (void)state;
    assert_int_equal(dlock_loop_set_watchdog(l, 1), DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, l, "ec:wd", &o, th_note, &a),
                     DLOCK_OK);
    ec_run(&l, 1, &a);
    assert_int_equal(a.status, DLOCK_OK);
    /* The loop stalls for four leases: the watchdog thread renews. */
    th_sleep_ms(2400);
    assert_true(th_cmd_int(s, "PTTL dlock:{ec:wd}") > 0);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    assert_true(dlock_hold_validity_ms(a.hold) > 0);
    th_loop_run_for(&l, 1, 200);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    assert_int_equal(th_loop_release(l, a.hold), DLOCK_OK);
    assert_true(ec_gone(s, "dlock:{ec:wd}"));
    /* Not renewed after the release (the watchdog's record is gone). */
    th_sleep_ms(800);
    assert_int_equal(th_cmd_int(s, "EXISTS dlock:{ec:wd}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Script calls s holds now (CLIENT LIST: a client blocked, flag b, by a
 * CLIENT PAUSE, on EVALSHA or EVAL). */
static long long ec_blocked(th_server *s)
{
    redisReply *r = th_cmd(s, "CLIENT LIST");
    const char *p;
    long long n = 0;
    assert_non_null(r);
    assert_non_null(r->str);
    for (p = r->str; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        if (strstr(line, " flags=b") != NULL &&
            (strstr(line, " cmd=evalsha ") != NULL ||
             strstr(line, " cmd=eval ") != NULL))
            n++;
        p = end != NULL ? end + 1 : NULL;
    }
    freeReplyObject(r);
    return n;
}

/* An extend cancelled while its request is out (the name's server
 * paused: CLIENT PAUSE WRITE holds it) still counts until it is
 * answered: no renewal round of the hold is sent beside it (it could run
 * first on another connection, and the extend's lease then stand while
 * the loop believes the round's). One client is held by the pause, not
 * two; afterwards the hold renews on and the loop believes no longer
 * than the key has. (A check of the path: it passed without the fix too,
 * the engine keeping an abandoned request in order on its pooled
 * connection, so the round queued behind it on the same client.) */
static void test_cancelled_extend(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_NOTIFY);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 3000); /* rounds every 1 s */
    th_seen a = {0}, e = {0};
    th_server *s = node_of("dlock:{ec:xc}");
    dlock_op *eop = NULL;
    long long blocked, pttl;
    int64_t valid;
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, l, "ec:xc", &o, th_note, &a),
                     DLOCK_OK);
    ec_run(&l, 1, &a);
    assert_int_equal(a.status, DLOCK_OK);
    freeReplyObject(th_cmd(s, "CLIENT PAUSE 1800 WRITE"));
    assert_int_equal(dlock_loop_extend(&eop, l, a.hold, 60000, th_note, &e),
                     DLOCK_OK);
    th_loop_run_for(&l, 1, 100);
    assert_int_equal(e.done, 0); /* held by the pause */
    dlock_op_cancel(eop);
    assert_int_equal(e.status, DLOCK_CANCELED);
    th_loop_run_for(&l, 1, 1300); /* a round is due meanwhile */
    blocked = ec_blocked(s);
    print_message("clients held by the pause: %lld\n", blocked);
    assert_int_equal(blocked, 1);
    th_loop_run_for(&l, 1, 1000); /* the pause ends; all answered */
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    pttl = th_cmd_int(s, "PTTL dlock:{ec:xc}");
    valid = dlock_hold_validity_ms(a.hold);
    if (valid > pttl + 50)
        fail_msg("the loop believes %lld ms, the key has %lld ms left",
                 (long long)valid, pttl);
    assert_int_equal(th_loop_release(l, a.hold), DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A downgrade sent while a renewal round of the writer is out (the
 * name's server paused: both wait there): whichever runs first, the
 * hold goes on as a reader, never reported lost (the writer's round
 * answered after the downgrade was sent is not counted). A check of the
 * path (node_holds.c's kind check runs here): it passed without that
 * check too, the downgrade queueing behind the round (round first). */
static void test_downgrade_beside_round(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_NOTIFY);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 1500); /* rounds every 0.5 s */
    th_seen a = {0}, d = {0};
    th_server *s = node_of("dlock:{ec:dr}");
    int64_t end;
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, l, "ec:dr", &o, th_note, &a),
                     DLOCK_OK);
    ec_run(&l, 1, &a);
    assert_int_equal(a.status, DLOCK_OK);
    freeReplyObject(th_cmd(s, "CLIENT PAUSE 900 WRITE"));
    end = th_now_ms() + EC_LIVE_MS;
    while (ec_blocked(s) == 0 && th_now_ms() < end)
        th_loop_run_for(&l, 1, 20); /* until a round is held */
    assert_int_equal(ec_blocked(s), 1);
    assert_int_equal(dlock_loop_downgrade(NULL, l, a.hold, th_note, &d),
                     DLOCK_OK);
    ec_run(&l, 1, &d);
    assert_int_equal(d.status, DLOCK_OK);
    th_loop_run_for(&l, 1, 1000);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    assert_int_equal(th_cmd_int(s, "ZCARD dlock:{ec:dr}:r"), 1);
    assert_int_equal(th_loop_release(l, a.hold), DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

#endif /* LOOP_ENGINE_CASES_H */
