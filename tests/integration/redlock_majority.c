/*
 * redlock_majority.c - a Redlock lock must not stay on a bare majority
 * (issue 29, item 3). An acquire may return once a majority granted, but
 * every server is still asked: a server whose connection was still being
 * opened when the majority answered gets the request as soon as it opens.
 * A server that missed the acquire altogether (stopped for longer than the
 * step) is taken back by the next renewal, never from another owner. With
 * the lock on every server, one server restarted without its data does not
 * let a second owner in. Three servers, fresh clients (the connections are
 * opened in parallel by the step: opener.c).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

#define NS 3
#define FIXTURE_NS NS
/* The watchdog locks' lease: renewed every 2 s; a step waits at most
 * lease/10 for a server (the command timeout of their clients is 1 s). */
#define LEASE 6000
#include "fixture_n.h"

/* A fresh Redlock client over the three servers. */
static dlock_client *rl_client(int64_t cmd_timeout_ms)
{
    const char *urls[NS];
    fixture_urls(urls);
    return th_client(urls, NS, DLOCK_WAIT_NOTIFY, cmd_timeout_ms, 2000);
}

/* 1 when server i holds lock NAME for OWNER (its key's field). */
static int holds(int i, const char *name, const char *owner)
{
    redisReply *r = th_cmd(&srv[i], "HEXISTS dlock:{%s} %s", name, owner);
    int yes = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r != NULL)
        freeReplyObject(r);
    return yes;
}

/* Wait (bounded, generously) until server i holds NAME for OWNER. */
static int comes_to(int i, const char *name, const char *owner)
{
    int64_t end = th_now_ms() + 10000;
    while (!holds(i, name, owner) && th_now_ms() < end)
        th_sleep_ms(20);
    return holds(i, name, owner);
}

/* Resume server *arg after 300 ms. */
static void *resume_later(void *arg)
{
    th_sleep_ms(300);
    th_server_resume((th_server *)arg);
    return NULL;
}

/* Wait until the client's watchdog has renewed n more times (bounded). */
static void wait_renewals(dlock_client *c, uint64_t n)
{
    dlock_stats st;
    uint64_t from;
    int64_t end = th_now_ms() + 20000;
    dlock_client_stats(c, &st);
    from = st.renewals;
    do {
        th_sleep_ms(20);
        dlock_client_stats(c, &st);
    } while (st.renewals < from + n && th_now_ms() < end);
    assert_true(st.renewals >= from + n);
}

/* A fresh client's first acquire, the third server slow to accept its
 * new connection (stopped, resumed 300 ms later, well within the step's
 * 3 s): the other two grant long before, the acquire returns with them,
 * and the third must still get the request (no watchdog here: nothing
 * else would bring the lock there). */
static void test_late_open_still_asked(void **state)
{
    dlock_client *c = rl_client(5000);
    dlock_lock *l;
    pthread_t t;
    (void)state;
    assert_non_null(c);
    th_server_pause(&srv[2]);
    assert_int_equal(pthread_create(&t, NULL, resume_later, &srv[2]), 0);
    assert_int_equal(dlock_lock_acquire(&l, c, "maj-late", 0, 30000), DLOCK_OK);
    pthread_join(t, NULL);
    assert_true(holds(0, "maj-late", dlock_lock_owner(l)));
    assert_true(holds(1, "maj-late", dlock_lock_owner(l)));
    if (!comes_to(2, "maj-late", dlock_lock_owner(l)))
        fprintf(stderr, "server 2 never got the acquire\n");
    assert_true(holds(2, "maj-late", dlock_lock_owner(l)));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[2], "EXISTS dlock:{maj-late}"), 0);
    dlock_client_free(c);
}

/* Take NAME with the watchdog on a fresh client while server 2 is stopped
 * for the whole acquire (its step ends at lease/10 = 600 ms): the lock is
 * on servers 0 and 1 only. Server 2 runs again on return. */
static dlock_lock *take_without_2(dlock_client *c, const char *name)
{
    dlock_acquire_options o;
    dlock_lock *l = NULL;
    dlock_acquire_options_init(&o);
    o.lease_ms = LEASE;
    o.watchdog = 1;
    th_server_pause(&srv[2]);
    assert_int_equal(dlock_lock_acquire_ex(&l, c, name, &o), DLOCK_OK);
    th_server_resume(&srv[2]);
    assert_true(holds(0, name, dlock_lock_owner(l)));
    assert_true(holds(1, name, dlock_lock_owner(l)));
    return l;
}

/* The fence hash's field F of NAME on server i, as a number (0: none). */
static unsigned long long fence_field(int i, const char *name, const char *f)
{
    redisReply *r = th_cmd(&srv[i], "HGET dlock:{%s}:f %s", name, f);
    unsigned long long v = 0;
    if (r != NULL && r->type == REDIS_REPLY_STRING)
        v = strtoull(r->str, NULL, 10);
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* A server that missed the acquire is taken back by the renewals: after
 * two rounds it holds the lock for the owner, with its lease. */
static void test_renewal_takes_back(void **state)
{
    dlock_client *c = rl_client(1000);
    dlock_lock *l;
    int of;
    (void)state;
    assert_non_null(c);
    l = take_without_2(c, "maj-renew");
    wait_renewals(c, 2);
    if (!holds(2, "maj-renew", dlock_lock_owner(l)))
        fprintf(stderr, "renewals did not take server 2 back\n");
    assert_true(holds(2, "maj-renew", dlock_lock_owner(l)));
    assert_true(th_cmd_int(&srv[2], "PTTL dlock:{maj-renew}") > 0);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_int_equal(dlock_lock_nodes_holding(l, &of), NS);
    assert_int_equal(of, NS);
    assert_int_equal(dlock_lock_extend(l, LEASE), DLOCK_OK);
    assert_null(strstr(dlock_errmsg(c), "warning"));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv[2], "EXISTS dlock:{maj-renew}"), 0);
    dlock_client_free(c);
}

/* Taking back never steals: server 2 is held by another owner; our
 * renewals keep the lock (a majority) and leave server 2 to that owner. */
static void test_renewal_never_steals(void **state)
{
    dlock_client *c = rl_client(1000);
    dlock_acquire_options o;
    dlock_lock *l = NULL;
    redisReply *r;
    int of;
    (void)state;
    assert_non_null(c);
    r = th_cmd(&srv[2], "HSET dlock:{maj-steal} other:1:1 1");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&srv[2], "PEXPIRE dlock:{maj-steal} 60000"), 1);
    dlock_acquire_options_init(&o);
    o.lease_ms = LEASE;
    o.watchdog = 1;
    assert_int_equal(dlock_lock_acquire_ex(&l, c, "maj-steal", &o), DLOCK_OK);
    wait_renewals(c, 2);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_false(holds(2, "maj-steal", dlock_lock_owner(l)));
    assert_true(holds(2, "maj-steal", "other:1:1"));
    /* Said so: held on 2 of 3, a bare majority. */
    assert_int_equal(dlock_lock_nodes_holding(l, &of), 2);
    assert_int_equal(of, NS);
    assert_int_equal(dlock_lock_extend(l, LEASE), DLOCK_OK);
    fprintf(stderr, "extend: %s\n", dlock_errmsg(c));
    assert_non_null(strstr(dlock_errmsg(c), "held on 2 of 3 servers"));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_true(holds(2, "maj-steal", "other:1:1"));
    th_cmd_int(&srv[2], "DEL dlock:{maj-steal}");
    dlock_client_free(c);
}

/* A take-back that reaches a server after the hold's release there must
 * not bring the lock back: the release of the last level notes the
 * hold's token where it finds no hold (field x), and a take-back leaves
 * such a server alone. Both halves: a release that finds no hold on
 * server 2 leaves x there; a hold whose token server 2 has as x is not taken back by its
 * renewals. */
static void test_released_not_taken_back(void **state)
{
    dlock_client *c = rl_client(1000);
    dlock_lock *l;
    unsigned long long tok;
    redisReply *r;
    int64_t end;
    (void)state;
    assert_non_null(c);
    /* Held on all three, then gone from server 2 (as after a restart
     * there without data): the release finds no hold there. */
    assert_int_equal(dlock_lock_acquire(&l, c, "maj-rel", 0, LEASE), DLOCK_OK);
    assert_true(comes_to(2, "maj-rel", dlock_lock_owner(l)));
    assert_int_equal(th_cmd_int(&srv[2], "DEL dlock:{maj-rel}"), 1);
    tok = (unsigned long long)dlock_lock_token(l);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    /* (The release returns with the majority: server 2's may follow.) */
    end = th_now_ms() + 10000;
    while (fence_field(2, "maj-rel", "x") != tok && th_now_ms() < end)
        th_sleep_ms(20);
    assert_true(fence_field(2, "maj-rel", "x") == tok);

    /* A fresh client: a pooled connection to server 2 would carry the
     * acquire there (given up on, not withdrawn) once it runs again. */
    dlock_client_free(c);
    c = rl_client(1000);
    assert_non_null(c);
    l = take_without_2(c, "maj-rel2");
    tok = (unsigned long long)dlock_lock_token(l);
    r = th_cmd(&srv[2], "HSET dlock:{maj-rel2}:f x %llu", tok);
    assert_non_null(r);
    freeReplyObject(r);
    wait_renewals(c, 2);
    assert_false(holds(2, "maj-rel2", dlock_lock_owner(l)));
    assert_int_equal(dlock_lock_nodes_holding(l, NULL), 2);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* The double owner of the issue: the lock taken while server 2 was
 * stopped, renewed for two rounds with server 2 running, then server 0
 * killed and restarted without its data (these servers keep none). A
 * second client must find the lock busy: servers 1 and 2 hold it. */
static void test_restart_without_data(void **state)
{
    dlock_client *c = rl_client(1000), *c2;
    dlock_lock *l, *l2 = NULL;
    int rc;
    (void)state;
    assert_non_null(c);
    l = take_without_2(c, "maj-amnesia");
    wait_renewals(c, 2);
    th_server_kill9(&srv[0]);
    assert_int_equal(th_server_restart(&srv[0]), 0);
    assert_int_equal(th_cmd_int(&srv[0], "EXISTS dlock:{maj-amnesia}"), 0);
    c2 = rl_client(5000);
    assert_non_null(c2);
    rc = dlock_lock_acquire(&l2, c2, "maj-amnesia", 0, 30000);
    if (rc == DLOCK_OK)
        fprintf(stderr, "a second owner took the lock: 0=%d 1=%d 2=%d\n",
                holds(0, "maj-amnesia", dlock_lock_owner(l)),
                holds(1, "maj-amnesia", dlock_lock_owner(l)),
                holds(2, "maj-amnesia", dlock_lock_owner(l)));
    assert_int_equal(rc, DLOCK_BUSY);
    assert_null(l2);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c2);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_open_still_asked),
        cmocka_unit_test(test_renewal_takes_back),
        cmocka_unit_test(test_renewal_never_steals),
        cmocka_unit_test(test_released_not_taken_back),
        cmocka_unit_test(test_restart_without_data),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
