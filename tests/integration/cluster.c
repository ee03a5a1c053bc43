/*
 * cluster.c - the library against a real Redis Cluster (issue 17): six
 * nodes, three masters with a replica each (tests/harness/topology.h).
 *
 * Locks land on the master serving their slot; mutual exclusion holds for
 * threads on one key and for processes on many keys across slots (a
 * non-atomic read-modify-write under the lock loses no update), also while
 * a CLUSTER FAILOVER swaps a master and its replica; 200 watchdog locks in
 * many slots are renewed for several periods without a loss (one renewal
 * call per slot: one call across slots would be CROSSSLOT); waiters are
 * woken by sharded pub/sub (notify) and handed the lock (fair); a lock
 * held while its slot migrates keeps being renewed (ASK while the slot is
 * half moved, MOVED after) and is released at its new master, waiting out
 * TRYAGAIN. Bad states: a seed that is not in cluster mode, a redis:// URL
 * at a cluster node, and a cluster that is down (CLUSTERDOWN) each give a
 * clear status and message in bounded time. Tests run in order on one
 * cluster; the last one takes a shard down.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "th_cluster.h"
#include "th_waiter.h"
#include "topology.h"

static th_cluster cl;
static char url[1024]; /* redis+cluster://127.0.0.1:P1,127.0.0.1:P2 */
static pid_t main_pid;

static int setup(void **state)
{
    (void)state;
    main_pid = getpid();
    if (th_cluster_start(&cl) != 0)
        return -1;
    /* Two seeds: the first a replica, so the map must come from what a
     * node says, not from the seed being a master. */
    th_cluster_url(&cl, 5, 0, url, sizeof url);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_cluster_stop(&cl);
    return 0;
}

/* A client of the cluster (cmd_timeout_ms 0: the default). */
static dlock_client *cclient(int strategy, int64_t cmd_timeout_ms)
{
    const char *u = url;
    dlock_client *c = th_client(&u, 1, strategy, cmd_timeout_ms, 0);
    if (c == NULL && getpid() != main_pid)
        _exit(9); /* a forked child must not longjmp into cmocka */
    assert_non_null(c);
    return c;
}

/* The master serving key now. */
static th_server *owner_of(const char *key)
{
    int port = th_cluster_key_port(&cl, key, strlen(key));
    return port > 0 ? th_cluster_node(&cl, port) : NULL;
}

/* Increment the integer at key without any lock, slowly (GET, 200 us,
 * SET), on whichever master serves it now; redone from the GET when the
 * cluster moved it meanwhile (the caller holds the lock, so redoing is
 * safe). 0 or -1. */
static int cl_rmw(const char *key, int slot)
{
    int tries;
    for (tries = 0; tries < 100; tries++) {
        th_server *s = th_cluster_node(&cl, th_cluster_slot_port(&cl, slot));
        redisReply *r;
        long long v = 0;
        int bad;
        if (s == NULL || (r = th_cmd(s, "GET %s", key)) == NULL) {
            th_sleep_ms(20);
            continue;
        }
        bad = r->type == REDIS_REPLY_ERROR;
        if (r->type == REDIS_REPLY_STRING)
            v = atoll(r->str);
        freeReplyObject(r);
        if (bad) {
            th_sleep_ms(20);
            continue;
        }
        usleep(200);
        r = th_cmd(s, "SET %s %lld", key, v + 1);
        if (r == NULL)
            continue;
        bad = r->type == REDIS_REPLY_ERROR;
        freeReplyObject(r);
        if (!bad)
            return 0;
    }
    return -1;
}

/* The integer at key on its master (0 when missing). */
static long long cl_get(const char *key)
{
    th_server *s = owner_of(key);
    redisReply *r;
    long long v = 0;
    assert_non_null(s);
    r = th_cmd(s, "GET %s", key);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    freeReplyObject(r);
    return v;
}

/* ---- bad input and bad states ------------------------------------------- */

/* A seed that is a plain Redis: EINVAL, said so, and no hang. */
static void test_seed_not_cluster(void **state)
{
    th_server plain;
    char u[128];
    const char *up = u;
    dlock_client *c;
    dlock_lock *l = NULL;
    int rc;
    (void)state;
    assert_int_equal(th_server_start(&plain, NULL), 0);
    snprintf(u, sizeof u, "redis+cluster://127.0.0.1:%d", plain.port);
    c = th_client(&up, 1, DLOCK_WAIT_NOTIFY, 1000, 1000);
    assert_non_null(c);
    rc = dlock_lock_acquire(&l, c, "c-plain", 0, 5000);
    assert_int_equal(rc, DLOCK_EINVAL);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(c), "not in cluster mode"));
    dlock_client_free(c);
    th_server_stop(&plain);
}

/* A redis:// URL naming a cluster node: a key served elsewhere is
 * answered MOVED, which says "use redis+cluster://" (EINVAL); `dlock
 * status`'s check says it too. */
static void test_plain_url_at_cluster_node(void **state)
{
    th_server *m = owner_of("x");
    const char *up;
    char buf[2048];
    dlock_client *c;
    dlock_lock *l = NULL;
    char name[32];
    int i, rc = DLOCK_OK;
    (void)state;
    assert_non_null(m);
    up = m->url;
    c = th_client(&up, 1, DLOCK_WAIT_NOTIFY, 0, 0);
    assert_non_null(c);
    /* Find a name whose slot another master serves. */
    for (i = 0; i < 100; i++) {
        char key[48];
        snprintf(name, sizeof name, "c-plain-%d", i);
        snprintf(key, sizeof key, "dlock:{%s}", name);
        if (owner_of(key) != m)
            break;
    }
    rc = dlock_lock_acquire(&l, c, name, 0, 5000);
    assert_int_equal(rc, DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "use redis+cluster://"));
    assert_true(dlock_client_check(c, buf, sizeof buf) >= 1);
    assert_non_null(strstr(buf, "this is a Redis Cluster node"));
    dlock_client_free(c);
}

/* ---- routing ------------------------------------------------------------ */

/* 60 names over many slots: each lock key is on the master serving its
 * slot while held, and nowhere after release. */
static void test_route_by_slot(void **state)
{
    dlock_client *c = cclient(DLOCK_WAIT_NOTIFY, 0);
    int i;
    (void)state;
    for (i = 0; i < 60; i++) {
        char name[32], key[48];
        dlock_lock *l = NULL;
        th_server *m;
        snprintf(name, sizeof name, "c-route-%d", i);
        snprintf(key, sizeof key, "dlock:{%s}", name);
        assert_int_equal(dlock_lock_acquire(&l, c, name, 0, 10000), DLOCK_OK);
        m = owner_of(key);
        assert_non_null(m);
        assert_int_equal(
            th_cmd_int(m, "HEXISTS %s %s", key, dlock_lock_owner(l)), 1);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        assert_int_equal(th_cmd_int(m, "EXISTS %s", key), 0);
    }
    dlock_client_free(c);
}

/* A fenced get is a plain HMGET routed by its key's slot, as the fenced
 * set's script: keys on every master read back what was written. */
static void test_fenced_get_routed(void **state)
{
    dlock_client *c = cclient(DLOCK_WAIT_NOTIFY, 0);
    int i;
    (void)state;
    for (i = 0; i < 30; i++) {
        char key[32], val[32], *v = NULL;
        size_t len = 0;
        uint64_t fence = 0;
        snprintf(key, sizeof key, "c-fg-%d", i);
        snprintf(val, sizeof val, "v%d", i);
        assert_int_equal(dlock_fenced_set(c, key, 10 + i, val, strlen(val)),
                         DLOCK_OK);
        assert_int_equal(dlock_fenced_get(c, key, &v, &len, &fence), DLOCK_OK);
        assert_non_null(v);
        assert_string_equal(v, val);
        assert_int_equal(fence, 10 + i);
        free(v);
    }
    dlock_client_free(c);
}

/* ---- mutual exclusion --------------------------------------------------- */

typedef struct worker {
    dlock_client *c;
    const char *name; /* NULL: the names of keys[] in turn */
    int iters;
    int failures;
    pthread_t t;
} worker;

#define NKEYS 6
static const char *const names[NKEYS] = {"c-mx-a", "c-mx-b", "c-mx-c",
                                         "c-mx-d", "c-mx-e", "c-mx-f"};
static int key_slot[NKEYS];
static int one_slot;
static _Atomic int stop_workers;

/* The counter key of lock name i: in the lock's slot. */
static void counter_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "{%s}:n", name);
}

/* iters times: acquire, read-modify-write, release. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    int i;
    for (i = 0; i < w->iters || (w->iters < 0 && !atomic_load(&stop_workers));
         i++) {
        int k = w->name != NULL ? -1 : i % NKEYS;
        const char *name = k < 0 ? w->name : names[k];
        char key[64];
        dlock_lock *l = NULL;
        int rc = dlock_lock_acquire(&l, w->c, name, 30000, 10000);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "acquire %s: %s (%s)\n", name, dlock_strerror(rc),
                    dlock_errmsg(w->c));
            w->failures++;
            continue;
        }
        counter_key(key, sizeof key, name);
        if (cl_rmw(key, k < 0 ? one_slot : key_slot[k]) != 0)
            w->failures++;
        rc = dlock_lock_release(l);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "release %s: %s (%s)\n", name, dlock_strerror(rc),
                    dlock_errmsg(w->c));
            w->failures++;
        }
    }
    if (w->iters < 0)
        w->iters = i;
    return NULL;
}

static void slots_init(void)
{
    char key[64];
    int k;
    for (k = 0; k < NKEYS; k++) {
        counter_key(key, sizeof key, names[k]);
        key_slot[k] = th_cluster_keyslot(&cl, key, strlen(key));
        assert_true(key_slot[k] >= 0);
    }
}

/* 4 threads of one client on one key: no lost update. */
static void test_mutex_threads_one_key(void **state)
{
    dlock_client *c = cclient(DLOCK_WAIT_NOTIFY, 0);
    worker w[4];
    char key[64];
    int i, failures = 0;
    (void)state;
    counter_key(key, sizeof key, "c-one");
    one_slot = th_cluster_keyslot(&cl, key, strlen(key));
    for (i = 0; i < 4; i++) {
        w[i] = (worker){c, "c-one", 40, 0, 0};
        assert_int_equal(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(w[i].t, NULL);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    assert_int_equal(cl_get(key), 160);
    dlock_client_free(c);
}

/* 4 processes, each over 6 keys in different slots: no lost update. */
static void test_mutex_processes_many_keys(void **state)
{
    pid_t p[4];
    int i, k, bad = 0, st;
    (void)state;
    slots_init();
    for (i = 0; i < 4; i++) {
        p[i] = fork();
        assert_true(p[i] >= 0);
        if (p[i] == 0) {
            dlock_client *c = cclient(DLOCK_WAIT_NOTIFY, 0);
            worker w = {c, NULL, 60, 0, 0};
            worker_main(&w);
            dlock_client_free(c);
            _exit(w.failures != 0);
        }
    }
    for (i = 0; i < 4; i++)
        if (waitpid(p[i], &st, 0) != p[i] || !WIFEXITED(st) ||
            WEXITSTATUS(st) != 0)
            bad++;
    assert_int_equal(bad, 0);
    for (k = 0; k < NKEYS; k++) {
        char key[64];
        counter_key(key, sizeof key, names[k]);
        assert_int_equal(cl_get(key), 4 * 60 / NKEYS);
    }
}

/* ---- renewal ------------------------------------------------------------ */

#define NRENEW 200

/* 200 watchdog locks with a 900 ms lease over many slots, held for
 * about ten renewal periods: none lost, each still on its master. */
static void test_renew_many_slots(void **state)
{
    dlock_client *c = cclient(DLOCK_WAIT_NOTIFY, 0);
    static dlock_lock *ls[NRENEW];
    dlock_acquire_options o;
    dlock_stats st;
    int i, lost = 0;
    (void)state;
    dlock_acquire_options_init(&o);
    o.lease_ms = 900;
    o.watchdog = 1;
    for (i = 0; i < NRENEW; i++) {
        char name[32];
        snprintf(name, sizeof name, "c-renew-%d", i);
        assert_int_equal(dlock_lock_acquire_ex(&ls[i], c, name, &o), DLOCK_OK);
    }
    th_sleep_ms(3000);
    for (i = 0; i < NRENEW; i++)
        if (dlock_lock_status(ls[i]) != DLOCK_OK)
            lost++;
    dlock_client_stats(c, &st);
    fprintf(stderr, "renewals %llu, lost %llu\n",
            (unsigned long long)st.renewals, (unsigned long long)st.lost);
    assert_int_equal(lost, 0);
    assert_int_equal(st.lost, 0);
    /* 3 s is 10 periods of 300 ms: at least several renewals each. */
    assert_true(st.renewals >= (uint64_t)NRENEW * 5);
    for (i = 0; i < NRENEW; i++) {
        char key[48];
        th_server *m;
        snprintf(key, sizeof key, "dlock:{c-renew-%d}", i);
        m = owner_of(key);
        assert_non_null(m);
        assert_true(th_cmd_int(m, "PTTL %s", key) > 0);
        assert_int_equal(dlock_lock_release(ls[i]), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* ---- waiting ------------------------------------------------------------ */

/* A waiter thread that waits up to 20 s (lease 10 s) and keeps the lock
 * for the test (w.l). */
static void start_waiter(th_waiter *w, dlock_client *c, const char *name)
{
    *w = (th_waiter){.c = c,
                     .name = name,
                     .wait_ms = 20000,
                     .lease_ms = 10000,
                     .hold_ms = TH_WAITER_KEEP};
    assert_int_equal(th_waiter_start(w), 0);
}

/* A waiter gets the lock on release although the holder's lease (60 s)
 * is longer than its wait (20 s): only a release message can wake it in
 * time. strategy: notify (SPUBLISH of "r ID") or fair (the handoff). */
static void wakeup(int strategy, const char *name, dlock_layout layout)
{
    dlock_client *holder = cclient(DLOCK_WAIT_NOTIFY, 0);
    dlock_client *wc = cclient(strategy, 0);
    dlock_lock *l = NULL;
    th_waiter w;
    dlock_stats st;
    assert_int_equal(dlock_client_set_layout(holder, layout), DLOCK_OK);
    assert_int_equal(dlock_client_set_layout(wc, layout), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, holder, name, 0, 60000), DLOCK_OK);
    start_waiter(&w, wc, name);
    /* Until the waiter has gone to sleep (bounded). */
    for (int i = 0; i < 200; i++) {
        dlock_client_stats(wc, &st);
        if (st.waits > 0)
            break;
        th_sleep_ms(10);
    }
    th_sleep_ms(100);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_waiter_join(&w);
    if (w.rc != DLOCK_OK)
        fprintf(stderr, "waiter: %s\n", dlock_strerror(w.rc));
    assert_int_equal(w.rc, DLOCK_OK);
    /* Woken by the message (notify: a release; fair: the handoff), not
     * by its lease running out or a fair waiter's refresh finding it. */
    dlock_client_stats(wc, &st);
    assert_true(st.wakeups >= 1);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    dlock_client_free(holder);
    dlock_client_free(wc);
}

static void test_wakeup_notify(void **state)
{
    (void)state;
    wakeup(DLOCK_WAIT_NOTIFY, "c-wake", DLOCK_LAYOUT_HASH);
}

/* The string layout (issue 31) in a Cluster: its scripts name the queue
 * and the channels from the lock key (one slot), and announce with
 * SPUBLISH. */
static void test_wakeup_notify_string(void **state)
{
    (void)state;
    wakeup(DLOCK_WAIT_NOTIFY, "c-wake-s", DLOCK_LAYOUT_STRING);
}

static void test_wakeup_fair_string(void **state)
{
    (void)state;
    wakeup(DLOCK_WAIT_FAIR, "c-wake-fair-s", DLOCK_LAYOUT_STRING);
}

static void test_wakeup_fair(void **state)
{
    (void)state;
    wakeup(DLOCK_WAIT_FAIR, "c-wake-fair", DLOCK_LAYOUT_HASH);
}

/* ---- slot migration ----------------------------------------------------- */

/* A master other than port. */
static int other_master(int port)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (cl.nodes[i].pid != 0 && cl.nodes[i].port != port &&
            th_role(&cl.nodes[i], NULL) == 1)
            return cl.nodes[i].port;
    return -1;
}

typedef struct releaser {
    dlock_client *c;
    dlock_lock *l;
    int rc;
    pthread_t t;
} releaser;

static void *releaser_main(void *arg)
{
    releaser *r = arg;
    dlock_client *c = r->c;
    r->rc = dlock_lock_release(r->l);
    if (r->rc != DLOCK_OK)
        fprintf(stderr, "release mid-migration: %s (%s)\n",
                dlock_strerror(r->rc), dlock_errmsg(c));
    return NULL;
}

/* A watchdog lock (lease 900 ms) held while its slot migrates: renewed
 * through ASK while half moved (its keys already on the target), a second
 * client still finds it busy, a waiter subscribed before the move is
 * woken by the release at the new master, and the release started
 * mid-migration waits out TRYAGAIN and succeeds once the slot is moved;
 * after that MOVED routes every call. */
static void test_migrate_mid_hold(void **state)
{
    dlock_client *c = cclient(DLOCK_WAIT_NOTIFY, 5000);
    dlock_client *other = cclient(DLOCK_WAIT_NOTIFY, 0);
    const char *key = "dlock:{c-mig}";
    dlock_acquire_options o;
    dlock_lock *l = NULL, *l2 = NULL;
    th_migration m;
    releaser r;
    dlock_stats st0, st1;
    int slot = th_cluster_keyslot(&cl, key, strlen(key));
    int from = th_cluster_slot_port(&cl, slot), to = other_master(from);
    (void)state;
    dlock_acquire_options_init(&o);
    o.lease_ms = 900;
    o.watchdog = 1;
    assert_int_equal(dlock_lock_acquire_ex(&l, c, "c-mig", &o), DLOCK_OK);
    assert_int_equal(th_cluster_migrate_begin(&cl, slot, to, &m), 0);
    assert_true(th_cluster_migrate_keys(&cl, &m, 0) >= 2);
    {
        /* The source has no such key now: it answers ASK. */
        redisReply *a = th_cmd(th_cluster_node(&cl, from), "EXISTS %s", key);
        assert_non_null(a);
        assert_int_equal(a->type, REDIS_REPLY_ERROR);
        assert_true(strncmp(a->str, "ASK ", 4) == 0);
        freeReplyObject(a);
    }
    dlock_client_stats(c, &st0);
    th_sleep_ms(1500); /* five renewal periods, through ASK */
    dlock_client_stats(c, &st1);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_true(st1.renewals >= st0.renewals + 3);
    assert_int_equal(st1.lost, 0);
    assert_int_equal(dlock_lock_acquire(&l2, other, "c-mig", 0, 5000),
                     DLOCK_BUSY);
    /* The release starts while the slot is still migrating. */
    r = (releaser){c, l, -99, 0};
    assert_int_equal(pthread_create(&r.t, NULL, releaser_main, &r), 0);
    th_sleep_ms(200);
    assert_int_equal(th_cluster_migrate_finish(&cl, &m), 0);
    pthread_join(r.t, NULL);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(th_cmd_int(th_cluster_node(&cl, to), "EXISTS %s", key), 0);
    /* After the move: held, renewed and released at the new master. */
    assert_int_equal(dlock_lock_acquire_ex(&l, c, "c-mig", &o), DLOCK_OK);
    assert_int_equal(th_cmd_int(th_cluster_node(&cl, to), "HEXISTS %s %s", key,
                                dlock_lock_owner(l)),
                     1);
    th_sleep_ms(700);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* A waiter subscribed (SSUBSCRIBE at the old master) when the slot moves
 * is told by the old master (sunsubscribe), subscribes at the new one and
 * is woken there by the release: the holder's lease (60 s) is longer than
 * the wait (20 s). */
static void test_migrate_waiter(void **state)
{
    dlock_client *holder = cclient(DLOCK_WAIT_NOTIFY, 0);
    dlock_client *wc = cclient(DLOCK_WAIT_NOTIFY, 0);
    const char *key = "dlock:{c-migw}";
    int slot = th_cluster_keyslot(&cl, key, strlen(key));
    int from = th_cluster_slot_port(&cl, slot);
    dlock_lock *l = NULL;
    th_waiter w;
    dlock_stats st;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, holder, "c-migw", 0, 60000),
                     DLOCK_OK);
    start_waiter(&w, wc, "c-migw");
    for (int i = 0; i < 200; i++) {
        dlock_client_stats(wc, &st);
        if (st.waits > 0)
            break;
        th_sleep_ms(10);
    }
    assert_int_equal(th_cluster_migrate_slot(&cl, slot, other_master(from)), 0);
    th_sleep_ms(500); /* the waiter retries, sleeps, resubscribes */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(w.l), DLOCK_OK);
    dlock_client_free(holder);
    dlock_client_free(wc);
}

/* ---- failover ----------------------------------------------------------- */

/* Threads of two clients increment counters under locks on 6 keys while
 * CLUSTER FAILOVER swaps the master of the first key with its replica:
 * every acquire and release succeeds (MOVED is followed) and no update is
 * lost. */
static void test_failover_mid_run(void **state)
{
    dlock_client *c1 = cclient(DLOCK_WAIT_NOTIFY, 0);
    dlock_client *c2 = cclient(DLOCK_WAIT_NOTIFY, 0);
    long long before[NKEYS], total = 0, want = 0;
    char key[64];
    worker w[4];
    int i, k, failures = 0, master, replica;
    (void)state;
    slots_init();
    for (k = 0; k < NKEYS; k++) {
        counter_key(key, sizeof key, names[k]);
        before[k] = cl_get(key);
    }
    atomic_store(&stop_workers, 0);
    for (i = 0; i < 4; i++) {
        w[i] = (worker){i % 2 ? c2 : c1, NULL, -1, 0, 0};
        assert_int_equal(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
    }
    th_sleep_ms(300);
    counter_key(key, sizeof key, names[0]);
    master = th_cluster_slot_port(&cl, key_slot[0]);
    replica = th_cluster_replica_port(&cl, master);
    assert_int_equal(th_cluster_failover(&cl, replica), 0);
    assert_int_equal(th_cluster_slot_port(&cl, key_slot[0]), replica);
    th_sleep_ms(300);
    atomic_store(&stop_workers, 1);
    for (i = 0; i < 4; i++) {
        pthread_join(w[i].t, NULL);
        failures += w[i].failures;
        want += w[i].iters;
    }
    assert_int_equal(failures, 0);
    for (k = 0; k < NKEYS; k++) {
        counter_key(key, sizeof key, names[k]);
        total += cl_get(key) - before[k];
    }
    fprintf(stderr, "failover run: %lld increments\n", total);
    assert_int_equal(total, want);
    dlock_client_free(c1);
    dlock_client_free(c2);
}

/* ---- the cluster down --------------------------------------------------- */

/* A shard lost (its master and replica killed): the other masters answer
 * CLUSTERDOWN once they see it. An acquire then fails with ESERVER naming
 * CLUSTERDOWN within its command timeout, and no hang. Last: the cluster
 * stays down. */
static void test_clusterdown(void **state)
{
    dlock_client *c;
    dlock_lock *l = NULL;
    const char *name = "c-down";
    char key[48], st[32] = "";
    th_server *m, *dead, *dead_rep;
    int64_t t0;
    int i, rc, rport;
    (void)state;
    snprintf(key, sizeof key, "dlock:{%s}", name);
    m = owner_of(key);
    assert_non_null(m);
    /* Kill another shard: its master and replica. */
    dead = th_cluster_node(&cl, other_master(m->port));
    assert_non_null(dead);
    rport = th_cluster_replica_port(&cl, dead->port);
    dead_rep = th_cluster_node(&cl, rport);
    assert_non_null(dead_rep);
    th_server_kill9(dead_rep);
    th_server_kill9(dead);
    for (i = 0; i < 300; i++) {
        if (th_info_field(m, "CLUSTER INFO", "cluster_state", st, sizeof st) ==
                0 &&
            strcmp(st, "fail") == 0)
            break;
        th_sleep_ms(50);
    }
    assert_string_equal(st, "fail");
    c = cclient(DLOCK_WAIT_NOTIFY, 800);
    t0 = th_now_ms();
    rc = dlock_lock_acquire(&l, c, name, 0, 5000);
    fprintf(stderr, "cluster down: %s (%s) after %lld ms\n", dlock_strerror(rc),
            dlock_errmsg(c), (long long)(th_now_ms() - t0));
    assert_int_equal(rc, DLOCK_ESERVER);
    assert_non_null(strstr(dlock_errmsg(c), "CLUSTERDOWN"));
    /* Bounded by the command timeout, not a hang (liveness bound). */
    assert_true(th_now_ms() - t0 < 10000);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_not_cluster),
        cmocka_unit_test(test_plain_url_at_cluster_node),
        cmocka_unit_test(test_route_by_slot),
        cmocka_unit_test(test_fenced_get_routed),
        cmocka_unit_test(test_mutex_threads_one_key),
        cmocka_unit_test(test_mutex_processes_many_keys),
        cmocka_unit_test(test_renew_many_slots),
        cmocka_unit_test(test_wakeup_notify),
        cmocka_unit_test(test_wakeup_fair),
        cmocka_unit_test(test_wakeup_notify_string),
        cmocka_unit_test(test_wakeup_fair_string),
        cmocka_unit_test(test_migrate_mid_hold),
        cmocka_unit_test(test_migrate_waiter),
        cmocka_unit_test(test_failover_mid_run),
        cmocka_unit_test(test_clusterdown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
