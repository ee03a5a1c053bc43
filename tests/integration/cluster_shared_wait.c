/*
 * cluster_shared_wait.c - wait_replicas (WAIT) for semaphore permits and
 * readers on a real Redis Cluster (six nodes, three masters with a
 * replica each, tests/harness/topology.h), where WAIT goes to the master
 * serving the name's slot and counts that master's replica.
 *
 * With wait_replicas 1 and the replica of one master SIGSTOPped: a permit
 * and a reader of a name that master serves are refused with
 * DLOCK_NOT_REPLICATED (a try and a waiting acquire) and nothing is left
 * held there; a permit handed over (FIFO) by a release to a queued waiter
 * is not returned to it (NOT_REPLICATED, given back); names another
 * master serves are granted meanwhile. With the replica running again,
 * all are granted and are on the replica when the acquire returns.
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
#include "topology.h"

static th_cluster cl;
static char url[1024];

/* WAIT's timeout: each refusal while the replica is stopped costs it. */
#define WAIT_MS 300

/* Bounded waits (liveness, not timing). */
#define LIVE_MS 20000

static int setup(void **state)
{
    (void)state;
    if (th_cluster_start(&cl) != 0)
        return -1;
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d",
             cl.nodes[0].port, cl.nodes[1].port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_cluster_stop(&cl);
    return 0;
}

/* A cluster client with wait_replicas 1 (the default fair waiting). */
static dlock_client *wclient(void)
{
    dlock_options o;
    dlock_client *c = NULL;
    const char *urls[1] = {url};
    char err[256];
    dlock_options_init(&o);
    o.servers = urls;
    o.nservers = 1;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 2000;
    o.wait_replicas = 1;
    o.wait_replicas_timeout_ms = WAIT_MS;
    if (dlock_client_new(&c, &o, err, sizeof err) != DLOCK_OK)
        print_error("client: %s\n", err);
    assert_non_null(c);
    return c;
}

/* A name (prefix-N) whose key the master on port serves (want 1), or
 * another master serves (want 0). */
static void name_at(char *buf, size_t len, const char *prefix, int port,
                    int want)
{
    int i;
    for (i = 0; i < 1000; i++) {
        char key[96];
        snprintf(buf, len, "%s-%d", prefix, i);
        snprintf(key, sizeof key, "dlock:{%s}", buf);
        if ((th_cluster_key_port(&cl, key, strlen(key)) == port) == want)
            return;
    }
    fail_msg("no name for port %d", port);
}

/* A permit of semaphore name (limit 1) or a reader of lock name (rw). */
static int take(dlock_client *c, const char *name, int rw, int64_t wait_ms,
                dlock_lock **l)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = 10000;
    *l = NULL;
    return rw ? dlock_rw_acquire_shared(l, c, name, 0, &o)
              : dlock_sem_acquire(l, c, name, 1, &o);
}

/* Live permits (rw 0) or readers (rw 1) of name on node s: ZCOUNT of
 * the deadlines ahead of s's clock, on a connection that sent READONLY
 * first (a replica then serves reads of its master's slots; what a master
 * answers to it is ignored). */
static long long held_on(const th_server *s, const char *name, int rw)
{
    redisContext *ctx = redisConnect("127.0.0.1", s->port);
    redisReply *r;
    long long now, n = -1;
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    r = redisCommand(ctx, "READONLY"); /* an error on a master: ignored */
    if (r != NULL)
        freeReplyObject(r);
    r = redisCommand(ctx, "TIME");
    assert_non_null(r);
    now = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    r = redisCommand(ctx,
                     rw ? "ZCOUNT dlock:{%s}:r %lld +inf"
                        : "ZCOUNT dlock:{%s} %lld +inf",
                     name, now);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        n = r->integer;
    else if (r != NULL)
        print_error("ZCOUNT on %d: %s\n", s->port,
                    r->type == REDIS_REPLY_ERROR ? r->str : "?");
    if (r != NULL)
        freeReplyObject(r);
    redisFree(ctx);
    return n;
}

static void expect_not_replicated(dlock_client *c, int rc, dlock_lock *l,
                                  const char *what)
{
    if (rc != DLOCK_NOT_REPLICATED)
        print_error("%s: expected NOT_REPLICATED, got %s: %s\n", what,
                    dlock_status_name(rc), dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_NOT_REPLICATED);
    assert_null(l);
}

/* A waiter on its own thread and client. */
typedef struct waiter {
    dlock_client *c;
    const char *name;
    dlock_lock *l;
    int rc;
} waiter;

static void *wait_permit(void *p)
{
    waiter *w = p;
    w->rc = take(w->c, w->name, 0, LIVE_MS, &w->l);
    return NULL;
}

static void test_cluster_shared_wait(void **state)
{
    dlock_client *c = wclient();
    waiter w = {.c = wclient()};
    char sem[64], rw[64], hand[64], other[64], qkey[96];
    th_server *m, *r;
    dlock_lock *l, *h;
    pthread_t t;
    int port, k, rc;
    int64_t end;
    (void)state;
    port = th_cluster_slot_port(&cl, 0);
    m = th_cluster_node(&cl, port);
    r = th_cluster_node(&cl, th_cluster_replica_port(&cl, port));
    assert_non_null(m);
    assert_non_null(r);
    name_at(sem, sizeof sem, "csw-sem", port, 1);
    name_at(rw, sizeof rw, "csw-rw", port, 1);
    name_at(hand, sizeof hand, "csw-hand", port, 1);
    name_at(other, sizeof other, "csw-other", port, 0);

    /* A holder, and a FIFO waiter queued behind it, before the stall. */
    assert_int_equal(take(c, hand, 0, 0, &h), DLOCK_OK);
    w.name = hand;
    assert_int_equal(pthread_create(&t, NULL, wait_permit, &w), 0);
    snprintf(qkey, sizeof qkey, "LLEN dlock:{%s}:q", hand);
    end = th_now_ms() + LIVE_MS;
    while (th_cmd_int(m, qkey) < 1 && th_now_ms() < end)
        th_sleep_ms(20);
    assert_int_equal(th_cmd_int(m, qkey), 1);

    th_server_pause(r);
    for (k = 0; k < 4; k++) { /* permit, reader; a try, then waiting */
        const char *name = k & 1 ? rw : sem;
        rc = take(c, name, k & 1, k < 2 ? 0 : 5000, &l);
        expect_not_replicated(c, rc, l, name);
        assert_int_equal(held_on(m, name, k & 1), 0);
    }
    /* Another master's replica acknowledges. */
    assert_int_equal(take(c, other, 0, 0, &l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    /* The release hands the permit to the waiter: it does not count. */
    assert_int_equal(dlock_lock_release(h), DLOCK_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    expect_not_replicated(w.c, w.rc, w.l, "handed permit");
    assert_int_equal(held_on(m, hand, 0), 0);
    th_server_resume(r);

    for (k = 0; k < 3; k++) {
        const char *name = k == 1 ? rw : k == 2 ? hand : sem;
        assert_int_equal(take(c, name, k == 1, 5000, &l), DLOCK_OK);
        assert_int_equal(held_on(r, name, k == 1), 1);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(w.c);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_shared_wait),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
