/*
 * loop_redlock.c - the event-loop API (include/dlock_loop.h) on a client
 * of three redis-servers (Redlock, majority 2): the loop runs the one
 * engine and the one attempt there (src/loop/multi_node.c). Acquire,
 * extend and release on every node; a loop hold never re-entered; a
 * grant at a majority with a node stopped; waiters riding out a server
 * killed under them and getting the name at the majority left; a cancel
 * mid-wait and one mid-attempt (what the attempt may hold is given
 * back); renewal on the loop's clock and a stalled loop's loss reported;
 * what is not implemented there refused with DLOCK_EINVAL.
 */
#include <poll.h>
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
#include "dlock_loop.h"
#include "harness.h"
#include "th_loop.h"

#define FIXTURE_NS 3
#include "fixture_n.h"
#define EC_NO_SEM /* no semaphores over Redlock */
#include "loop_engine_cases.h"

/* The command timeout: a stopped node outlasts it. */
#define CMD_MS 500
/* Bounded waits (liveness, not timing). */
#define LIVE_MS 20000
/* A lease far longer than any liveness wait here. */
#define LONG_LEASE_MS 120000

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

/* A client of the three servers waiting by strategy. */
static dlock_client *client_s(int strategy)
{
    const char *urls[FIXTURE_NS];
    dlock_client *c;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, strategy, CMD_MS, 0);
    assert_non_null(c);
    return c;
}

static dlock_client *client(void)
{
    return client_s(DLOCK_WAIT_NOTIFY);
}

/* See loop_engine_cases.h: a script's calls are counted on the first
 * server (every node runs each). */
static th_server *node_of(const char *key)
{
    (void)key;
    return &srv[0];
}

static dlock_loop *new_loop(dlock_client *c)
{
    dlock_loop *l = th_loop_new(c);
    assert_non_null(l);
    return l;
}

/* Acquire NAME on l (o), expecting status; the hold (or NULL). */
static dlock_hold *take(dlock_loop *l, const char *name,
                        const dlock_loop_acquire *o, int status)
{
    dlock_hold *h;
    assert_int_equal(th_loop_lock(l, name, o, &h), status);
    return h;
}

static void release(dlock_loop *l, dlock_hold *h)
{
    assert_int_equal(th_loop_release(l, h), DLOCK_OK);
}

/* How many of the servers hold KEY. */
static int holders(const char *key)
{
    int i, n = 0;
    for (i = 0; i < FIXTURE_NS; i++)
        n += th_cmd_int(&srv[i], "EXISTS %s", key) == 1;
    return n;
}

static void test_acquire_extend_release(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    dlock_hold *h;
    seen e = {0};
    int i;
    (void)state;
    h = take(l, "lr:a", &o, DLOCK_OK);
    assert_non_null(h);
    assert_true(dlock_hold_token(h) > 0);
    assert_true(dlock_hold_validity_ms(h) > 0);
    assert_int_equal(holders("dlock:{lr:a}"), 3);
    /* The same loop again: refused, never re-entered; another loop of
     * the same client: another owner, BUSY. */
    assert_null(take(l, "lr:a", &o, DLOCK_BUSY));
    assert_null(take(l2, "lr:a", &o, DLOCK_BUSY));
    assert_int_equal(dlock_loop_extend(NULL, l, h, 60000, note, &e), DLOCK_OK);
    run1(l, &e.done);
    assert_int_equal(e.status, DLOCK_OK);
    for (i = 0; i < FIXTURE_NS; i++)
        assert_true(th_cmd_int(&srv[i], "PTTL dlock:{lr:a}") > 30000);
    release(l, h);
    assert_int_equal(holders("dlock:{lr:a}"), 0);
    h = take(l2, "lr:a", &o, DLOCK_OK);
    release(l2, h);
    /* An extend and a release of one hold out together (two calls): both
     * complete, the hold outlives the extend's callback (ASan). */
    h = take(l, "lr:a2", &o, DLOCK_OK);
    memset(&e, 0, sizeof e);
    {
        seen r = {0};
        assert_int_equal(dlock_loop_extend(NULL, l, h, 60000, note, &e),
                         DLOCK_OK);
        assert_int_equal(dlock_loop_release(NULL, l, h, note, &r), DLOCK_OK);
        run1(l, &r.done);
        run1(l, &e.done);
        assert_int_equal(r.status, DLOCK_OK);
        assert_true(e.status == DLOCK_OK || e.status == DLOCK_NOT_OWNER);
        assert_true(e.hold != NULL);
    }
    assert_int_equal(holders("dlock:{lr:a2}"), 0);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* One node stopped: a grant at the majority; another owner's try BUSY. */
/* A new client's loop (every lane opened now, no script known on any
 * node) starts two acquires at once with one node holding up scripts
 * (CLIENT PAUSE WRITE: it answers the open's INFO, as a node in a
 * FAILOVER does): the first call on each lane carries the source, the
 * second goes by SHA behind it; neither is waited for at the paused
 * node, so both complete at the majority long before their step (60 s:
 * the command timeout) ends. The second took its whole step before
 * (it.redlock_early test_fresh_paused is the blocking API's case). */
static void test_behind_source_paused(void **state)
{
    const char *urls[FIXTURE_NS];
    dlock_client *c;
    dlock_loop *l;
    dlock_loop_acquire o;
    seen s[2];
    int64_t end;
    int i, done;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, 60000, 2000);
    assert_non_null(c);
    l = new_loop(c);
    o = th_loop_opts(c, 0, 600000);
    freeReplyObject(th_cmd(&srv[2], "CLIENT PAUSE 40000 WRITE"));
    memset(s, 0, sizeof s);
    assert_int_equal(dlock_loop_lock(NULL, l, "lr:bs1", &o, note, &s[0]),
                     DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, l, "lr:bs2", &o, note, &s[1]),
                     DLOCK_OK);
    end = th_now_ms() + 25000;
    do {
        th_loop_run_for(&l, 1, 20);
        done = s[0].done + s[1].done;
    } while (done < 2 && th_now_ms() < end);
    print_message("done %d of 2 with a node paused\n", done);
    freeReplyObject(th_cmd(&srv[2], "CLIENT UNPAUSE"));
    assert_int_equal(done, 2);
    for (i = 0; i < 2; i++) {
        assert_int_equal(s[i].status, DLOCK_OK);
        release(l, s[i].hold);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}

static void test_majority(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    dlock_hold *h;
    (void)state;
    th_server_pause(&srv[2]);
    h = take(l, "lr:m", &o, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{lr:m}"), 1);
    assert_int_equal(th_cmd_int(&srv[1], "EXISTS dlock:{lr:m}"), 1);
    assert_null(take(l2, "lr:m", &o, DLOCK_BUSY));
    release(l, h);
    th_server_resume(&srv[2]);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* A downgrade over Redlock is decided by a majority (as
 * dlock_rw_downgrade): with one node stopped it is done on the two live
 * ones (a read lease there); with two stopped it fails
 * (no quorum) and the hold is lost. */
static void test_downgrade_majority(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    seen d = {0}, e = {0};
    dlock_hold *h;
    int i;
    (void)state;
    h = take(l, "lr:dm", &o, DLOCK_OK);
    th_server_pause(&srv[2]);
    assert_int_equal(dlock_loop_downgrade(NULL, l, h, note, &d), DLOCK_OK);
    run1(l, &d.done);
    assert_int_equal(d.status, DLOCK_OK);
    for (i = 0; i < 2; i++)
        assert_int_equal(th_cmd_int(&srv[i], "ZCARD dlock:{lr:dm}:r"), 1);
    release(l, h);
    th_server_resume(&srv[2]);
    h = take(l, "lr:dn", &o, DLOCK_OK);
    th_server_pause(&srv[1]);
    th_server_pause(&srv[2]);
    assert_int_equal(dlock_loop_downgrade(NULL, l, h, note, &e), DLOCK_OK);
    run1(l, &e.done);
    assert_int_equal(e.status, DLOCK_NO_QUORUM);
    assert_int_equal(dlock_hold_status(h), DLOCK_LOST);
    th_server_resume(&srv[1]);
    th_server_resume(&srv[2]);
    assert_int_equal(th_loop_release(l, h), DLOCK_LOST);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* on_lost of a hold: its status. */
static void lost_note(dlock_hold *h, int status, void *ud)
{
    (void)h;
    *(int *)ud = status;
}

/* The watchdog thread renewing a loop's hold over Redlock finds it lost
 * when a majority no longer has it (deleted on two of the three): the
 * loss is reported from process, through on_lost, with the watchdog's
 * reason. */
static void test_watchdog_loss(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 600);
    const char *why = NULL;
    int lost = 0;
    int64_t end;
    dlock_hold *h;
    (void)state;
    assert_int_equal(dlock_loop_set_watchdog(l, 1), DLOCK_OK);
    o.on_lost = lost_note;
    o.on_lost_userdata = &lost;
    h = take(l, "lr:wl", &o, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[0], "DEL dlock:{lr:wl}"), 1);
    assert_int_equal(th_cmd_int(&srv[1], "DEL dlock:{lr:wl}"), 1);
    end = th_now_ms() + LIVE_MS;
    while (lost == 0 && th_now_ms() < end)
        th_loop_run_for(&l, 1, 50);
    assert_int_equal(lost, DLOCK_NOT_OWNER);
    assert_int_equal(dlock_hold_lost_reason(h, &why), DLOCK_NOT_OWNER);
    assert_non_null(strstr(why, "watchdog"));
    assert_int_equal(th_loop_release(l, h), DLOCK_LOST);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A semaphore is not available over Redlock (as dlock_sem_acquire);
 * fenced values go to the first server, as dlock_fenced_set's. */
static void test_refused(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    seen s = {0};
    (void)state;
    assert_int_equal(dlock_loop_sem_acquire(NULL, l, "lr:sem", 2, &o, note, &s),
                     DLOCK_OK);
    run1(l, &s.done);
    assert_int_equal(s.status, DLOCK_EINVAL);
    memset(&s, 0, sizeof s);
    assert_int_equal(
        dlock_loop_fenced_set(NULL, l, "lr:f", 7, "v", 1, note, &s), DLOCK_OK);
    run1(l, &s.done);
    assert_int_equal(s.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS lr:f"), 1);
    memset(&s, 0, sizeof s);
    assert_int_equal(dlock_loop_fenced_read(NULL, l, "lr:f", 6, note, &s),
                     DLOCK_OK);
    run1(l, &s.done);
    assert_int_equal(s.status, DLOCK_STALE);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Renewal on the loop's clock keeps a short lease on every node; a loop
 * that does not run past its lease has its loss reported. */
static int lost_status;
static void on_lost(dlock_hold *h, int status, void *ud)
{
    (void)h;
    (void)ud;
    lost_status = status;
}

static void test_renewal(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 900);
    dlock_hold *h;
    (void)state;
    o.on_lost = on_lost;
    h = take(l, "lr:r", &o, DLOCK_OK);
    /* Three leases long: alive only if renewed. */
    th_loop_run_for(&l, 1, 2700);
    assert_int_equal(dlock_hold_status(h), DLOCK_OK);
    assert_int_equal(holders("dlock:{lr:r}"), 3);
    release(l, h);
    lost_status = 0;
    h = take(l, "lr:r2", &o, DLOCK_OK);
    th_sleep_ms(1500); /* the loop stalls past the lease */
    th_loop_run_for(&l, 1, 200);
    assert_int_equal(lost_status, DLOCK_LOST);
    assert_int_equal(dlock_hold_status(h), DLOCK_LOST);
    {
        seen s = {0};
        assert_int_equal(dlock_loop_release(NULL, l, h, note, &s), DLOCK_OK);
        run1(l, &s.done);
        assert_int_equal(s.status, DLOCK_LOST);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A cancel mid-wait completes CANCELED and leaves nothing; a cancel
 * right after the start (its attempt out on every node) gives back what
 * the attempt may have taken: another loop's waiter gets the name long
 * before the cancelled one's lease would have run out. */
static void test_cancel(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, LIVE_MS, 30000);
    dlock_loop_acquire lo = th_loop_opts(c, 0, LONG_LEASE_MS);
    dlock_hold *h;
    dlock_op *op = NULL;
    seen w = {0}, x = {0};
    (void)state;
    h = take(l, "lr:c", &lo, DLOCK_OK);
    assert_int_equal(dlock_loop_lock(&op, l2, "lr:c", &o, note, &w), DLOCK_OK);
    th_loop_run_for(&l2, 1, 300);
    assert_int_equal(w.done, 0);
    dlock_op_cancel(op);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.status, DLOCK_CANCELED);
    release(l, h);
    assert_int_equal(holders("dlock:{lr:c}"), 0);

    /* Mid-attempt: warm the connections, then start and cancel. */
    h = take(l2, "lr:c-warm", &lo, DLOCK_OK);
    release(l2, h);
    memset(&w, 0, sizeof w);
    assert_int_equal(dlock_loop_lock(&op, l2, "lr:c2", &lo, note, &w),
                     DLOCK_OK);
    dlock_op_cancel(op);
    assert_int_equal(w.status, DLOCK_CANCELED);
    assert_int_equal(dlock_loop_lock(NULL, l, "lr:c2", &o, note, &x), DLOCK_OK);
    run1(l, &x.done);
    assert_int_equal(x.status, DLOCK_OK);
    release(l, x.hold);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* Two waiters (two loops) for a name held by a third; one server is
 * killed under them; the holder releases (at the majority left) and the
 * waiters get it in turn, each at the majority of the two left. */
static void test_killed_under_waiters(void **state)
{
    dlock_client *c = client();
    dlock_loop *ls[3] = {new_loop(c), new_loop(c), new_loop(c)};
    dlock_loop_acquire o = th_loop_opts(c, LIVE_MS, 30000);
    dlock_loop_acquire t = th_loop_opts(c, 0, 30000);
    dlock_hold *h;
    seen a = {0}, b = {0};
    int first_a;
    int64_t end;
    (void)state;
    h = take(ls[0], "lr:k", &t, DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lr:k", &o, note, &a),
                     DLOCK_OK);
    assert_int_equal(dlock_loop_lock(NULL, ls[2], "lr:k", &o, note, &b),
                     DLOCK_OK);
    th_loop_run_for(ls, 3, 300);
    assert_int_equal(a.done + b.done, 0);
    th_server_kill9(&srv[2]);
    th_loop_run_for(ls, 3, 300);
    assert_int_equal(a.done + b.done, 0);
    release(ls[0], h);
    end = th_now_ms() + LIVE_MS;
    while (a.done + b.done == 0 && th_now_ms() < end)
        th_loop_run_for(ls, 3, 20);
    assert_int_equal(a.done + b.done, 1);
    first_a = a.done;
    assert_int_equal((first_a ? &a : &b)->status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{lr:k}") +
                         th_cmd_int(&srv[1], "EXISTS dlock:{lr:k}"),
                     2);
    release(first_a ? ls[1] : ls[2], (first_a ? &a : &b)->hold);
    end = th_now_ms() + LIVE_MS;
    while (a.done + b.done < 2 && th_now_ms() < end)
        th_loop_run_for(ls, 3, 20);
    assert_int_equal(a.done + b.done, 2);
    assert_int_equal((first_a ? &b : &a)->status, DLOCK_OK);
    release(first_a ? ls[2] : ls[1], (first_a ? &b : &a)->hold);
    assert_int_equal(th_server_restart(&srv[2]), 0);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_loop_free(ls[2]);
    dlock_client_free(c);
}

/* Readers share a name over Redlock, a writer's try is then BUSY;
 * several locks at once, each held on every node. */
static void test_readers_and_all(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    const char *names[3] = {"lr:all-a", "lr:all-b", "lr:all-c"};
    seen r1 = {0}, r2 = {0}, all = {0};
    int i;
    (void)state;
    assert_int_equal(dlock_loop_read_acquire(NULL, l, "lr:rw", &o, note, &r1),
                     DLOCK_OK);
    assert_int_equal(dlock_loop_read_acquire(NULL, l2, "lr:rw", &o, note, &r2),
                     DLOCK_OK);
    run1(l, &r1.done);
    run1(l2, &r2.done);
    assert_int_equal(r1.status, DLOCK_OK);
    assert_int_equal(r2.status, DLOCK_OK);
    assert_null(take(l2, "lr:rw", &o, DLOCK_BUSY));
    release(l, r1.hold);
    release(l2, r2.hold);
    assert_int_equal(take(l2, "lr:rw", &o, DLOCK_OK) != NULL, 1);

    assert_int_equal(dlock_loop_lock_all(NULL, l, names, 3, &o, note, &all),
                     DLOCK_OK);
    run1(l, &all.done);
    assert_int_equal(all.status, DLOCK_OK);
    dlock_loop_free(l2); /* its hold of lr:rw runs out */
    dlock_loop_free(l);
    for (i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "dlock:{%s}", names[i]);
        assert_int_equal(holders(key), 3);
    }
    dlock_client_free(c);
}

/* A fair waiter cancelled (and one timed out) gives back its queue
 * place on every node at once (fair_leave.lua), not at its waiter TTL. */
static void test_cancel_leaves_queue(void **state)
{
    dlock_client *c = client_s(DLOCK_WAIT_FAIR);
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire t = th_loop_opts(c, 0, LONG_LEASE_MS);
    dlock_loop_acquire o = th_loop_opts(c, LIVE_MS, 30000);
    dlock_hold *h;
    dlock_op *op = NULL;
    seen w = {0};
    int k, in;
    int64_t end;
    (void)state;
    h = take(l, "lr:cq", &t, DLOCK_OK);
    assert_int_equal(dlock_loop_lock(&op, l2, "lr:cq", &o, note, &w), DLOCK_OK);
    end = th_now_ms() + LIVE_MS;
    do {
        th_loop_run_for(&l2, 1, 20);
        for (in = 0, k = 0; k < FIXTURE_NS; k++)
            in += th_cmd_int(&srv[k], "ZCARD dlock:{lr:cq}:q") == 1;
    } while (in < FIXTURE_NS && th_now_ms() < end);
    assert_int_equal(in, FIXTURE_NS);
    dlock_op_cancel(op);
    assert_int_equal(w.status, DLOCK_CANCELED);
    /* The leave goes out on the loop's next process. */
    while (dlock_loop_pending(l2) > 0 && th_now_ms() < end)
        th_loop_run_for(&l2, 1, 20);
    for (k = 0; k < FIXTURE_NS; k++)
        assert_int_equal(th_cmd_int(&srv[k], "ZCARD dlock:{lr:cq}:q"), 0);
    /* A fair waiter that times out leaves the same way. */
    {
        dlock_loop_acquire t2 = th_loop_opts(c, 800, 30000);
        seen x = {0};
        assert_int_equal(dlock_loop_lock(NULL, l2, "lr:cq", &t2, note, &x),
                         DLOCK_OK);
        run1(l2, &x.done);
        assert_int_equal(x.status, DLOCK_TIMEDOUT);
        end = th_now_ms() + LIVE_MS;
        while (dlock_loop_pending(l2) > 0 && th_now_ms() < end)
            th_loop_run_for(&l2, 1, 20);
        for (k = 0; k < FIXTURE_NS; k++)
            assert_int_equal(th_cmd_int(&srv[k], "ZCARD dlock:{lr:cq}:q"), 0);
    }
    release(l, h);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

/* Holder info on a loop over Redlock: a client made with holder_info
 * records it on every node after the grant, and the loop's renewals
 * renew it with the lease (holder_extend.lua). */
static void test_holder_info(void **state)
{
    const char *urls[FIXTURE_NS];
    dlock_options opt;
    dlock_client *c = NULL;
    dlock_loop *l;
    dlock_loop_acquire o;
    dlock_hold *h;
    int i;
    (void)state;
    fixture_urls(urls);
    dlock_options_init(&opt);
    opt.servers = urls;
    opt.nservers = FIXTURE_NS;
    opt.tls_ca_file = th_ca_file();
    opt.command_timeout_ms = CMD_MS;
    opt.holder_info = 1;
    assert_int_equal(dlock_client_new(&c, &opt, NULL, 0), DLOCK_OK);
    l = new_loop(c);
    o = th_loop_opts(c, 0, 900);
    h = take(l, "lr:hi", &o, DLOCK_OK);
    th_loop_run_for(&l, 1, 200); /* the info's write, nobody waits */
    assert_int_equal(holders("dlock:{lr:hi}:i"), 3);
    /* Three leases: the info lives on only if renewed with the lock. */
    th_loop_run_for(&l, 1, 2700);
    assert_int_equal(dlock_hold_status(h), DLOCK_OK);
    assert_int_equal(holders("dlock:{lr:hi}:i"), 3);
    for (i = 0; i < FIXTURE_NS; i++)
        assert_true(th_cmd_int(&srv[i], "PTTL dlock:{lr:hi}:i") > 0);
    release(l, h);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Two of the three servers made replicas: a loop's acquire is refused
 * there before any lock write (the engine's replica check, as the
 * blocking API's), so no majority: the message names the replica. */
static void test_replica_refused(void **state)
{
    dlock_client *c;
    dlock_loop *l;
    dlock_loop_acquire o;
    seen s = {0};
    int i;
    (void)state;
    for (i = 1; i < FIXTURE_NS; i++)
        assert_int_equal(
            th_cmd_int(&srv[i], "REPLICAOF 127.0.0.1 %d", srv[0].port), -1);
    c = client();
    l = new_loop(c);
    o = th_loop_opts(c, 0, 30000);
    assert_int_equal(dlock_loop_lock(NULL, l, "lr:rep", &o, note, &s),
                     DLOCK_OK);
    run1(l, &s.done);
    print_message("replica: %d (%s)\n", s.status, s.err);
    assert_int_not_equal(s.status, DLOCK_OK);
    assert_non_null(strstr(s.err, "replica"));
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{lr:rep}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
    for (i = 1; i < FIXTURE_NS; i++)
        th_cmd_int(&srv[i], "REPLICAOF NO ONE");
}

/* Election over Redlock with a server stopped: the campaign's proclaim
 * is done at the majority left, and a leader look names the owner a
 * majority names (the blocking API's dlock_leader rule). */
static void test_elect_majority(void **state)
{
    dlock_client *c = client();
    dlock_loop *l = new_loop(c), *l2 = new_loop(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 30000);
    seen a = {0};
    ec_look look;
    (void)state;
    memset(&look, 0, sizeof look);
    th_server_pause(&srv[2]);
    assert_int_equal(dlock_loop_campaign(NULL, l, "lr:em", "x", &o, note, &a),
                     DLOCK_OK);
    run1(l, &a.done);
    assert_int_equal(a.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{lr:em}:l") +
                         th_cmd_int(&srv[1], "EXISTS dlock:{lr:em}:l"),
                     2);
    assert_int_equal(dlock_loop_leader(NULL, l2, "lr:em", ec_note_look, &look),
                     DLOCK_OK);
    run1(l2, &look.s.done);
    assert_int_equal(look.s.status, DLOCK_OK);
    assert_int_equal(look.li.leading, 1);
    assert_string_equal(look.li.value, "x");
    assert_true(look.li.epoch == dlock_hold_token(a.hold));
    release(l, a.hold);
    th_server_resume(&srv[2]);
    dlock_loop_free(l);
    dlock_loop_free(l2);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_extend_release),
        cmocka_unit_test(test_majority),
        cmocka_unit_test(test_behind_source_paused),
        cmocka_unit_test(test_downgrade_majority),
        cmocka_unit_test(test_watchdog_loss),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_readers_and_all),
        cmocka_unit_test(test_renewal),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_killed_under_waiters),
        cmocka_unit_test(test_wakeup),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_writer_mark),
        cmocka_unit_test(test_elect_fenced),
        cmocka_unit_test(test_downgrade),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test(test_cancelled_extend),
        cmocka_unit_test(test_downgrade_beside_round),
        cmocka_unit_test(test_elect_majority),
        cmocka_unit_test(test_cancel_leaves_queue),
        cmocka_unit_test(test_holder_info),
        cmocka_unit_test(test_replica_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
