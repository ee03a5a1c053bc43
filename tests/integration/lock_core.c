/*
 * lock_core.c - the single-instance lock against a real redis-server, over
 * the transport DLOCK_TEST_TRANSPORT names (CTest runs it over tcp, tls
 * and unix): mutual exclusion across threads and processes, reentrancy,
 * ownership, expiry, fencing tokens, and recovery from SCRIPT FLUSH,
 * restarts, DEBUG SLEEP and CLIENT KILL.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
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

/* A client for the server under test with the given strategy. */
static dlock_client *client_for(const th_server *s, int strategy,
                                int64_t cmd_timeout)
{
    const char *url = th_url(s);
    dlock_client *c = th_client(&url, 1, strategy, cmd_timeout, 0);
    if (c == NULL && getpid() != main_pid)
        _exit(9); /* a forked child must not longjmp into cmocka */
    assert_non_null(c);
    return c;
}

/* ---- mutual exclusion: a deliberate non-atomic GET / SET under the lock */

typedef struct worker {
    dlock_client *c;
    const char *name;
    int iters;
    int failures;
} worker;

static void *thread_worker(void *arg)
{
    worker *w = arg;
    int i;
    for (i = 0; i < w->iters; i++) {
        dlock_lock *l = NULL;
        int rc = dlock_lock_acquire(&l, w->c, w->name, 20000, 10000);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "acquire: %s (%s)\n", dlock_strerror(rc),
                    dlock_errmsg(w->c));
            w->failures++;
            continue;
        }
        if (th_rmw(&srv, "test:counter:threads") != 0)
            w->failures++;
        if (dlock_lock_release(l) != DLOCK_OK)
            w->failures++;
    }
    return NULL;
}

static void run_threads(int strategy, const char *name)
{
    enum { NT = 6, ITERS = 25 };
    pthread_t t[NT];
    worker w[NT];
    dlock_client *c = client_for(&srv, strategy, 0);
    int i, failures = 0;
    th_cmd_int(&srv, "DEL test:counter:threads");
    for (i = 0; i < NT; i++) {
        w[i] = (worker){c, name, ITERS, 0};
        pthread_create(&t[i], NULL, thread_worker, &w[i]);
    }
    for (i = 0; i < NT; i++) {
        pthread_join(t[i], NULL);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    {
        redisReply *r = th_cmd(&srv, "GET test:counter:threads");
        assert_non_null(r);
        assert_int_equal(atoll(r->str), NT * ITERS);
        freeReplyObject(r);
    }
    dlock_client_free(c);
}

static void test_threads_notify(void **state)
{
    (void)state;
    run_threads(DLOCK_WAIT_NOTIFY, "mx-threads-notify");
}

static void test_threads_spin(void **state)
{
    (void)state;
    run_threads(DLOCK_WAIT_SPIN, "mx-threads-spin");
}

static void test_threads_fair(void **state)
{
    (void)state;
    run_threads(DLOCK_WAIT_FAIR, "mx-threads-fair");
}

/* A client of srv with the strategy *arg (a th_client_fn). */
static dlock_client *strategy_client(void *arg)
{
    return client_for(&srv, *(const int *)arg, 0);
}

/* Processes: each child makes its own client (never share one across a
 * fork) and increments; the parent checks nothing was lost. */
static void run_processes(int strategy, const char *name)
{
    enum { NP = 4, ITERS = 25 };
    const th_contend k = {.client = strategy_client,
                          .client_arg = &strategy,
                          .name = name,
                          .wait_ms = 20000,
                          .lease_ms = 10000,
                          .procs = NP,
                          .iters = ITERS,
                          .counter_srv = &srv,
                          .counter_key = "test:counter:procs"};
    th_cmd_int(&srv, "DEL test:counter:procs");
    assert_int_equal(th_contend_run(&k), 0);
    {
        redisReply *r = th_cmd(&srv, "GET test:counter:procs");
        assert_non_null(r);
        assert_int_equal(atoll(r->str), NP * ITERS);
        freeReplyObject(r);
    }
}

static void test_processes_notify(void **state)
{
    (void)state;
    run_processes(DLOCK_WAIT_NOTIFY, "mx-procs-notify");
}

static void test_processes_spin(void **state)
{
    (void)state;
    run_processes(DLOCK_WAIT_SPIN, "mx-procs-spin");
}

/* ---- reentrancy, ownership, expiry, tokens ----------------------------- */

static void test_reentrancy(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_client *other = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *a, *b, *x;
    dlock_info info;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&a, c, "re", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&b, c, "re", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_token(a), dlock_lock_token(b));
    assert_int_equal(dlock_lock_inspect(c, "re", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_int_equal(info.reentry, 2);
    assert_string_equal(info.owner, dlock_lock_owner(a));
    assert_int_equal(dlock_lock_release(b), DLOCK_OK);
    /* Still held after one level: another owner cannot take it. */
    assert_int_equal(dlock_lock_acquire(&x, other, "re", 0, 10000), DLOCK_BUSY);
    assert_null(x);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&x, other, "re", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(x), DLOCK_OK);
    dlock_client_free(c);
    dlock_client_free(other);
}

/* Another thread of the same client is another owner. */
static void *try_from_thread(void *arg)
{
    dlock_client *c = arg;
    dlock_lock *l = NULL;
    intptr_t rc = dlock_lock_acquire(&l, c, "thread-owner", 0, 10000);
    if (l != NULL)
        dlock_lock_release(l);
    return (void *)rc;
}

static void test_thread_is_owner(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l;
    pthread_t t;
    void *ret;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "thread-owner", 0, 10000),
                     DLOCK_OK);
    pthread_create(&t, NULL, try_from_thread, c);
    pthread_join(t, &ret);
    assert_int_equal((intptr_t)ret, DLOCK_BUSY);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void test_non_owner_release_refused(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l, *fake;
    char owner[96];
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "nonowner", 0, 10000), DLOCK_OK);
    /* Adopting as a made-up owner is refused... */
    snprintf(owner, sizeof owner, "%s:%d", "00000000000000000000000000000000",
             1);
    assert_int_equal(dlock_lock_adopt(&fake, c, "nonowner", owner, 0),
                     DLOCK_NOT_OWNER);
    /* ...and the holder's lock survives. */
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{nonowner}"), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{nonowner}"), 0);
    dlock_client_free(c);
}

static void test_expired_is_not_owner(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_client *other = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l, *o;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "expire", 0, 100), DLOCK_OK);
    assert_true(dlock_lock_validity_ms(l) <= 100);
    usleep(250 * 1000);
    assert_int_equal(dlock_lock_validity_ms(l), 0);
    assert_int_equal(dlock_lock_status(l), DLOCK_NOT_OWNER);
    /* Someone else takes it; our late release must not free theirs. */
    assert_int_equal(dlock_lock_acquire(&o, other, "expire", 0, 10000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_NOT_OWNER);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{expire}"), 1);
    assert_int_equal(dlock_lock_extend(o, 5000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(o), DLOCK_OK);
    dlock_client_free(c);
    dlock_client_free(other);
}

/* A notify waiter hears the release of a hold with a long lease: its
 * attempts mark the hold ('#l', acquire.lua), and release.lua announces
 * only marked holds (an unmarked release publishes nothing). Unmarked,
 * the waiter would sleep until the 60 s lease ran out, past its 20 s
 * wait. With fence retention and without. */
static void hears_release(int64_t keep_ms, const char *name)
{
    dlock_client *c = th_client_keep(th_url(&srv), keep_ms);
    dlock_client *other = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l;
    th_waiter w = {.c = other,
                   .name = name,
                   .wait_ms = 20000,
                   .lease_ms = 10000,
                   .hold_ms = 0};
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, c, name, 0, 60000), DLOCK_OK);
    assert_int_equal(th_release_heard(&w, l), 0);
    dlock_client_free(c);
    dlock_client_free(other);
}

static void test_waiter_hears_release(void **state)
{
    (void)state;
    hears_release(604800000, "hear");
    hears_release(0, "hear0");
}

static void test_tokens_increase(void **state)
{
    dlock_client *a = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_client *b = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    uint64_t last = 0;
    int i;
    (void)state;
    for (i = 0; i < 40; i++) {
        dlock_lock *l, *r;
        dlock_client *c = (i % 2) ? a : b;
        assert_int_equal(dlock_lock_acquire(&l, c, "tokens", 0, 10000),
                         DLOCK_OK);
        assert_true(dlock_lock_token(l) > last);
        last = dlock_lock_token(l);
        /* Reentry keeps the token. */
        assert_int_equal(dlock_lock_acquire(&r, c, "tokens", 0, 10000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_token(r), last);
        assert_int_equal(dlock_lock_release(r), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    /* The counter survives the lock key and even its own deletion does
     * not send tokens backwards (server-time floor). */
    th_cmd_int(&srv, "DEL dlock:{tokens}:f");
    {
        dlock_lock *l;
        assert_int_equal(dlock_lock_acquire(&l, a, "tokens", 0, 10000),
                         DLOCK_OK);
        assert_true(dlock_lock_token(l) > last);
        dlock_lock_release(l);
    }
    dlock_client_free(a);
    dlock_client_free(b);
}

/* Acquire in one client, detach, adopt and release from another: the way
 * `dlock acquire` / `dlock release` span processes. */
static void test_detach_adopt(void **state)
{
    dlock_client *a = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_client *b = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l, *x;
    char owner[96];
    uint64_t tok;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, a, "span", 0, 10000), DLOCK_OK);
    snprintf(owner, sizeof owner, "%s", dlock_lock_owner(l));
    tok = dlock_lock_token(l);
    dlock_lock_detach(l);
    dlock_client_free(a);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{span}"), 1);
    assert_int_equal(dlock_lock_acquire(&x, b, "span", 0, 10000), DLOCK_BUSY);
    assert_int_equal(dlock_lock_adopt(&x, b, "span", owner, tok), DLOCK_OK);
    assert_int_equal(dlock_lock_token(x), tok);
    assert_int_equal(dlock_lock_extend(x, 20000), DLOCK_OK);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{span}") > 10000);
    assert_int_equal(dlock_lock_release(x), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{span}"), 0);
    dlock_client_free(b);
}

/* Release the lock passed in after 500 ms (from another thread: the
 * owner id is per hold, so the release needs no particular thread). */
static void *release_later(void *arg)
{
    usleep(500 * 1000);
    dlock_lock_release(arg);
    return NULL;
}

static int under_lock(dlock_lock *l, void *ud)
{
    int *calls = ud;
    (*calls)++;
    return dlock_lock_status(l) == DLOCK_OK ? 7 : -1;
}

static void test_with_lock(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_acquire_options o;
    int calls = 0, res = 0;
    (void)state;
    dlock_acquire_options_init(&o);
    o.wait_ms = 1000;
    o.lease_ms = 5000;
    assert_int_equal(dlock_with_lock(c, "with", &o, under_lock, &calls, &res),
                     DLOCK_OK);
    assert_int_equal(calls, 1);
    assert_int_equal(res, 7);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{with}"), 0);
    dlock_client_free(c);
}

/* Waiting ends at the deadline with TIMEDOUT, and a crashed holder's
 * lease expiry lets a waiter in (nobody announces anything). */
static void test_wait_timeout_and_expiry(void **state)
{
    int strategies[3] = {DLOCK_WAIT_NOTIFY, DLOCK_WAIT_SPIN, DLOCK_WAIT_FAIR};
    int s;
    (void)state;
    for (s = 0; s < 3; s++) {
        dlock_client *c = client_for(&srv, strategies[s], 0);
        dlock_lock *l;
        int64_t t0;
        /* A holder that "crashed": key set by hand with a 300 ms lease. */
        th_cmd_int(&srv, "DEL dlock:{crash}");
        freeReplyObject(th_cmd(&srv, "HSET dlock:{crash} deadbeef:1 1"));
        th_cmd_int(&srv, "PEXPIRE dlock:{crash} 300");
        assert_int_equal(dlock_lock_acquire(&l, c, "crash", 50, 1000),
                         DLOCK_TIMEDOUT);
        t0 = th_now_ms();
        assert_int_equal(dlock_lock_acquire(&l, c, "crash", 10000, 1000),
                         DLOCK_OK);
        /* Woken by the TTL, not by the 10 s deadline. */
        assert_true(th_now_ms() - t0 < 5000);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        dlock_client_free(c);
    }
}

/* ---- faults ------------------------------------------------------------- */

static void test_script_flush(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    int i;
    (void)state;
    for (i = 0; i < 6; i++) {
        dlock_lock *l;
        assert_int_equal(dlock_lock_acquire(&l, c, "flush", 0, 10000),
                         DLOCK_OK);
        freeReplyObject(th_cmd(&srv, "SCRIPT FLUSH"));
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

static void test_server_restart(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l;
    int rc, tries;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "restart", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    th_server_kill9(&srv);
    rc = dlock_lock_acquire(&l, c, "restart", 0, 10000);
    assert_true(rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT);
    assert_true(strlen(dlock_errmsg(c)) > 0);
    assert_int_equal(th_server_restart(&srv), 0);
    /* Pooled connections are dead; the client reconnects by itself. */
    for (tries = 0; tries < 20; tries++) {
        rc = dlock_lock_acquire(&l, c, "restart", 0, 10000);
        if (rc == DLOCK_OK)
            break;
        usleep(100 * 1000);
    }
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void *debug_sleep(void *arg)
{
    (void)arg;
    redisReply *r = th_cmd(&srv, "DEBUG SLEEP 1.5");
    if (r != NULL)
        freeReplyObject(r);
    return NULL;
}

static void test_debug_sleep_times_out(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 300);
    dlock_lock *l;
    pthread_t t;
    int64_t t0;
    int rc;
    (void)state;
    /* Warm the pool so the stall hits a command, not a connect. */
    assert_int_equal(dlock_lock_acquire(&l, c, "sleep", 0, 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    pthread_create(&t, NULL, debug_sleep, NULL);
    usleep(100 * 1000);
    t0 = th_now_ms();
    rc = dlock_lock_acquire(&l, c, "sleep", 0, 10000);
    assert_int_equal(rc, DLOCK_ETIMEDOUT);
    /* Bounded by the command timeout (300 ms, one retry), not the sleep. */
    assert_true(th_now_ms() - t0 < 1400);
    pthread_join(t, NULL);
    /* After the stall everything works, and the maybe-taken lock was
     * given back or is ours to take again. */
    rc = dlock_lock_acquire(&l, c, "sleep", 2000, 10000);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void test_client_kill(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    int i;
    (void)state;
    for (i = 0; i < 10; i++) {
        dlock_lock *l;
        assert_int_equal(dlock_lock_acquire(&l, c, "ckill", 0, 10000),
                         DLOCK_OK);
        freeReplyObject(th_cmd(&srv, "CLIENT KILL TYPE normal SKIPME yes"));
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* ---- bad input ---------------------------------------------------------- */

static void test_bad_arguments(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 0);
    dlock_lock *l = (dlock_lock *)1;
    char longname[600];
    dlock_options o;
    dlock_client *bad = NULL;
    char err[256];
    const char *urls[] = {"redis://",        "http://x",    "redis://h:0",
                          "redis://h:99999", "redis://h/x", ""};
    size_t i;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, NULL, 0, 1000), DLOCK_EINVAL);
    assert_null(l);
    assert_true(strstr(dlock_errmsg(c), "name") != NULL);
    assert_int_equal(dlock_lock_acquire(&l, c, "", 0, 1000), DLOCK_EINVAL);
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(dlock_lock_acquire(&l, c, longname, 0, 1000),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_acquire(&l, c, "ok", 0, 0), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_acquire(&l, c, "ok", 0, -5), DLOCK_EINVAL);
    assert_true(strstr(dlock_errmsg(c), "lease") != NULL);
    assert_int_equal(dlock_lock_acquire(NULL, c, "ok", 0, 1000), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_acquire(&l, NULL, "ok", 0, 1000), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_extend(NULL, 10), DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_set(c, NULL, 1, "x", 1), DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_set(c, "k", 0, "x", 1), DLOCK_EINVAL);
    assert_int_equal(dlock_client_new(NULL, NULL, err, sizeof err),
                     DLOCK_EINVAL);
    dlock_options_init(&o);
    assert_int_equal(dlock_client_new(&bad, &o, err, sizeof err), DLOCK_EINVAL);
    assert_null(bad);
    for (i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        o.servers = &urls[i];
        o.nservers = 1;
        err[0] = '\0';
        assert_int_equal(dlock_client_new(&bad, &o, err, sizeof err),
                         DLOCK_EINVAL);
        assert_true(strlen(err) > 0);
    }
    assert_string_equal(dlock_strerror(DLOCK_BUSY),
                        "lock is held by another owner");
    assert_string_equal(dlock_status_name(DLOCK_EINVAL), "EINVAL");
    assert_string_equal(dlock_strerror(12345), "unknown status");
    dlock_client_free(c);
    dlock_client_free(NULL);
}

static void test_wrong_password(void **state)
{
    th_server ps;
    th_server_opts po = {0};
    dlock_options o;
    dlock_client *c;
    dlock_lock *l;
    char url[512], err[256];
    const char *u = url;
    (void)state;
    if (strcmp(th_transport(), "tcp") != 0)
        skip();
    po.password = "s3cret-pw";
    assert_int_equal(th_server_start(&ps, &po), 0);
    snprintf(url, sizeof url, "redis://:wrong-pw-xyz@127.0.0.1:%d", ps.port);
    dlock_options_init(&o);
    o.servers = &u;
    o.nservers = 1;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, c, "pw", 0, 1000), DLOCK_EAUTH);
    assert_null(strstr(dlock_errmsg(c), "wrong-pw-xyz"));
    dlock_client_free(c);
    /* No password at all: the server's NOAUTH is an authentication
     * failure too, not a generic server error. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ps.port);
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, c, "pw", 0, 1000), DLOCK_EAUTH);
    dlock_client_free(c);
    snprintf(url, sizeof url, "redis://:wrong-pw-xyz@127.0.0.1:%d", ps.port);
    /* The right password from the options overrides the URL's. */
    o.password = "s3cret-pw";
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, c, "pw", 0, 1000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    th_server_stop(&ps);
}

static void test_fake_peers(void **state)
{
    const char *modes[] = {"garbage",  "http",  "silent",
                           "truncate", "close", "wrongtype"};
    size_t i;
    (void)state;
    if (strcmp(th_transport(), "tcp") != 0)
        skip();
    for (i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        int port = th_fake_server_start(modes[i]);
        char url[128], err[256];
        const char *u = url;
        dlock_options o;
        dlock_client *c;
        dlock_lock *l = NULL;
        int64_t t0;
        int rc;
        assert_true(port > 0);
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
        dlock_options_init(&o);
        o.servers = &u;
        o.nservers = 1;
        o.connect_timeout_ms = 300;
        o.command_timeout_ms = 300;
        assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
        t0 = th_now_ms();
        rc = dlock_lock_acquire(&l, c, "fake", 0, 1000);
        assert_true(th_now_ms() - t0 < 3000);
        assert_null(l);
        assert_true(rc < 0);
        assert_true(strlen(dlock_errmsg(c)) > 0);
        if (strcmp(modes[i], "garbage") == 0 || strcmp(modes[i], "http") == 0)
            assert_int_equal(rc, DLOCK_EPROTO);
        if (strcmp(modes[i], "silent") == 0)
            assert_int_equal(rc, DLOCK_ETIMEDOUT);
        if (strcmp(modes[i], "wrongtype") == 0)
            assert_int_equal(rc, DLOCK_EPROTO);
        dlock_client_free(c);
        th_fake_server_stop(port);
    }
}

/* A server that refuses SUBSCRIBE: notify and fair waiters cannot be
 * told of releases, fall back to polling (fair: by refreshing their place)
 * and still get the lock, in order and without lost updates. */
static void test_no_pubsub_fallback(void **state)
{
    th_server ns;
    th_server_opts no = {0};
    int strategies[2] = {DLOCK_WAIT_FAIR, DLOCK_WAIT_NOTIFY};
    int s;
    (void)state;
    no.extra_conf = "rename-command SUBSCRIBE \"\"";
    assert_int_equal(th_server_start(&ns, &no), 0);
    for (s = 0; s < 2; s++) {
        dlock_client *a = client_for(&ns, strategies[s], 300);
        dlock_client *b = client_for(&ns, strategies[s], 300);
        dlock_lock *la, *lb;
        assert_int_equal(dlock_lock_acquire(&la, a, "nosub", 0, 10000),
                         DLOCK_OK);
        /* b waits while a holds it; a releases after 500 ms from a
         * thread of its own. */
        {
            pthread_t t;
            pthread_create(&t, NULL, release_later, la);
            assert_int_equal(dlock_lock_acquire(&lb, b, "nosub", 8000, 10000),
                             DLOCK_OK);
            pthread_join(t, NULL);
        }
        assert_int_equal(dlock_lock_release(lb), DLOCK_OK);
        assert_int_equal(th_cmd_int(&ns, "EXISTS dlock:{nosub}:q"), 0);
        dlock_client_free(a);
        dlock_client_free(b);
    }
    th_server_stop(&ns);
}

/* dlock_client_check: nothing to say about a default server; an eviction
 * policy that can drop lock keys is named; a server that refuses CONFIG
 * is reported as not checked. */
static void test_server_check(void **state)
{
    dlock_client *c = client_for(&srv, DLOCK_WAIT_NOTIFY, 2000);
    th_server ns;
    th_server_opts no = {0};
    char buf[1024];
    redisReply *r;
    (void)state;
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    r = th_cmd(&srv, "CONFIG SET maxmemory-policy volatile-lru");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 1);
    fprintf(stderr, "check: %s", buf);
    assert_non_null(strstr(buf, "maxmemory-policy is volatile-lru"));
    assert_non_null(strstr(buf, "noeviction"));
    /* A tiny buffer: the count is still right, the text cut. */
    assert_int_equal(dlock_client_check(c, buf, 8), 1);
    assert_int_equal(strlen(buf), 7);
    r = th_cmd(&srv, "CONFIG SET maxmemory-policy noeviction");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 0);
    assert_int_equal(dlock_client_check(c, NULL, 0), DLOCK_EINVAL);
    dlock_client_free(c);

    no.extra_conf = "rename-command CONFIG \"\"";
    assert_int_equal(th_server_start(&ns, &no), 0);
    c = client_for(&ns, DLOCK_WAIT_NOTIFY, 2000);
    assert_int_equal(dlock_client_check(c, buf, sizeof buf), 1);
    fprintf(stderr, "check: %s", buf);
    assert_non_null(strstr(buf, "not checked"));
    dlock_client_free(c);
    th_server_stop(&ns);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reentrancy),
        cmocka_unit_test(test_thread_is_owner),
        cmocka_unit_test(test_non_owner_release_refused),
        cmocka_unit_test(test_expired_is_not_owner),
        cmocka_unit_test(test_tokens_increase),
        cmocka_unit_test(test_waiter_hears_release),
        cmocka_unit_test(test_with_lock),
        cmocka_unit_test(test_detach_adopt),
        cmocka_unit_test(test_wait_timeout_and_expiry),
        cmocka_unit_test(test_threads_notify),
        cmocka_unit_test(test_threads_spin),
        cmocka_unit_test(test_threads_fair),
        cmocka_unit_test(test_processes_notify),
        cmocka_unit_test(test_processes_spin),
        cmocka_unit_test(test_script_flush),
        cmocka_unit_test(test_server_check),
        cmocka_unit_test(test_client_kill),
        cmocka_unit_test(test_debug_sleep_times_out),
        cmocka_unit_test(test_server_restart),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_fake_peers),
        cmocka_unit_test(test_no_pubsub_fallback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
