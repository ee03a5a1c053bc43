/*
 * loop_lanes.c - the engine's lane set under an event loop (issue 30:
 * "connections per server per loop bounded"): a Redlock loop (three
 * servers) and a Cluster loop with many operations in flight at once.
 * Connections are counted by the servers (INFO stats'
 * total_connections_received before and after), not by time. Faults
 * under pipelined calls: the loop's connection killed (CLIENT KILL), a
 * server killed (kill -9), the script cache flushed (SCRIPT FLUSH): every
 * operation completes with a status, none hangs, and a lock reported
 * held is held on a majority.
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
#include "th_cluster.h"
#include "th_loop.h"
#include "topology.h"

#define FIXTURE_NS 3
#include "fixture_n.h"

/* Operations in flight at once. */
#define INFLIGHT 1000
/* Connections a loop may open to one server during the run: its command
 * lane, a subscriber, a cluster map's refresh, and one spare. */
#define MAX_CONNS 4

/* What the operations of one burst completed with. */
typedef struct burst {
    int done, ok, want;
    int mark; /* flag set once done reaches it (0: want) */
    int flag;
    dlock_hold *holds[INFLIGHT];
} burst;

/* A dlock_op_cb counting into the burst (userdata). */
static void count(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    burst *b = ud;
    (void)op;
    if (status == DLOCK_OK && hold != NULL)
        b->holds[b->ok] = hold;
    b->ok += status == DLOCK_OK;
    if (status != DLOCK_OK)
        fprintf(stderr, "loop_lanes: status %d\n", status);
    if (++b->done == (b->mark > 0 ? b->mark : b->want))
        b->flag = 1;
}

/* The number after MARK in s's answer to INFO SECTION, or ABSENT when
 * it has no such line. */
static long long info_num(const th_server *s, const char *section,
                          const char *mark, long long absent)
{
    redisReply *r = th_cmd(s, "INFO %s", section);
    const char *p;
    long long n = absent;
    assert_non_null(r);
    p = strstr(r->str, mark);
    if (p != NULL)
        n = strtoll(p + strlen(mark), NULL, 10);
    freeReplyObject(r);
    return n;
}

/* INFO stats' total_connections_received of s. */
static long long accepted(const th_server *s)
{
    return info_num(s, "stats", "total_connections_received:", -1);
}

/* Start locking N distinct names PREFIX:i (try) on l at once. */
static void lock_n(dlock_loop *l, const dlock_client *c, burst *b,
                   const char *prefix, int n)
{
    dlock_loop_acquire o;
    int i;
    memset(b, 0, sizeof *b);
    b->want = n;
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = 0;
    o.lease_ms = 60000;
    for (i = 0; i < n; i++) {
        char name[64];
        dlock_op *op;
        snprintf(name, sizeof name, "%s:%d", prefix, i);
        assert_int_equal(dlock_loop_lock(&op, l, name, &o, count, b), 0);
    }
}

/* Start locking INFLIGHT distinct names PREFIX:i (try) on l at once. */
static void lock_all(dlock_loop *l, const dlock_client *c, burst *b,
                     const char *prefix)
{
    lock_n(l, c, b, prefix, INFLIGHT);
}

/* Run l until mark of b's operations completed (0: all). */
static void run_to(dlock_loop *l, burst *b, int mark)
{
    b->mark = mark;
    b->flag = b->done >= (mark > 0 ? mark : b->want);
    assert_int_equal(th_loop_run(&l, 1, &b->flag), 0);
}

/* Release the holds of b at once: as many must succeed (the number, or
 * -1 to only count them). */
static void release_all(dlock_loop *l, burst *b, int want_ok)
{
    int i, n = b->ok;
    dlock_hold *holds[INFLIGHT];
    memcpy(holds, b->holds, (size_t)n * sizeof *holds);
    b->done = b->ok = b->flag = b->mark = 0;
    b->want = n;
    for (i = 0; i < n; i++) {
        dlock_op *op;
        assert_int_equal(dlock_loop_release(&op, l, holds[i], count, b), 0);
    }
    if (n > 0)
        run_to(l, b, 0);
    if (want_ok >= 0)
        assert_int_equal(b->ok, want_ok);
}

/* Lock INFLIGHT distinct names (try) on l at once, then release them all
 * at once; every one must succeed. */
static void burst_run(dlock_loop *l, const dlock_client *c, const char *prefix)
{
    static burst b;
    int64_t t0 = th_now_ms();
    lock_all(l, c, &b, prefix);
    run_to(l, &b, 0);
    assert_int_equal(b.ok, INFLIGHT);
    release_all(l, &b, INFLIGHT);
    /* Not a check (machines are noisy): what the run took. */
    fprintf(stderr, "loop_lanes: %s: %d locks + releases in %lld ms\n", prefix,
            INFLIGHT, (long long)(th_now_ms() - t0));
}

/* How many of the servers hold the lock NAME. */
static int holders(const char *name)
{
    int i, n = 0;
    for (i = 0; i < FIXTURE_NS; i++)
        n += th_cmd_int(&srv[i], "EXISTS dlock:{%s}", name) == 1;
    return n;
}

/* Every hold of b is held on a majority of the servers. A grant needs a
 * majority's answers only: the request to the last server may still be
 * on its way (in the loop's output, or a NOSCRIPT answer to resend with
 * the source), so l is driven while a name is not there yet, for 10 s
 * at most (a bound for a hang, not a measure of speed). */
static void all_held(dlock_loop *l, const burst *b)
{
    int64_t until = th_now_ms() + 10000;
    int i;
    for (i = 0; i < b->ok; i++) {
        const char *name = dlock_hold_name(b->holds[i]);
        while (holders(name) < 2 && th_now_ms() < until) {
            struct pollfd p = {dlock_loop_fd(l), POLLIN, 0};
            poll(&p, 1, 10);
            assert_int_equal(dlock_loop_process(l), 0);
        }
        assert_true(holders(name) >= 2);
    }
}

/* A Redlock client of the fixture's servers with the command and
 * connect timeouts cmd_ms, conn_ms (0: the default), and a loop of it. */
static dlock_client *redlock_client_t(dlock_loop **l, int64_t cmd_ms,
                                      int64_t conn_ms)
{
    const char *urls[FIXTURE_NS];
    dlock_client *c;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, cmd_ms, conn_ms);
    assert_non_null(c);
    *l = th_loop_new(c);
    assert_non_null(*l);
    return c;
}

/* The same with a 5 s command timeout. */
static dlock_client *redlock_client(dlock_loop **l)
{
    return redlock_client_t(l, 5000, 0);
}

/* The loop's connections to two servers killed (CLIENT KILL) with every
 * lock out on them (held there by CLIENT PAUSE WRITE: none can reach a
 * majority meanwhile): each call is retried on a new connection; every
 * lock completes, and each one held is held on a majority. */
static void test_lane_killed(void **state)
{
    static burst b;
    dlock_loop *l;
    dlock_client *c = redlock_client(&l);
    long long before = accepted(&srv[0]);
    int i;
    (void)state;
    for (i = 0; i < 2; i++)
        freeReplyObject(th_cmd(&srv[i], "CLIENT PAUSE 3000 WRITE"));
    lock_all(l, c, &b, "lanes:kill");
    th_loop_run_for(&l, 1, 200); /* the requests written */
    assert_int_equal(b.done, 0);
    for (i = 0; i < 2; i++) {
        freeReplyObject(th_cmd(&srv[i], "CLIENT KILL TYPE normal SKIPME yes"));
        freeReplyObject(th_cmd(&srv[i], "CLIENT UNPAUSE"));
    }
    run_to(l, &b, 0);
    fprintf(stderr, "loop_lanes: killed lanes: %d of %d locked\n", b.ok,
            b.done);
    /* The lane to server 0 was opened again (INFO's, PAUSE's, KILL's and
     * UNPAUSE's connections taken off). */
    assert_true(accepted(&srv[0]) - before - 4 >= 2);
    assert_int_equal(b.ok, INFLIGHT);
    all_held(l, &b);
    release_all(l, &b, b.ok);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The calls of INFO commandstats' cmdstat_eval on s (0: none yet). */
static long long eval_calls(const th_server *s)
{
    return info_num(s, "commandstats", "cmdstat_eval:calls=", 0);
}

/* EVALs each server ran since evals[] was read (the most of them), and
 * evals[] read again. */
static long long evals_since(long long *evals)
{
    long long most = 0;
    int i;
    for (i = 0; i < FIXTURE_NS; i++) {
        long long n = eval_calls(&srv[i]);
        if (n - evals[i] > most)
            most = n - evals[i];
        evals[i] = n;
    }
    return most;
}

/* The script cache flushed on every server with calls out by SHA: their
 * NOSCRIPT answers come back mid-pipeline, each resent on the same
 * connection: every lock and release succeeds. The source goes once per
 * script and connection, the other calls by SHA behind it (counted by
 * the servers: EVAL runs); it went with each of the 1,000 calls before
 * (io/pipe.c's dlock__pipe_noscript). */
static void test_noscript_pipelined(void **state)
{
    static burst b;
    dlock_loop *l;
    dlock_client *c = redlock_client(&l);
    long long evals[FIXTURE_NS], most;
    int i;
    (void)state;
    burst_run(l, c, "lanes:warm"); /* the scripts cached, known so */
    lock_all(l, c, &b, "lanes:ns");
    for (i = 0; i < FIXTURE_NS; i++)
        freeReplyObject(th_cmd(&srv[i], "SCRIPT FLUSH"));
    (void)evals_since(evals);
    run_to(l, &b, 0);
    assert_int_equal(b.ok, INFLIGHT);
    most = evals_since(evals);
    fprintf(stderr, "loop_lanes: %lld EVAL on a server for %d locks\n", most,
            INFLIGHT);
    assert_true(most <= 10);
    all_held(l, &b);
    for (i = 0; i < FIXTURE_NS; i++)
        freeReplyObject(th_cmd(&srv[i], "SCRIPT FLUSH"));
    (void)evals_since(evals);
    release_all(l, &b, INFLIGHT);
    most = evals_since(evals);
    fprintf(stderr, "loop_lanes: %lld EVAL on a server for %d releases\n", most,
            INFLIGHT);
    assert_true(most <= 10);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A server killed (kill -9) with calls out on it: every lock completes
 * (at the majority left), each one held is held there; the releases
 * succeed at the majority. */
static void test_server_killed(void **state)
{
    static burst b;
    dlock_loop *l;
    dlock_client *c = redlock_client(&l);
    (void)state;
    lock_all(l, c, &b, "lanes:k9");
    run_to(l, &b, INFLIGHT / 10);
    th_server_kill9(&srv[2]);
    run_to(l, &b, 0);
    fprintf(stderr, "loop_lanes: server killed: %d of %d locked\n", b.ok,
            b.done);
    assert_true(b.ok > 0);
    all_held(l, &b);
    release_all(l, &b, b.ok);
    assert_int_equal(th_server_restart(&srv[2]), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The calls of INFO commandstats' cmdstat_evalsha on s (0: none yet). */
static long long evalsha_calls(const th_server *s)
{
    return info_num(s, "commandstats", "cmdstat_evalsha:calls=", 0);
}

/* A server that stops answering without closing (SIGSTOP) under a Redlock
 * loop that goes on locking and releasing at the majority left: its lane
 * goes quiet once a request given up on stays unanswered for twice its
 * call's time, so what the loop writes there stops growing (the calls
 * that come later fail at once there). When the server resumes it runs
 * only what was written before (counted by its INFO commandstats, not by
 * time), and the loop uses it again. It failed before the quiet rule
 * (lanes.c): every request of the stop, 18,700, ran after it. */
static void test_silent_server(void **state)
{
    static burst b;
    dlock_loop *l;
    dlock_client *c = redlock_client_t(&l, 200, 200);
    long long before, ran, last;
    int64_t t0;
    int ops = 0, same = 0;
    (void)state;
    lock_n(l, c, &b, "lanes:quiet", 50); /* the lanes open, scripts known */
    run_to(l, &b, 0);
    assert_int_equal(b.ok, 50);
    release_all(l, &b, 50);
    before = evalsha_calls(&srv[2]);
    th_server_pause(&srv[2]);
    t0 = th_now_ms();
    /* Rounds for 15 x the command timeout: the lane is given up on after
     * about 2 x, so most of the rounds come after it. */
    while (th_now_ms() - t0 < 3000) {
        lock_n(l, c, &b, "lanes:quiet", 50);
        run_to(l, &b, 0);
        assert_int_equal(b.ok, 50); /* at the majority left */
        release_all(l, &b, 50);
        ops += 100;
    }
    th_server_resume(&srv[2]);
    /* The loop uses the server again once its answers come: a lock
     * there too (the first ones may still find the lane quiet). */
    for (t0 = th_now_ms();; th_sleep_ms(50)) {
        int there;
        assert_true(th_now_ms() - t0 < 20000);
        lock_n(l, c, &b, "lanes:back", 1);
        run_to(l, &b, 0);
        assert_int_equal(b.ok, 1);
        th_loop_run_for(&l, 1, 100);
        there = th_cmd_int(&srv[2], "EXISTS dlock:{lanes:back:0}") == 1;
        release_all(l, &b, 1);
        if (there)
            break;
    }
    /* What the server ran once resumed: wait until it stops growing. */
    for (last = -1; same < 5; th_loop_run_for(&l, 1, 100)) {
        ran = evalsha_calls(&srv[2]) - before;
        same = ran == last ? same + 1 : 0;
        last = ran;
    }
    fprintf(stderr,
            "loop_lanes: silent server: %d operations while stopped, it "
            "ran %lld scripts after\n",
            ops, ran);
    assert_true(ran < ops / 2);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A Redlock loop: at most MAX_CONNS connections opened to each server
 * for 1,000 locks and 1,000 releases in flight at once. */
static void test_redlock_bounded(void **state)
{
    long long before[FIXTURE_NS];
    dlock_loop *l;
    dlock_client *c = redlock_client(&l);
    long long worst = 0;
    int i;
    (void)state;
    for (i = 0; i < FIXTURE_NS; i++)
        before[i] = accepted(&srv[i]);
    burst_run(l, c, "lanes:rl");
    for (i = 0; i < FIXTURE_NS; i++) {
        long long n = accepted(&srv[i]) - before[i] - 1; /* INFO's */
        fprintf(stderr, "loop_lanes: redlock server %d: %lld connections\n", i,
                n);
        worst = n > worst ? n : worst;
    }
    assert_true(worst <= MAX_CONNS);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A Cluster loop: the same bound on every node. */
static void test_cluster_bounded(void **state)
{
    static th_cluster cl;
    static burst b;
    long long before[TH_CLUSTER_NODES];
    char url[1024];
    dlock_client *c;
    dlock_loop *l;
    long long worst = 0;
    int i;
    (void)state;
    assert_int_equal(th_cluster_start(&cl), 0);
    th_cluster_url(&cl, 0, 1, url, sizeof url);
    c = th_client((const char *[]){url}, 1, DLOCK_WAIT_NOTIFY, 5000, 0);
    assert_non_null(c);
    l = th_loop_new(c);
    assert_non_null(l);
    for (i = 0; i < TH_CLUSTER_NODES; i++)
        before[i] = accepted(&cl.nodes[i]);
    burst_run(l, c, "lanes:cl");
    for (i = 0; i < TH_CLUSTER_NODES; i++) {
        long long n = accepted(&cl.nodes[i]) - before[i] - 1;
        fprintf(stderr, "loop_lanes: cluster node %d: %lld connections\n", i,
                n);
        worst = n > worst ? n : worst;
    }
    assert_true(worst <= MAX_CONNS);
    /* The masters drop the loop's connections mid-burst: every lock
     * completes, each one held is in its master. */
    lock_all(l, c, &b, "lanes:clk");
    run_to(l, &b, INFLIGHT / 10);
    for (i = 0; i < TH_CLUSTER_NODES; i++)
        freeReplyObject(
            th_cmd(&cl.nodes[i], "CLIENT KILL TYPE normal SKIPME yes"));
    run_to(l, &b, 0);
    fprintf(stderr, "loop_lanes: cluster, killed lanes: %d of %d locked\n",
            b.ok, b.done);
    assert_true(b.ok > 0);
    for (i = 0; i < b.ok; i++) {
        char key[96];
        snprintf(key, sizeof key, "dlock:{%s}", dlock_hold_name(b.holds[i]));
        assert_int_equal(
            th_cmd_int(th_cluster_lock_master(&cl, dlock_hold_name(b.holds[i])),
                       "EXISTS %s", key),
            1);
    }
    release_all(l, &b, b.ok);
    dlock_loop_free(l);
    dlock_client_free(c);
    th_cluster_stop(&cl);
}

/* The first lane of a loop taken from the pool (the client's blocking
 * calls left connections there) is written outside dlock_loop_process:
 * the loop's fd must become readable when its answer comes (before, the
 * new lane's descriptor was in the epoll set only after the next process,
 * which then came at the command timeout). A liveness check: the command
 * timeout is far longer than the wait allowed. */
static void test_pooled_first(void **state)
{
    const char *urls[FIXTURE_NS];
    dlock_client *c;
    dlock_lock *lk;
    dlock_loop *l;
    dlock_loop_acquire o;
    burst b;
    struct pollfd p;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, 60000, 0);
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&lk, c, "lanes:pool", 0, 10000), 0);
    assert_int_equal(dlock_lock_release(lk), 0);
    l = th_loop_new(c);
    assert_non_null(l);
    memset(&b, 0, sizeof b);
    b.want = 1;
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = 0;
    assert_int_equal(dlock_loop_lock(NULL, l, "lanes:pool2", &o, count, &b), 0);
    p = (struct pollfd){.fd = dlock_loop_fd(l), .events = POLLIN};
    while (b.done == 0) {
        assert_int_equal(poll(&p, 1, 20000), 1); /* not the 60 s timeout */
        assert_int_equal(dlock_loop_process(l), 0);
    }
    assert_int_equal(b.ok, 1);
    release_all(l, &b, 1);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redlock_bounded),
        cmocka_unit_test(test_cluster_bounded),
        cmocka_unit_test(test_lane_killed),
        cmocka_unit_test(test_noscript_pipelined),
        cmocka_unit_test(test_server_killed),
        cmocka_unit_test(test_pooled_first),
        cmocka_unit_test(test_silent_server),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
