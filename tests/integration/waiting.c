/*
 * waiting.c - how acquires wait (issue 3), against a real redis-server:
 * notify wakes a waiter on release (stats show the wakeup), a crashed
 * holder's lease expiry still lets waiters in, a killed subscriber
 * connection does not strand a waiter, many threads on one key cost no
 * more requests per acquisition than two, dlock_client_cancel() ends a
 * wait, and fair mode grants in arrival order across processes, survives
 * a queued waiter killed -9 within its documented bound, and excludes.
 * A client's only waiter reads the subscriber connection itself: handing
 * it back to the notifier thread strands nobody, and releases announced
 * while nobody read it do not wake the next wait.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"
#include "th_procs.h"
#include "th_waiter.h"

static dlock_client *client_for(int strategy)
{
    return fixture_client(strategy, 0, 0);
}

/* A waiter thread: acquire NAME with wait_ms (lease 10 s), note when it
 * returned (done_ms), release at once. */
static void start_waiter(th_waiter *w, dlock_client *c, const char *name,
                         int64_t wait_ms)
{
    *w = (th_waiter){
        .c = c, .name = name, .wait_ms = wait_ms, .lease_ms = 10000};
    assert_int_equal(th_waiter_start(w), 0);
}

/* ---- notify ------------------------------------------------------------ */

static void test_notify_wakeup(void **state)
{
    dlock_client *h = client_for(DLOCK_WAIT_NOTIFY);
    dlock_client *c = client_for(DLOCK_WAIT_NOTIFY);
    dlock_lock *l;
    th_waiter w;
    dlock_stats st;
    int64_t t_rel;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, h, "w-notify", 0, 30000), DLOCK_OK);
    start_waiter(&w, c, "w-notify", 20000);
    th_sleep_ms(400);
    t_rel = th_now_ms();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    /* Woken by the release, not by the 30 s lease or 20 s deadline. */
    assert_true(w.done_ms - t_rel < 2000);
    dlock_client_stats(c, &st);
    fprintf(stderr,
            "notify: waiter back %lld ms after release; waits %llu "
            "wakeups %llu requests %llu\n",
            (long long)(w.done_ms - t_rel), (unsigned long long)st.waits,
            (unsigned long long)st.wakeups, (unsigned long long)st.requests);
    assert_true(st.waits >= 1);
    assert_true(st.wakeups >= 1);
    /* Not a polling loop: a handful of requests for one wait. */
    assert_true(st.requests <= 10);
    dlock_client_free(h);
    dlock_client_free(c);
}

static void test_crashed_holder_expiry(void **state)
{
    dlock_client *c = client_for(DLOCK_WAIT_NOTIFY);
    dlock_lock *l;
    int64_t t0;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv, "DEL dlock:{w-crash}");
    r = th_cmd(&srv, "HSET dlock:{w-crash} deadbeef:1 1");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&srv, "PEXPIRE dlock:{w-crash} 300"), 1);
    t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(&l, c, "w-crash", 10000, 5000),
                     DLOCK_OK);
    assert_true(th_now_ms() - t0 < 5000);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* The subscriber connection killed mid-wait: the waiter still gets the
 * lock soon after the release (not only when the 30 s lease runs out). */
static void test_subscriber_killed(void **state)
{
    dlock_client *h = client_for(DLOCK_WAIT_NOTIFY);
    dlock_client *c = client_for(DLOCK_WAIT_NOTIFY);
    dlock_lock *l;
    th_waiter w;
    int64_t t_rel;
    redisReply *r;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, h, "w-subkill", 0, 30000),
                     DLOCK_OK);
    start_waiter(&w, c, "w-subkill", 25000);
    th_sleep_ms(400);
    r = th_cmd(&srv, "CLIENT KILL TYPE pubsub");
    assert_non_null(r);
    fprintf(stderr, "subscriber kill: %lld killed\n",
            r->type == REDIS_REPLY_INTEGER ? r->integer : -1LL);
    assert_true(r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
    freeReplyObject(r);
    th_sleep_ms(200);
    t_rel = th_now_ms();
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_waiter_join(&w);
    fprintf(stderr, "subscriber kill: waiter %s %lld ms after release\n",
            dlock_status_name(w.rc), (long long)(w.done_ms - t_rel));
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.done_ms - t_rel < 5000);
    dlock_client_free(h);
    dlock_client_free(c);
}

/* ---- many threads on one key -------------------------------------------- */

typedef struct worker {
    dlock_client *c;
    int iters;
    int failures;
    pthread_t t;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    int i;
    for (i = 0; i < w->iters; i++) {
        dlock_lock *l = NULL;
        int rc = dlock_lock_acquire(&l, w->c, "w-herd", 30000, 10000);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "acquire: %s (%s)\n", dlock_strerror(rc),
                    dlock_errmsg(w->c));
            w->failures++;
            continue;
        }
        if (th_rmw(&srv, "test:wait:herd") != 0)
            w->failures++;
        if (dlock_lock_release(l) != DLOCK_OK)
            w->failures++;
    }
    return NULL;
}

/* Run NT threads x ITERS on one notify client: requests per acquisition. */
static double herd(int nt, int iters)
{
    dlock_client *c = client_for(DLOCK_WAIT_NOTIFY);
    worker w[16];
    dlock_stats st;
    int i, failures = 0;
    redisReply *r;
    double per;
    th_cmd_int(&srv, "DEL test:wait:herd");
    for (i = 0; i < nt; i++) {
        w[i] = (worker){c, iters, 0, 0};
        assert_int_equal(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
    }
    for (i = 0; i < nt; i++) {
        pthread_join(w[i].t, NULL);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    r = th_cmd(&srv, "GET test:wait:herd");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(atoll(r->str), nt * iters);
    freeReplyObject(r);
    dlock_client_stats(c, &st);
    assert_int_equal(st.acquisitions, (uint64_t)(nt * iters));
    per = (double)st.requests / (double)st.acquisitions;
    fprintf(stderr,
            "herd %2d threads: %llu requests / %llu acquisitions = "
            "%.2f (busy %llu waits %llu wakeups %llu)\n",
            nt, (unsigned long long)st.requests,
            (unsigned long long)st.acquisitions, per,
            (unsigned long long)st.busy, (unsigned long long)st.waits,
            (unsigned long long)st.wakeups);
    dlock_client_free(c);
    return per;
}

static void test_herd_flat(void **state)
{
    double two, sixteen;
    (void)state;
    two = herd(2, 60);
    sixteen = herd(16, 8);
    assert_true(sixteen <= 1.5 * two + 1.0);
}

/* ---- direct reading ------------------------------------------------------ */

/*
 * A client's only waiter reads the subscriber connection itself (one
 * server); a second waiter makes it hand the connection back to the
 * notifier thread mid-wait. Nobody may be stranded by that: with waiters
 * joining a direct reader on the same key and on another key, every one
 * gets its lock soon after the release (the holder's lease is 30 s).
 */
static void direct_handover(int strategy)
{
    dlock_client *h = client_for(strategy);
    dlock_client *c = client_for(strategy);
    dlock_lock *l1, *l2;
    th_waiter w[3];
    int64_t t_rel;
    int i;
    assert_int_equal(dlock_lock_acquire(&l1, h, "w-direct-1", 0, 30000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l2, h, "w-direct-2", 0, 30000),
                     DLOCK_OK);
    start_waiter(&w[0], c, "w-direct-1", 20000); /* alone: reads itself */
    th_sleep_ms(300);
    start_waiter(&w[1], c, "w-direct-1", 20000); /* takes it back */
    th_sleep_ms(300);
    start_waiter(&w[2], c, "w-direct-2", 20000);
    th_sleep_ms(300);
    t_rel = th_now_ms();
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    for (i = 0; i < 3; i++) {
        th_waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
        assert_true(w[i].done_ms - t_rel < 5000);
    }
    /* And alone again: the next sole waiter reads directly once more. */
    assert_int_equal(dlock_lock_acquire(&l1, h, "w-direct-1", 0, 30000),
                     DLOCK_OK);
    start_waiter(&w[0], c, "w-direct-1", 20000);
    th_sleep_ms(300);
    t_rel = th_now_ms();
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    th_waiter_join(&w[0]);
    assert_int_equal(w[0].rc, DLOCK_OK);
    assert_true(w[0].done_ms - t_rel < 5000);
    dlock_client_free(h);
    dlock_client_free(c);
}

static void test_direct_handover_notify(void **state)
{
    (void)state;
    direct_handover(DLOCK_WAIT_NOTIFY);
}

static void test_direct_handover_fair(void **state)
{
    (void)state;
    direct_handover(DLOCK_WAIT_FAIR);
}

/*
 * Between two waits a direct subscriber connection is left unread, and
 * this process's own releases are announced on it meanwhile. Those old
 * messages must not wake the next wait: one release by the holder = one
 * wait and one wake-up.
 */
static void test_stale_releases_no_wakeup(void **state)
{
    dlock_client *h = client_for(DLOCK_WAIT_NOTIFY);
    dlock_client *c = client_for(DLOCK_WAIT_NOTIFY);
    dlock_lock *l, *x;
    dlock_stats a, b;
    th_waiter w;
    int i;
    (void)state;
    /* A first wait subscribes c to the lock's channel. */
    assert_int_equal(dlock_lock_acquire(&l, h, "w-stale", 0, 30000), DLOCK_OK);
    start_waiter(&w, c, "w-stale", 20000);
    th_sleep_ms(200);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    /* c's own releases, announced while nobody of c waits. */
    for (i = 0; i < 10; i++) {
        assert_int_equal(dlock_lock_acquire(&x, c, "w-stale", 0, 30000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_release(x), DLOCK_OK);
    }
    assert_int_equal(dlock_lock_acquire(&l, h, "w-stale", 0, 30000), DLOCK_OK);
    dlock_client_stats(c, &a);
    start_waiter(&w, c, "w-stale", 20000);
    th_sleep_ms(300);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    dlock_client_stats(c, &b);
    fprintf(stderr, "stale: waits %llu wakeups %llu requests %llu\n",
            (unsigned long long)(b.waits - a.waits),
            (unsigned long long)(b.wakeups - a.wakeups),
            (unsigned long long)(b.requests - a.requests));
    assert_int_equal(b.waits - a.waits, 1);
    assert_int_equal(b.wakeups - a.wakeups, 1);
    dlock_client_free(h);
    dlock_client_free(c);
}

/* ---- cancellation ------------------------------------------------------- */

static void test_cancel(void **state)
{
    dlock_client *h = client_for(DLOCK_WAIT_NOTIFY);
    dlock_client *c = client_for(DLOCK_WAIT_NOTIFY);
    dlock_lock *l, *x;
    th_waiter w;
    int64_t t0;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, h, "w-cancel", 0, 30000), DLOCK_OK);
    start_waiter(&w, c, "w-cancel", -1); /* forever */
    th_sleep_ms(300);
    t0 = th_now_ms();
    dlock_client_cancel(c);
    th_waiter_join(&w);
    fprintf(stderr, "cancel: waiter %s %lld ms after dlock_client_cancel\n",
            dlock_status_name(w.rc), (long long)(w.done_ms - t0));
    if (w.rc != DLOCK_CANCELED || w.done_ms - t0 >= 2000)
        dlock_lock_release(l); /* free the holder's handle before failing */
    assert_int_equal(w.rc, DLOCK_CANCELED);
    assert_true(w.done_ms - t0 < 2000);
    /* Later acquires wait normally again. */
    assert_int_equal(dlock_lock_acquire(&x, c, "w-cancel", 200, 1000),
                     DLOCK_TIMEDOUT);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&x, c, "w-cancel", 1000, 1000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(x), DLOCK_OK);
    dlock_client_free(h);
    dlock_client_free(c);
}

/* ---- fair mode across processes ----------------------------------------- */

/* A fair client (a th_client_fn for the forked processes; arg unused). */
static dlock_client *fair_client(void *arg)
{
    (void)arg;
    return client_for(DLOCK_WAIT_FAIR);
}

/* The holder process (th_proc_holder) with a fair client. */
static pid_t fair_holder(const char *name, int *ready_fd, int *go_fd)
{
    pid_t p = th_proc_holder(fair_client, NULL, name, ready_fd, go_fd);
    assert_true(p > 0);
    return p;
}

/* A fair waiter's record: RPUSH "<idx>:<monotonic ms>" onto the list
 * arg. */
static void record_time(dlock_client *c, dlock_lock *l, int idx, void *arg)
{
    redisReply *r = th_cmd(&srv, "RPUSH %s %d:%lld", (const char *)arg, idx,
                           (long long)th_now_ms());
    (void)c;
    (void)l;
    if (r != NULL)
        freeReplyObject(r);
}

/* A fair waiter process: acquire (wait 30 s), RPUSH its index and the
 * monotonic time onto LIST, hold briefly (30 ms), release. */
static pid_t fair_waiter(const char *name, int idx, const char *list)
{
    const th_proc_waiter w = {.client = fair_client,
                              .name = name,
                              .wait_ms = 30000,
                              .lease_ms = 5000,
                              .hold_ms = 30,
                              .record = record_time,
                              .record_arg = (void *)list};
    return th_proc_waiter_start(&w, idx);
}

static void test_fair_order(void **state)
{
    enum { NW = 6 };
    pid_t h, w[NW];
    int rfd, gfd, i;
    char b;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv, "DEL test:fair:order");
    h = fair_holder("w-fair", &rfd, &gfd);
    assert_int_equal(read(rfd, &b, 1), 1);
    for (i = 0; i < NW; i++) {
        w[i] = fair_waiter("w-fair", i, "test:fair:order");
        th_sleep_ms(100);
    }
    th_sleep_ms(200);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{w-fair}:q"), NW);
    assert_int_equal(write(gfd, "g", 1), 1);
    assert_true(th_exited_ok(h));
    for (i = 0; i < NW; i++)
        assert_true(th_exited_ok(w[i]));
    r = th_cmd(&srv, "LRANGE test:fair:order 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, NW);
    for (i = 0; i < NW; i++) {
        fprintf(stderr, "fair grant %d: waiter %s\n", i, r->element[i]->str);
        assert_int_equal(atoi(r->element[i]->str), i);
    }
    freeReplyObject(r);
    close(rfd);
    close(gfd);
}

/* A queued waiter killed -9: the next one gets the lock within the
 * documented bound (waiter TTL 3 s + handoff lease 2 s, plus a poll). */
static void test_fair_killed_waiter(void **state)
{
    pid_t h, dead, next;
    int rfd, gfd;
    char b;
    redisReply *r;
    int64_t t_rel, t_got;
    (void)state;
    th_cmd_int(&srv, "DEL test:fair:kill");
    h = fair_holder("w-fairkill", &rfd, &gfd);
    assert_int_equal(read(rfd, &b, 1), 1);
    dead = fair_waiter("w-fairkill", 0, "test:fair:kill");
    th_sleep_ms(200);
    next = fair_waiter("w-fairkill", 1, "test:fair:kill");
    th_sleep_ms(300);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{w-fairkill}:q"), 2);
    kill(dead, SIGKILL);
    waitpid(dead, NULL, 0);
    t_rel = th_now_ms();
    assert_int_equal(write(gfd, "g", 1), 1);
    assert_true(th_exited_ok(h));
    assert_true(th_exited_ok(next));
    r = th_cmd(&srv, "LRANGE test:fair:kill 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, 1);
    assert_int_equal(atoi(r->element[0]->str), 1);
    t_got = atoll(strchr(r->element[0]->str, ':') + 1);
    freeReplyObject(r);
    fprintf(stderr, "fair: next waiter in %lld ms after the release\n",
            (long long)(t_got - t_rel));
    assert_true(t_got - t_rel <= 6500);
    close(rfd);
    close(gfd);
}

/* Fair mode excludes: processes x threads, non-atomic increments. */
static void test_fair_mutual_exclusion(void **state)
{
    enum { NP = 4, ITERS = 20 };
    const th_contend k = {.client = fair_client,
                          .name = "w-fairmx",
                          .wait_ms = 30000,
                          .lease_ms = 10000,
                          .procs = NP,
                          .iters = ITERS,
                          .counter_srv = &srv,
                          .counter_key = "test:fair:mx"};
    redisReply *r;
    (void)state;
    th_cmd_int(&srv, "DEL test:fair:mx");
    assert_int_equal(th_contend_run(&k), 0);
    r = th_cmd(&srv, "GET test:fair:mx");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(atoll(r->str), NP * ITERS);
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{w-fairmx}"), 0);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{w-fairmx}:q"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_wakeup),
        cmocka_unit_test(test_crashed_holder_expiry),
        cmocka_unit_test(test_subscriber_killed),
        cmocka_unit_test(test_herd_flat),
        cmocka_unit_test(test_direct_handover_notify),
        cmocka_unit_test(test_direct_handover_fair),
        cmocka_unit_test(test_stale_releases_no_wakeup),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_fair_order),
        cmocka_unit_test(test_fair_killed_waiter),
        cmocka_unit_test(test_fair_mutual_exclusion),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
