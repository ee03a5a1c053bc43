/*
 * release_mark.c - a release announces itself only when someone waits:
 * the waiters' mark ('#n' in the lock hash, acquire.lua) that a waiting
 * attempt sets. Those who wait without a fair queue entry must set it
 * too, or they would sleep until their timer: a reader waiting for a
 * writer (rw_acquire.lua) and an election observer (elect_leader.lua).
 * Each is checked by what woke it: the release's message (the client's
 * wakeups count), not its timer. And a release nobody waits for
 * publishes nothing. Counts, not times.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

static th_server srv;

static int setup(void **state)
{
    (void)state;
    return th_server_start(&srv, NULL);
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&srv);
    return 0;
}

static dlock_client *client(int strategy)
{
    const char *url = th_url(&srv);
    dlock_client *c = th_client(&url, 1, strategy, 0, 0);
    assert_non_null(c);
    return c;
}

/* Wait (bounded) until NAME's hold carries the waiters' mark. */
static void await_mark(const char *name)
{
    int64_t end = th_now_ms() + 10000;
    while (th_cmd_int(&srv, "HEXISTS dlock:{%s} #n", name) != 1) {
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
}

static uint64_t wakeups(dlock_client *c)
{
    dlock_stats st;
    dlock_client_stats(c, &st);
    return st.wakeups;
}

/* Wait (bounded) until c counts a wait: an attempt of its waiting loop
 * found the lock held. */
static void await_waits(dlock_client *c)
{
    int64_t end = th_now_ms() + 10000;
    dlock_stats st;
    for (;;) {
        dlock_client_stats(c, &st);
        if (st.waits >= 1)
            break;
        assert_true(th_now_ms() < end);
        th_sleep_ms(2);
    }
}

/* A release with nobody waiting: no PUBLISH. */
static void test_quiet_release(void **state)
{
    dlock_client *c = client(DLOCK_WAIT_FAIR);
    dlock_lock *l;
    long long after;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "rm-quiet", 0, 10000), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "HEXISTS dlock:{rm-quiet} #n"), 0);
    {
        redisReply *r = th_cmd(&srv, "CONFIG RESETSTAT");
        assert_non_null(r);
        freeReplyObject(r);
    }
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    {
        redisReply *r = th_cmd(&srv, "INFO commandstats");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        after = strstr(r->str, "cmdstat_publish:") != NULL;
        freeReplyObject(r);
    }
    assert_int_equal(after, 0);
    dlock_client_free(c);
}

typedef struct reader {
    dlock_client *c;
    dlock_lock *l;
    int rc;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = 20000;
    o.lease_ms = 10000;
    r->rc = dlock_rw_acquire_shared(&r->l, r->c, "rm-rw", 0, &o);
    return NULL;
}

/* A reader waiting for a writer marks the writer's hold, and the
 * writer's release wakes it by its message. */
static void test_reader_woken(void **state)
{
    dlock_client *cw = client(DLOCK_WAIT_FAIR);
    reader r = {.c = client(DLOCK_WAIT_FAIR)};
    dlock_lock *w;
    pthread_t t;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&w, cw, "rm-rw", 0, 30000), DLOCK_OK);
    assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
    /* Its first attempt marks the hold before it subscribes; wait for an
     * attempt of the waiting loop (subscribed by then) to find it held. */
    await_waits(r.c);
    assert_int_equal(th_cmd_int(&srv, "HEXISTS dlock:{rm-rw} #n"), 1);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_true(wakeups(r.c) >= 1);
    assert_int_equal(dlock_lock_release(r.l), DLOCK_OK);
    dlock_client_free(cw);
    dlock_client_free(r.c);
}

typedef struct observer {
    dlock_client *c;
    dlock_leader_info known, next;
    int rc;
} observer;

static void *observer_main(void *arg)
{
    observer *o = arg;
    o->rc = dlock_leader_wait(o->c, "rm-el", &o->known, 20000, &o->next);
    return NULL;
}

/* An election observer marks the leader's hold when it looks, and the
 * leader's resignation wakes it by its message. */
static void test_observer_woken(void **state)
{
    dlock_client *cl = client(DLOCK_WAIT_FAIR);
    observer o = {.c = client(DLOCK_WAIT_FAIR)};
    dlock_election *e;
    dlock_acquire_options ao;
    pthread_t t;
    (void)state;
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 30000;
    assert_int_equal(dlock_campaign(&e, cl, "rm-el", "v", &ao), DLOCK_OK);
    assert_int_equal(dlock_leader(o.c, "rm-el", &o.known), DLOCK_OK);
    assert_int_equal(o.known.leading, 1);
    /* That look marked the hold already: clear it, so that the mark
     * found below is the waiting observer's own. */
    assert_int_equal(th_cmd_int(&srv, "HDEL dlock:{rm-el} #n"), 1);
    assert_int_equal(pthread_create(&t, NULL, observer_main, &o), 0);
    await_mark("rm-el");
    assert_int_equal(dlock_election_resign(e), DLOCK_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(o.rc, DLOCK_OK);
    assert_int_equal(o.next.leading, 0);
    assert_true(wakeups(o.c) >= 1);
    dlock_client_free(cl);
    dlock_client_free(o.c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quiet_release),
        cmocka_unit_test(test_reader_woken),
        cmocka_unit_test(test_observer_woken),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
