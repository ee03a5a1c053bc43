/*
 * hold_kinds.c - one body for a lock, a permit and a reader wherever
 * their semantics agree (issue 28: one attempt and one wait for every
 * kind). Each test runs its body for each kind of th_kinds that the
 * setting allows (a permit needs one server):
 *
 *  - a waiter whose user may not use the channels (ACL NOPERM) gets in
 *    by polling with the one warning, and does not ask the server to
 *    SUBSCRIBE again for a while (the back-off: ACL LOG counts one
 *    refused SUBSCRIBE for two waits in a row);
 *  - an attempt against servers that never answer (SIGSTOP) ends within
 *    command_timeout_ms, its fence round and undo included (dlock.h: "a
 *    whole attempt"), single server and Redlock;
 *  - over Redlock, an acquire that a majority granted returns while two
 *    of five nodes are stopped, and its release reaches them behind the
 *    acquire once they run again;
 *  - under every wait strategy a waiter gets in once the holder lets go,
 *    a short wait times out, a cancel ends a wait.
 *
 * Bounds are on our own deadline logic, as in timeout_bound.c: elapsed
 * below 1.5 x the command timeout (the old behaviour: 2 x, or 10 s).
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
#include "th_shared.h"
#include "th_waiter.h"

#define NS 5
#define FIXTURE_NS NS
#include "fixture_n.h"

#define TIMEOUT_MS 1000
#define BOUND_MS (TIMEOUT_MS + TIMEOUT_MS / 2)

/* ---- NOPERM: the warning and the back-off -------------------------------- */

/* A client of srv[0] that logs in as the user without channel permission
 * (made by test_noperm). */
static dlock_client *nochan_client(void)
{
    const char *url = th_url(&srv[0]);
    dlock_client *c =
        th_client_user(&url, 1, DLOCK_WAIT_FAIR, 0, 0, "nochan", "pw");
    assert_non_null(c);
    return c;
}

/* The SUBSCRIBEs srv[0] refused for want of channel permission since the
 * last ACL LOG RESET (a script's refused PUBLISH is logged in context
 * "lua", not counted). */
static long long refused_subscribes(void)
{
    redisReply *r = th_cmd(&srv[0], "ACL LOG");
    long long n = 0;
    size_t i, j;
    assert_non_null(r);
    for (i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        long long count = 0;
        int channel = 0, top = 0;
        for (j = 0; j + 1 < e->elements; j += 2) {
            const char *k = e->element[j]->str;
            const redisReply *v = e->element[j + 1];
            if (strcmp(k, "count") == 0)
                count = v->integer;
            else if (strcmp(k, "reason") == 0)
                channel = strcmp(v->str, "channel") == 0;
            else if (strcmp(k, "context") == 0)
                top = strcmp(v->str, "toplevel") == 0;
        }
        if (channel && top)
            n += count;
    }
    freeReplyObject(r);
    return n;
}

/* The kind a waiter thread takes, and the message its acquire left (the
 * message is the thread's own): set and read around one waiter only. */
static const th_kind *wait_kind;
static char wait_msg[512];

static int acquire_keep_msg(dlock_lock **l, dlock_client *c, const char *name,
                            int64_t wait_ms, int64_t lease_ms)
{
    int rc = wait_kind->acquire(l, c, name, wait_ms, lease_ms);
    snprintf(wait_msg, sizeof wait_msg, "%s", dlock_errmsg(c));
    return rc;
}

/* One wait of kind k on b for NAME while a holds its blocker: the waiter
 * gets in once it is released; its message is copied into msg. */
static void noperm_wait(const th_kind *k, dlock_client *a, dlock_client *b,
                        const char *name, unsigned long long nth, char *msg,
                        size_t len)
{
    th_waiter w = {.c = b,
                   .name = name,
                   .wait_ms = 20000,
                   .lease_ms = 10000,
                   .acquire = acquire_keep_msg};
    dlock_lock *l = NULL;
    wait_kind = k;
    assert_int_equal(k->blocker(&l, a, name, 0, 10000), DLOCK_OK);
    assert_int_equal(th_waiter_start(&w), 0);
    assert_int_equal(th_wait_busy(b, nth, 10000), 0);
    th_sleep_ms(100);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_waiter_join(&w), 0);
    snprintf(msg, len, "%s", wait_msg);
    print_message("%s: waiter %d: %s\n", k->what, w.rc, msg);
    assert_int_equal(w.rc, DLOCK_OK);
}

/* Without channel permission, every kind's waiter gets in, with the one
 * warning (NOPERM and the ACL rule that fixes it) the first time; and a
 * second wait right after does not SUBSCRIBE again (the back-off). */
static void test_noperm(void **state)
{
    redisReply *r;
    int i;
    (void)state;
    r = th_cmd(&srv[0], "ACL SETUSER nochan on >pw ~* +@all resetchannels");
    assert_true(r != NULL && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    for (i = 0; i < TH_NKINDS; i++) {
        const th_kind *k = &th_kinds[i];
        dlock_client *a = nochan_client(), *b = nochan_client();
        char name[64], msg[512];
        long long subs;
        snprintf(name, sizeof name, "np-%s", k->what);
        freeReplyObject(th_cmd(&srv[0], "ACL LOG RESET"));
        noperm_wait(k, a, b, name, 1, msg, sizeof msg);
        assert_non_null(strstr(msg, "NOPERM"));
        assert_non_null(strstr(msg, "&dlock:*"));
        noperm_wait(k, a, b, name, 2, msg, sizeof msg);
        assert_string_equal(msg, "");
        subs = refused_subscribes();
        print_message("%s: %lld refused SUBSCRIBE(s) for two waits\n", k->what,
                      subs);
        assert_int_equal(subs, 1);
        dlock_client_free(a);
        dlock_client_free(b);
    }
}

/* ---- the attempt's bound ------------------------------------------------- */

/* Does server i hold NAME of kind k for anyone (a lock's key, a live
 * permit or reader)? */
static int held_on(int i, const th_kind *k, const char *name)
{
    if (k->rw < 0)
        return th_cmd_int(&srv[i], "EXISTS dlock:{%s}", name) != 0;
    return th_shared_held(&srv[i], name, k->rw) != 0;
}

/* Wait (bounded) until server i holds NAME of kind k no more; 1 once. */
static int gone(int i, const th_kind *k, const char *name)
{
    int64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end) {
        if (!held_on(i, k, name))
            return 1;
        th_sleep_ms(20);
    }
    return 0;
}

/* One try of kind k for NAME on c; the status, the time in *took. */
static int timed_try(const th_kind *k, dlock_client *c, const char *name,
                     int64_t *took)
{
    dlock_lock *l = NULL;
    int64_t t0 = th_now_ms();
    int rc = k->acquire(&l, c, name, 0, 30000);
    *took = th_now_ms() - t0;
    print_message("%s %s: %s after %lld ms: %s\n", k->what, name,
                  dlock_status_name(rc), (long long)*took, dlock_errmsg(c));
    assert_null(l);
    return rc;
}

/* One server, stopped after a pooled connection carried a grant: every
 * kind's try ends within the command timeout (undo included), and what
 * it may have taken is given back once the server runs again. */
static void test_bound_single(void **state)
{
    const char *urls[1] = {th_url(&srv[0])};
    int i;
    (void)state;
    for (i = 0; i < TH_NKINDS; i++) {
        const th_kind *k = &th_kinds[i];
        dlock_client *c =
            th_client(urls, 1, DLOCK_WAIT_NOTIFY, TIMEOUT_MS, TIMEOUT_MS);
        dlock_lock *l = NULL;
        char name[64], warm[64];
        int64_t took;
        int rc;
        assert_non_null(c);
        snprintf(name, sizeof name, "tb1-%s", k->what);
        snprintf(warm, sizeof warm, "tb1-warm-%s", k->what);
        assert_int_equal(k->acquire(&l, c, warm, 0, 30000), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        th_server_pause(&srv[0]);
        rc = timed_try(k, c, name, &took);
        th_server_resume(&srv[0]);
        assert_int_equal(rc, DLOCK_ETIMEDOUT);
        assert_true(took < BOUND_MS);
        assert_true(gone(0, k, name));
        dlock_client_free(c);
    }
}

/* Redlock over three, two stopped: no majority, within the bound, for
 * each kind Redlock allows; the node that granted is given back. */
static void test_bound_redlock(void **state)
{
    const char *urls[3] = {th_url(&srv[0]), th_url(&srv[1]), th_url(&srv[2])};
    int i;
    (void)state;
    for (i = 0; i < TH_NKINDS; i++) {
        const th_kind *k = &th_kinds[i];
        dlock_client *c;
        dlock_lock *l = NULL;
        char name[64], warm[64];
        int64_t took;
        int rc, held0;
        if (!k->redlock)
            continue;
        c = th_client(urls, 3, DLOCK_WAIT_NOTIFY, TIMEOUT_MS, TIMEOUT_MS);
        assert_non_null(c);
        snprintf(name, sizeof name, "tb3-%s", k->what);
        snprintf(warm, sizeof warm, "tb3-warm-%s", k->what);
        assert_int_equal(k->acquire(&l, c, warm, 0, 30000), DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        th_server_pause(&srv[1]);
        th_server_pause(&srv[2]);
        rc = timed_try(k, c, name, &took);
        held0 = held_on(0, k, name);
        th_server_resume(&srv[1]);
        th_server_resume(&srv[2]);
        assert_int_equal(rc, DLOCK_NO_QUORUM);
        assert_true(took < BOUND_MS);
        assert_false(held0);
        assert_true(gone(1, k, name));
        assert_true(gone(2, k, name));
        dlock_client_free(c);
    }
}

/* ---- Redlock's early return ---------------------------------------------- */

/* Acquire and release NAME of kind k (lease 100 s) in a thread. */
typedef struct cycle {
    const th_kind *k;
    dlock_client *c;
    const char *name;
    int acq, rel;
    int done;
} cycle;

static void *cycle_main(void *arg)
{
    cycle *y = arg;
    dlock_lock *l = NULL;
    y->acq = y->k->acquire(&l, y->c, y->name, 0, 600000);
    if (y->acq == DLOCK_OK)
        y->rel = dlock_lock_release(l);
    __atomic_store_n(&y->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Run fn(arg) in a thread while nodes 3 and 4 are stopped (SIGSTOP):
 * wait for *done up to 25 s (a call that waited for the stopped nodes
 * would take 60 s, the command timeout and lease/10, in these tests;
 * 25 s of patience keeps a loaded machine from failing them: it takes
 * about 10 ms), then resume the nodes and join. Returns whether fn was
 * done while they were stopped. */
static int while_stopped(void *(*fn)(void *), void *arg, const int *done,
                         const char *what)
{
    int64_t t0, end;
    pthread_t t;
    int was;
    th_server_pause(&srv[3]);
    th_server_pause(&srv[4]);
    t0 = th_now_ms();
    end = t0 + 25000;
    assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
    while (!__atomic_load_n(done, __ATOMIC_SEQ_CST) && th_now_ms() < end)
        th_sleep_ms(10);
    was = __atomic_load_n(done, __ATOMIC_SEQ_CST);
    print_message("%s with two nodes stopped: %d (%lld ms)\n", what, was,
                  (long long)(th_now_ms() - t0));
    th_server_resume(&srv[3]);
    th_server_resume(&srv[4]);
    pthread_join(t, NULL);
    return was;
}

/* Two of five nodes stopped: for each kind Redlock allows, the acquire
 * and the release return with the majority while those nodes are still
 * stopped (a call that waited for them would take 60 s, the command
 * timeout and lease/10, each);
 * once they run again they process the acquire, then the release, and
 * keep nothing. */
static void test_early_majority(void **state)
{
    const char *urls[NS];
    int i;
    (void)state;
    fixture_urls(urls);
    for (i = 0; i < TH_NKINDS; i++) {
        const th_kind *k = &th_kinds[i];
        dlock_client *c;
        dlock_lock *l = NULL;
        cycle y = {0};
        char name[64], what[80];
        if (!k->redlock)
            continue;
        c = th_client(urls, NS, DLOCK_WAIT_FAIR, 60000, 2000);
        assert_non_null(c);
        snprintf(name, sizeof name, "early-%s", k->what);
        /* Warm the pools and the script caches first, and let every
         * node answer the release (it returns at a majority; the
         * watchdog settles the connections given up on within a second):
         * a connection still to be opened to a stopped node is waited
         * for up to the connect timeout, and so is a node not known to
         * have the script (abandon.c: a NOSCRIPT there must be resent),
         * which a node reached only once the majority had answered (its
         * connection opened late, its answer not read) still is: a
         * second cycle, on the pooled connections, has every node
         * answer both scripts. One cycle left that to chance (the first
         * answers of an earlier test's reopened connections): about one
         * run in ten then took the whole step (lease/10) here. */
        for (int w = 0; w < 2; w++) {
            assert_int_equal(k->acquire(&l, c, name, 0, 10000), DLOCK_OK);
            assert_int_equal(dlock_lock_release(l), DLOCK_OK);
            for (int j = 0; j < NS; j++)
                assert_true(gone(j, k, name));
            th_sleep_ms(1100);
        }
        y.k = k;
        y.c = c;
        y.name = name;
        snprintf(what, sizeof what, "%s: returned", k->what);
        assert_true(while_stopped(cycle_main, &y, &y.done, what));
        assert_int_equal(y.acq, DLOCK_OK);
        assert_int_equal(y.rel, DLOCK_OK);
        assert_true(gone(3, k, name));
        assert_true(gone(4, k, name));
        dlock_client_free(c);
    }
}

/* A release handed to a thread (the hold in y->l). */
typedef struct rel_job {
    dlock_lock *l;
    int rc;
    int done;
} rel_job;

static void *release_main(void *arg)
{
    rel_job *y = arg;
    y->rc = dlock_lock_release(y->l);
    __atomic_store_n(&y->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* The first release of a client (a script the stopped nodes never ran
 * for it: their script caches unknown to it) with two of five nodes
 * stopped returns with the majority: it goes to those nodes with the
 * script's source (no NOSCRIPT to wait for), so they need not answer.
 * They did once have to: the release then took its whole step (60 s
 * here). Once they run again they release it too. */
static void test_first_release_stopped(void **state)
{
    const char *urls[NS];
    int i;
    (void)state;
    fixture_urls(urls);
    for (i = 0; i < TH_NKINDS; i++) {
        const th_kind *k = &th_kinds[i];
        dlock_client *c;
        rel_job y = {0};
        char name[64], what[80];
        int64_t end;
        int j;
        if (!k->redlock)
            continue;
        c = th_client(urls, NS, DLOCK_WAIT_FAIR, 60000, 2000);
        assert_non_null(c);
        snprintf(name, sizeof name, "firstrel-%s", k->what);
        assert_int_equal(k->acquire(&y.l, c, name, 0, 600000), DLOCK_OK);
        for (j = 0; j < NS; j++) { /* every node has it (bounded) */
            end = th_now_ms() + 10000;
            while (!held_on(j, k, name) && th_now_ms() < end)
                th_sleep_ms(20);
            assert_true(held_on(j, k, name));
        }
        snprintf(what, sizeof what, "%s: released", k->what);
        assert_true(while_stopped(release_main, &y, &y.done, what));
        assert_int_equal(y.rc, DLOCK_OK);
        for (j = 0; j < NS; j++) /* the stopped ones too, once resumed */
            assert_true(gone(j, k, name));
        dlock_client_free(c);
    }
}

/* ---- waiting, every strategy ------------------------------------------- */

/* For every kind and strategy: a waiter gets in once the holder lets go;
 * a short wait times out with its message; a cancel ends a wait. */
static void test_wait_every_strategy(void **state)
{
    const char *url = th_url(&srv[0]);
    int strategies[3] = {DLOCK_WAIT_FAIR, DLOCK_WAIT_NOTIFY, DLOCK_WAIT_SPIN};
    int i, s;
    (void)state;
    for (i = 0; i < TH_NKINDS; i++)
        for (s = 0; s < 3; s++) {
            const th_kind *k = &th_kinds[i];
            dlock_client *a = th_client(&url, 1, strategies[s], 0, 0);
            dlock_client *b = th_client(&url, 1, strategies[s], 0, 0);
            th_waiter w = {.c = b,
                           .name = NULL,
                           .wait_ms = 20000,
                           .lease_ms = 10000,
                           .acquire = k->acquire};
            dlock_lock *l = NULL, *x = NULL;
            char name[64];
            snprintf(name, sizeof name, "ws-%s-%d", k->what, s);
            w.name = name;
            assert_int_equal(k->blocker(&l, a, name, 0, 10000), DLOCK_OK);
            /* A short wait: timed out, said so. */
            assert_int_equal(k->acquire(&x, b, name, 50, 10000),
                             DLOCK_TIMEDOUT);
            assert_non_null(strstr(dlock_errmsg(b), "gave up waiting"));
            assert_int_equal(th_waiter_start(&w), 0);
            th_sleep_ms(100);
            assert_int_equal(dlock_lock_release(l), DLOCK_OK);
            assert_int_equal(th_waiter_join(&w), 0);
            print_message("%s, strategy %d: waiter %s\n", k->what,
                          strategies[s], dlock_status_name(w.rc));
            assert_int_equal(w.rc, DLOCK_OK);
            /* A cancel ends a wait. */
            assert_int_equal(k->blocker(&l, a, name, 0, 10000), DLOCK_OK);
            w.wait_ms = -1;
            assert_int_equal(th_waiter_start(&w), 0);
            th_sleep_ms(100);
            dlock_client_cancel(b);
            assert_int_equal(th_waiter_join(&w), 0);
            assert_int_equal(w.rc, DLOCK_CANCELED);
            assert_int_equal(dlock_lock_release(l), DLOCK_OK);
            dlock_client_free(a);
            dlock_client_free(b);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noperm),
        cmocka_unit_test(test_bound_single),
        cmocka_unit_test(test_bound_redlock),
        cmocka_unit_test(test_early_majority),
        cmocka_unit_test(test_first_release_stopped),
        cmocka_unit_test(test_wait_every_strategy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
