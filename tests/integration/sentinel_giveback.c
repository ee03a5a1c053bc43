/*
 * sentinel_giveback.c - a give-back acts only on the grant of its own
 * attempt (issue 29, item 0), on a real Sentinel deployment (a master, 2
 * replicas, 3 sentinels: tests/harness/topology.h).
 *
 * (a) A waiting acquire whose master stops answering (SIGSTOP, shorter
 *     than the sentinels' down-after, so no failover) rides the outage
 *     out: its attempts time out and each leaves a give-back for what it
 *     may have taken, which the watchdog retries. Once the master answers
 *     again, a later attempt is granted. A give-back sent later still
 *     (as one retried through a failover is) must not release that grant:
 *     every give-back the master saw (MONITOR) is delivered again after
 *     the grant, exactly as it was sent, and the lock must still be the
 *     waiter's (its renewal succeeds, another client's try is refused).
 *     Before the fix every attempt of one acquire used the same owner id,
 *     and the replayed give-back deleted the lock: two holders. Run with
 *     the fair, notify and spin wait strategies.
 * (c) The same through a failover: the master stays stopped until a
 *     replica is promoted; the give-backs retried by the watchdog reach
 *     the new master, where the waiter is granted.
 * (b) A reentrant acquire that waits through an outage (the master
 *     refuses writes: maxmemory, so the acquire script fails with OOM)
 *     and gives up must leave the outer hold in place. The fair wait's
 *     leave script found the owner holding the lock (its own outer
 *     level) and the client gave that "handoff" back: the outer hold was
 *     deleted while its handle still counted it held.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>
#include <pthread.h>

#include "dlock.h"
#include "harness.h"
#include "th_monitor.h"
#include "th_replication.h"
#include "topology.h"

#include "fixture_sentinel.h"

/* The acquire's command timeout: the stop of the master outlasts it a few
 * times, so that several attempts time out. */
#define CMD_MS 300
/* How long the master is stopped: below the sentinels' down-after
 * (1500 ms, topology.c), so that no failover starts. */
#define STOP_MS 1000
/* Bounded waits (liveness, not timing). */
#define LIVE_MS 20000

/* The data node that is master now. */
static th_server *master_node(void)
{
    int p = th_sentinel_master_port(&sent);
    assert_true(p > 0);
    return th_sentinel_node(&sent, p);
}

/* A Sentinel client with the wait strategy, command timeout and
 * lock-delay (-1: the default) given. */
static dlock_client *sclient_delay(dlock_wait_strategy strategy, int64_t cmd_ms,
                                   int64_t lock_delay_ms)
{
    dlock_options o;
    dlock_client *c = NULL;
    const char *urls[1] = {surl};
    char err[256];
    dlock_options_init(&o);
    o.servers = urls;
    o.nservers = 1;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = cmd_ms;
    o.wait_strategy = strategy;
    o.lock_delay_ms = lock_delay_ms;
    if (dlock_client_new(&c, &o, err, sizeof err) != DLOCK_OK)
        print_error("client: %s\n", err);
    assert_non_null(c);
    return c;
}

/* A Sentinel client with the default lock-delay. */
static dlock_client *sclient(dlock_wait_strategy strategy, int64_t cmd_ms)
{
    return sclient_delay(strategy, cmd_ms, -1);
}

/* ---- what the master executed, and its replay -------------------------- */

/* The text that names the lock's release script in its source. */
#define RELEASE_MARK "release.lua: give back"

/* release.lua's source as the library sends it (learned in (a)). */
static char *release_src;

/* A MONITOR connection to s. */
static redisContext *monitor_open(const th_server *s)
{
    redisContext *m = th_monitor_open(s);
    assert_non_null(m);
    return m;
}

/* The runs of release.lua for lock NAME that s executed since m began
 * watching (at most max, *n set). */
static void monitor_releases(redisContext *m, const th_server *s,
                             const char *name, th_run *out, int max, int *n)
{
    char key[128];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    assert_int_equal(
        th_monitor_runs(m, s, RELEASE_MARK, key, out, max, n, &release_src), 0);
}

/* Send r to t again, as it was sent. */
static void replay(const th_server *t, const th_run *r)
{
    assert_int_equal(th_run_replay(t, r), 0);
}

/* ---- (a) a late give-back and a later attempt ---------------------------- */

/* The holder's renewal succeeds (the give-backs physically sent so far,
 * some after the grant, left it alone); when says at which point. */
static void held_still(dlock_client *c, dlock_lock *l, const char *when)
{
    int rc = dlock_lock_extend(l, 30000);
    if (rc != DLOCK_OK)
        print_error("%s: the holder's renewal %s: %s\n", dlock_lock_name(l),
                    when, dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_OK);
}

/*
 * The end of (a) and (c): j holds the lock; its n give-backs gb, which t
 * executed, are sent to t again (late, as one retried through a failover
 * is). The holder must still renew and b's try must be refused; no
 * give-back may name the holder's id. Frees gb and releases the lock.
 */
static void replay_and_check(dlock_client *a, dlock_client *b, dlock_lock *l,
                             const th_server *t, th_run *gb, int n)
{
    dlock_lock *lb = NULL;
    int i, rc;
    if (n == 0)
        print_error("%s: no give-back seen\n", dlock_lock_name(l));
    assert_true(n > 0);
    held_still(a, l, "before the replay");
    for (i = 0; i < n; i++) {
        if (strcmp(gb[i].argv[7], dlock_lock_owner(l)) == 0)
            print_error("%s: a give-back names the holder's owner id %s "
                        "(depth %s, token %s)\n",
                        dlock_lock_name(l), gb[i].argv[7], gb[i].argv[8],
                        gb[i].argv[9]);
        replay(t, &gb[i]);
    }
    held_still(a, l, "after the late give-backs");
    rc = dlock_lock_acquire(&lb, b, dlock_lock_name(l), 0, 5000);
    if (rc == DLOCK_OK)
        dlock_lock_release(lb);
    assert_int_equal(rc, DLOCK_BUSY);
    for (i = 0; i < n; i++) {
        assert_string_not_equal(gb[i].argv[7], dlock_lock_owner(l));
        th_run_free(&gb[i]);
    }
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
}

typedef struct job {
    dlock_client *c;
    const char *name;
    dlock_lock *l;
    int rc;
} job;

static void *acquire_job(void *arg)
{
    job *j = arg;
    j->rc = dlock_lock_acquire(&j->l, j->c, j->name, LIVE_MS, 30000);
    return NULL;
}

/* One round of (a) with strategy, on lock name. */
static void late_giveback_round(dlock_wait_strategy strategy, const char *name)
{
    dlock_client *a = sclient(strategy, CMD_MS);
    dlock_client *b = sclient(DLOCK_WAIT_SPIN, 1000);
    th_server *m = master_node();
    redisContext *mon = monitor_open(m);
    th_run gb[64];
    job j = {.c = a, .name = name};
    pthread_t t;
    int n = 0;

    /* The client knows the master (and its scripts) before the stop. */
    assert_int_equal(dlock_lock_acquire(&j.l, a, "gb-warm", 0, 5000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(j.l), DLOCK_OK);
    j.l = NULL;

    th_server_pause(m);
    assert_int_equal(pthread_create(&t, NULL, acquire_job, &j), 0);
    th_sleep_ms(STOP_MS);
    th_server_resume(m);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (j.rc != DLOCK_OK)
        print_error("acquire %s: %s\n", name, dlock_errmsg(a));
    assert_int_equal(j.rc, DLOCK_OK);
    /* The give-backs of the attempts that timed out have all been done
     * once the watchdog has nothing left to retry; then look. */
    th_sleep_ms(500);
    monitor_releases(mon, m, name, gb, 64, &n);
    redisFree(mon);
    /* The stop lasted several command timeouts: some attempt timed out
     * and left a give-back. */
    replay_and_check(a, b, j.l, m, gb, n);
    dlock_client_free(b);
    dlock_client_free(a);
}

static void test_late_giveback_fair(void **state)
{
    (void)state;
    late_giveback_round(DLOCK_WAIT_FAIR, "gb-fair");
}

static void test_late_giveback_notify(void **state)
{
    (void)state;
    late_giveback_round(DLOCK_WAIT_NOTIFY, "gb-notify");
}

static void test_late_giveback_spin(void **state)
{
    (void)state;
    late_giveback_round(DLOCK_WAIT_SPIN, "gb-spin");
}

/* (c) As (a), but the master stays stopped until the sentinels have
 * promoted a replica: the give-backs the watchdog retries reach the new
 * master, where the waiter is granted (the case: MONITOR showed
 * such a give-back delete the grant 43 ms after it).
 * Every give-back the new master saw is delivered to it again after the
 * grant; the lock must still be the waiter's. */
/* Keep every command from now on in each data node's slow log (which,
 * unlike a MONITOR connection, outlives the promotion: the sentinels kill
 * the normal clients of the node they promote). */
static void slowlog_all(void)
{
    int i;
    for (i = 0; i < TH_SENTINEL_DATA; i++) {
        redisReply *r =
            th_cmd(&sent.data[i], "CONFIG SET slowlog-max-len %s", "100000");
        assert_non_null(r);
        freeReplyObject(r);
        r = th_cmd(&sent.data[i], "CONFIG SET slowlog-log-slower-than %s", "0");
        assert_non_null(r);
        freeReplyObject(r);
        r = th_cmd(&sent.data[i], "SLOWLOG RESET");
        assert_non_null(r);
        freeReplyObject(r);
    }
}

/* The runs of release.lua for lock NAME in s's slow log, oldest first,
 * as commands to replay: EVAL with the source learned in (a) (the slow
 * log cuts long arguments; the others are whole), at most max (*n). */
static void slowlog_releases(const th_server *s, const char *name, th_run *out,
                             int max, int *n)
{
    char key[128];
    redisReply *r = th_cmd(s, "SLOWLOG GET %d", 100000);
    size_t e;
    int i;
    *n = 0;
    snprintf(key, sizeof key, "dlock:{%s}", name);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (e = r->elements; e-- > 0;) {
        const redisReply *en = r->element[e], *args;
        th_run x = {0};
        if (en->type != REDIS_REPLY_ARRAY || en->elements < 4)
            continue;
        args = en->element[3];
        if (args->type != REDIS_REPLY_ARRAY || args->elements < 8 ||
            args->elements > 24 ||
            strcasecmp(args->element[0]->str, "EVAL") != 0 ||
            strstr(args->element[1]->str, RELEASE_MARK) == NULL ||
            strcmp(args->element[3]->str, key) != 0 || *n == max)
            continue;
        for (i = 0; i < (int)args->elements; i++) {
            const char *v = i == 1 ? release_src : args->element[i]->str;
            size_t len = i == 1 ? strlen(release_src) : args->element[i]->len;
            x.argv[i] = malloc(len + 1);
            assert_non_null(x.argv[i]);
            memcpy(x.argv[i], v, len + 1);
            x.len[i] = len;
        }
        x.argc = (int)args->elements;
        out[(*n)++] = x;
    }
    freeReplyObject(r);
}

static void test_late_giveback_failover(void **state)
{
    /* The lock-delay off (as an operator may set it): with it, no fresh
     * grant comes from the new master before the longest lease this
     * client took has passed, and by then the watchdog has stopped
     * retrying the give-backs (they end with their attempt's lease). */
    dlock_client *a = sclient_delay(DLOCK_WAIT_FAIR, CMD_MS, 0);
    /* b too: a client that saw the old master would answer its own
     * lock-delay, not BUSY. */
    dlock_client *b = sclient_delay(DLOCK_WAIT_SPIN, 1000, 0);
    th_server *m = master_node(), *nm;
    th_run gb[64];
    job j = {.c = a, .name = "gb-failover"};
    pthread_t t;
    int n = 0, np;
    (void)state;

    assert_non_null(release_src); /* learned in (a) */
    assert_int_equal(dlock_lock_acquire(&j.l, a, "gb-warm", 0, 5000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(j.l), DLOCK_OK);
    j.l = NULL;
    slowlog_all();

    th_server_pause(m);
    assert_int_equal(pthread_create(&t, NULL, acquire_job, &j), 0);
    np = th_sentinel_wait_master(&sent, m->port, LIVE_MS);
    assert_true(np > 0 && np != m->port);
    nm = th_sentinel_node(&sent, np);
    assert_non_null(nm);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (j.rc != DLOCK_OK)
        print_error("acquire: %s\n", dlock_errmsg(a));
    assert_int_equal(j.rc, DLOCK_OK);
    th_sleep_ms(500);
    slowlog_releases(nm, j.name, gb, 64, &n);
    replay_and_check(a, b, j.l, nm, gb, n);
    dlock_client_free(b);
    dlock_client_free(a);
    /* The old master back, as a replica of the new one. */
    th_server_resume(m);
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
}

/* ---- (b) a reentrant wait that gives up ---------------------------------- */

static void test_reentrant_leave(void **state)
{
    dlock_client *a = sclient(DLOCK_WAIT_FAIR, CMD_MS);
    th_server *m = master_node();
    dlock_lock *outer = NULL, *inner = NULL;
    redisReply *r;
    int rc;
    (void)state;

    assert_int_equal(dlock_lock_acquire(&outer, a, "gb-reent", 0, 30000),
                     DLOCK_OK);
    /* Writes that may grow memory are refused (OOM): the reentrant
     * attempt's HINCRBY fails, and a waiting acquire on Sentinel takes
     * that for a failover in progress and retries until its wait ends. */
    r = th_cmd(m, "CONFIG SET maxmemory 1");
    assert_non_null(r);
    freeReplyObject(r);
    rc = dlock_lock_acquire(&inner, a, "gb-reent", 1000, 30000);
    r = th_cmd(m, "CONFIG SET maxmemory 0");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_not_equal(rc, DLOCK_OK);
    assert_null(inner);
    /* The outer hold is still there, and still this owner's. */
    assert_int_equal(th_cmd_int(m, "EXISTS dlock:{gb-reent}"), 1);
    rc = dlock_lock_extend(outer, 30000);
    if (rc != DLOCK_OK)
        print_error("outer renewal: %s\n", dlock_errmsg(a));
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(outer), DLOCK_OK);
    assert_int_equal(th_cmd_int(m, "EXISTS dlock:{gb-reent}"), 0);
    dlock_client_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_giveback_fair),
        cmocka_unit_test(test_late_giveback_notify),
        cmocka_unit_test(test_late_giveback_spin),
        cmocka_unit_test(test_reentrant_leave),
        cmocka_unit_test(test_late_giveback_failover),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
