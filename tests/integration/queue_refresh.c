/*
 * queue_refresh.c - a long queue's waiters refresh their places less
 * often (issue 31): a place lasts 3 ms per queued waiter when that is
 * longer than the 3 s waiter TTL, the queueing script says so (its
 * answer's 4th element), and a blocking waiter refreshes at a third of it
 * instead of every second.
 *
 * A queue of FAKE places (live, ahead of everyone) is written straight
 * into the server; a holder keeps the name; WAITERS blocking waiters
 * queue behind. Their first refresh (a second after they queued) learns
 * the queue's length: 6,000 places last 18 s, so the next refresh is 6 s
 * later. The server's count of EVALSHA calls over the following 3 s is
 * the waiters' refreshes (nothing else runs a script meanwhile): before,
 * every waiter refreshed about three times in it; now none does (at most
 * one each, should its first refresh run late on a loaded machine).
 * For the fair lock in both layouts, the fair semaphore, and the event
 * loop's fair lock waiters.
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
#include "fixture.h"
#include "th_loop.h"
#include "th_waiter.h"

#define FAKE 6000
#define WAITERS 4

/* Fill KEYS[1] (a zset of tickets, or with ARGV[2] "list" a list) and
 * KEYS[2] (deadlines) with ARGV[1] places that stay live for 10 minutes,
 * with tickets 1, 3, 5, ... (odd: the string layout reads their
 * deadlines). */
static const char *const FILL =
    "local t = redis.call('TIME') "
    "local dl = (tonumber(t[1]) * 1000 + 600000) * 2048 + 2000 "
    "for i = 1, tonumber(ARGV[1]) do "
    "  local m = 'fake:' .. i "
    "  if ARGV[2] == 'list' then redis.call('RPUSH', KEYS[1], m) "
    "  else redis.call('ZADD', KEYS[1], 2 * i - 1, m) end "
    "  redis.call('ZADD', KEYS[2], string.format('%d', dl), m) "
    "end "
    "return 1";

/* Calls of EVALSHA so far on the test's server (INFO commandstats). */
static long long evalsha_calls(void)
{
    redisReply *r = th_cmd(&srv, "INFO commandstats");
    const char *p;
    long long n = 0;
    assert_non_null(r);
    p = strstr(r->str, "cmdstat_evalsha:calls=");
    if (p != NULL)
        n = atoll(p + strlen("cmdstat_evalsha:calls="));
    freeReplyObject(r);
    return n;
}

/* A permit of a semaphore of 1, in th_acquire_fn's shape. */
static int permit(dlock_lock **l, dlock_client *c, const char *name,
                  int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    return dlock_sem_acquire(l, c, name, 1, &o);
}

/* The number of places queued for NAME (a zset, or the semaphore's
 * list). */
static long long queued(const char *name, int list)
{
    return list ? th_cmd_int(&srv, "LLEN dlock:{%s}:q", name)
                : th_cmd_int(&srv, "ZCARD dlock:{%s}:q", name);
}

/* Run the scene on NAME with clients made by make (the holder's and the
 * waiters'), acquiring with acq (NULL: a lock); list: the queue is the
 * semaphore's list. */
static void scene(dlock_client *(*make)(void), th_acquire_fn acq,
                  const char *name, int list)
{
    dlock_client *hc = make(), *wc[WAITERS];
    th_waiter w[WAITERS];
    dlock_lock *l;
    int64_t end;
    long long e0, e1;
    int i;
    char key[64], qkey[80], qtkey[80];
    redisReply *r;

    snprintf(key, sizeof key, "dlock:{%s}", name);
    snprintf(qkey, sizeof qkey, "%s:q", key);
    snprintf(qtkey, sizeof qtkey, "%s:qt", key);
    assert_non_null(hc);
    assert_int_equal(
        (acq != NULL ? acq : dlock_lock_acquire)(&l, hc, name, 0, 60000),
        DLOCK_OK);
    r = th_cmd(&srv, "EVAL %s 2 %s %s %d %s", FILL, qkey, qtkey, FAKE,
               list ? "list" : "zset");
    assert_non_null(r);
    freeReplyObject(r);
    for (i = 0; i < WAITERS; i++) {
        wc[i] = make();
        assert_non_null(wc[i]);
        w[i] = (th_waiter){.c = wc[i],
                           .name = name,
                           .wait_ms = 6000,
                           .lease_ms = 10000,
                           .acquire = acq,
                           .hold_ms = 0};
        assert_int_equal(th_waiter_start(&w[i]), 0);
    }
    end = th_now_ms() + 10000;
    while (queued(name, list) != FAKE + WAITERS && th_now_ms() < end)
        th_sleep_ms(5);
    assert_int_equal(queued(name, list), FAKE + WAITERS);
    /* Past every waiter's first refresh (1 s after it queued), then 3 s
     * of the places' refreshes. */
    th_sleep_ms(1600);
    e0 = evalsha_calls();
    th_sleep_ms(3000);
    e1 = evalsha_calls();
    printf("%s: %lld refreshes of %d waiters in 3 s\n", name, e1 - e0, WAITERS);
    for (i = 0; i < WAITERS; i++) {
        assert_int_equal(th_waiter_join(&w[i]), 0);
        assert_int_equal(w[i].rc, DLOCK_TIMEDOUT);
        dlock_client_free(wc[i]);
    }
    assert_true(e1 - e0 <= WAITERS);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(hc);
    th_cmd_int(&srv, "DEL %s %s %s:f", qkey, qtkey, key);
}

static dlock_client *fair_client(void)
{
    const char *url = th_url(&srv);
    return th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
}

static dlock_client *fair_string_client(void)
{
    return th_client_string_wait(th_url(&srv), 0, DLOCK_WAIT_FAIR);
}

/* The fair lock, hash layout (acquire.lua). */
static void test_lock(void **state)
{
    (void)state;
    scene(fair_client, NULL, "qr-lock", 0);
}

/* The fair lock, string layout (s_acquire.lua). */
static void test_lock_string(void **state)
{
    (void)state;
    scene(fair_string_client, NULL, "qr-str", 0);
}

/* The fair semaphore (sem_acquire.lua). */
static void test_semaphore(void **state)
{
    (void)state;
    scene(fair_client, permit, "qr-sem", 1);
}

/* The event loop's fair lock waiters (src/loop/ops.c), one per loop. */
static void test_loop_lock(void **state)
{
    dlock_client *hc = fair_client(), *c = fair_client();
    dlock_loop *ls[WAITERS];
    th_seen seen[WAITERS];
    dlock_loop_acquire o = th_loop_opts(c, 6000, 10000);
    dlock_lock *l;
    long long e0, e1;
    int64_t end;
    int i, done;
    redisReply *r;
    (void)state;
    assert_non_null(hc);
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, hc, "qr-loop", 0, 60000), DLOCK_OK);
    r = th_cmd(&srv, "EVAL %s 2 dlock:{qr-loop}:q dlock:{qr-loop}:qt %d zset",
               FILL, FAKE);
    assert_non_null(r);
    freeReplyObject(r);
    o.strategy = DLOCK_WAIT_FAIR;
    for (i = 0; i < WAITERS; i++) {
        ls[i] = th_loop_new(c);
        assert_non_null(ls[i]);
        memset(&seen[i], 0, sizeof seen[i]);
        assert_int_equal(
            dlock_loop_lock(NULL, ls[i], "qr-loop", &o, th_note, &seen[i]),
            DLOCK_OK);
    }
    end = th_now_ms() + 10000;
    while (queued("qr-loop", 0) != FAKE + WAITERS && th_now_ms() < end)
        th_loop_run_for(ls, WAITERS, 5);
    assert_int_equal(queued("qr-loop", 0), FAKE + WAITERS);
    th_loop_run_for(ls, WAITERS, 1600);
    e0 = evalsha_calls();
    th_loop_run_for(ls, WAITERS, 3000);
    e1 = evalsha_calls();
    printf("qr-loop: %lld refreshes of %d waiters in 3 s\n", e1 - e0, WAITERS);
    end = th_now_ms() + 10000;
    do {
        th_loop_run_for(ls, WAITERS, 10);
        for (i = 0, done = 0; i < WAITERS; i++)
            done += seen[i].done;
    } while (done < WAITERS && th_now_ms() < end);
    for (i = 0; i < WAITERS; i++) {
        assert_int_equal(seen[i].status, DLOCK_TIMEDOUT);
        dlock_loop_free(ls[i]);
    }
    assert_true(e1 - e0 <= WAITERS);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    dlock_client_free(hc);
    th_cmd_int(&srv, "DEL dlock:{qr-loop}:q dlock:{qr-loop}:qt "
                     "dlock:{qr-loop}:f");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock),
        cmocka_unit_test(test_lock_string),
        cmocka_unit_test(test_semaphore),
        cmocka_unit_test(test_loop_lock),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
