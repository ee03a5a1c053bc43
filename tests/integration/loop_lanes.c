/*
 * loop_lanes.c - connections per server of an engine loop (issue 30:
 * "connections per server per loop bounded"): a Redlock loop (three
 * servers) and a Cluster loop with many operations in flight at once.
 * Counted by the servers (INFO stats' total_connections_received before
 * and after), not by time; every operation must complete with a status.
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
    int flag; /* set once done == want */
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
    if (++b->done == b->want)
        b->flag = 1;
}

/* INFO stats' total_connections_received of s. */
static long long accepted(const th_server *s)
{
    redisReply *r = th_cmd(s, "INFO stats");
    const char *p;
    long long n = -1;
    assert_non_null(r);
    p = strstr(r->str, "total_connections_received:");
    if (p != NULL)
        n = strtoll(p + strlen("total_connections_received:"), NULL, 10);
    freeReplyObject(r);
    return n;
}

/* Lock INFLIGHT distinct names (try) on l at once, then release them all
 * at once; every one must succeed. */
static void burst_run(dlock_loop *l, const dlock_client *c, const char *prefix)
{
    static burst b;
    dlock_loop_acquire o;
    int64_t t0 = th_now_ms();
    int i, n;
    memset(&b, 0, sizeof b);
    b.want = INFLIGHT;
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = 0;
    o.lease_ms = 60000;
    for (i = 0; i < INFLIGHT; i++) {
        char name[64];
        dlock_op *op;
        snprintf(name, sizeof name, "%s:%d", prefix, i);
        assert_int_equal(dlock_loop_lock(&op, l, name, &o, count, &b), 0);
    }
    assert_int_equal(th_loop_run(&l, 1, &b.flag), 0);
    assert_int_equal(b.ok, INFLIGHT);
    n = b.ok;
    b.done = b.ok = b.flag = 0;
    b.want = n;
    for (i = 0; i < n; i++) {
        dlock_op *op;
        assert_int_equal(dlock_loop_release(&op, l, b.holds[i], count, &b), 0);
    }
    assert_int_equal(th_loop_run(&l, 1, &b.flag), 0);
    assert_int_equal(b.ok, n);
    /* Not a check (machines are noisy): what the run took. */
    fprintf(stderr, "loop_lanes: %s: %d locks + releases in %lld ms\n", prefix,
            n, (long long)(th_now_ms() - t0));
}

/* A Redlock loop: at most MAX_CONNS connections opened to each server
 * for 1,000 locks and 1,000 releases in flight at once. */
static void test_redlock_bounded(void **state)
{
    const char *urls[FIXTURE_NS];
    long long before[FIXTURE_NS];
    dlock_client *c;
    dlock_loop *l;
    long long worst = 0;
    int i;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, 5000, 0);
    assert_non_null(c);
    l = th_loop_new(c);
    assert_non_null(l);
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
    dlock_loop_free(l);
    dlock_client_free(c);
    th_cluster_stop(&cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redlock_bounded),
        cmocka_unit_test(test_cluster_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
