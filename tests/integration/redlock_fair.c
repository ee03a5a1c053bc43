/*
 * redlock_fair.c - the default wait strategy (fair) over 5 independent
 * redis-servers (issue 18): waiters queue on every node at one ticket
 * and are served in arrival order across processes; a release wakes the
 * one waiting process whose turn it is, not every waiting process (the
 * waiters' wake-ups add up to one per hand-over); mutual exclusion and
 * strictly increasing fencing tokens with 8 contending processes, every
 * one of which gets the lock (no starvation, no timeout); and a queued
 * waiter killed -9 holds the others up only within the documented bound.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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
#include "th_procs.h"

#define NS 5
#define FIXTURE_NS NS
#include "fixture_n.h"

/* A Redlock client over all 5 servers with the default wait strategy
 * (a th_client_fn: arg unused). */
static dlock_client *rl_client(void *arg)
{
    const char *urls[NS];
    dlock_options o;
    dlock_client *c = NULL;
    char err[256];
    (void)arg;
    fixture_urls(urls);
    dlock_options_init(&o);
    o.servers = urls;
    o.nservers = NS;
    o.tls_ca_file = th_ca_file();
    if (dlock_client_new(&c, &o, err, sizeof err) != DLOCK_OK) {
        fprintf(stderr, "dlock_client_new: %s\n", err);
        if (getpid() != main_pid)
            _exit(9); /* a forked child must not longjmp into cmocka */
    }
    assert_non_null(c);
    return c;
}

/* The holder process (th_proc_holder) with a Redlock client. */
static pid_t holder(const char *name, int *ready_fd, int *go_fd)
{
    pid_t p = th_proc_holder(rl_client, NULL, name, ready_fd, go_fd);
    assert_true(p > 0);
    return p;
}

/* A waiter's record: RPUSH "<idx>:<token>:<wakeups>" onto the list arg
 * on server 0. */
static void record_grant(dlock_client *c, dlock_lock *l, int idx, void *arg)
{
    dlock_stats st;
    redisReply *r;
    dlock_client_stats(c, &st);
    r = th_cmd(&srv[0], "RPUSH %s %d:%llu:%llu", (const char *)arg, idx,
               (unsigned long long)dlock_lock_token(l),
               (unsigned long long)st.wakeups);
    if (r != NULL)
        freeReplyObject(r);
}

/* A waiter process: acquire (wait 30 s), RPUSH "<idx>:<token>:<wakeups>"
 * onto LIST on server 0, hold briefly (20 ms), release. */
static pid_t waiter(const char *name, int idx, const char *list)
{
    const th_proc_waiter w = {.client = rl_client,
                              .name = name,
                              .wait_ms = 30000,
                              .lease_ms = 5000,
                              .hold_ms = 20,
                              .record = record_grant,
                              .record_arg = (void *)list};
    return th_proc_waiter_start(&w, idx);
}

/* Arrival order is service order, on every node; each hand-over wakes one
 * process: the wake-ups of all waiters add up to about one each (a herd
 * would wake every waiting process on every release: 1 + 2 + ... + NW). */
static void test_order_and_one_wakeup(void **state)
{
    enum { NW = 6 };
    pid_t h, w[NW];
    int rfd, gfd, i;
    unsigned long long wakeups = 0, last_tok = 0;
    char b;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv[0], "DEL test:rlfair:order");
    h = holder("rl-fair", &rfd, &gfd);
    assert_int_equal(read(rfd, &b, 1), 1);
    for (i = 0; i < NW; i++) {
        w[i] = waiter("rl-fair", i, "test:rlfair:order");
        th_sleep_ms(100);
    }
    th_sleep_ms(200);
    for (i = 0; i < NS; i++)
        assert_int_equal(th_cmd_int(&srv[i], "ZCARD dlock:{rl-fair}:q"), NW);
    assert_int_equal(write(gfd, "g", 1), 1);
    assert_true(th_exited_ok(h));
    for (i = 0; i < NW; i++)
        assert_true(th_exited_ok(w[i]));
    r = th_cmd(&srv[0], "LRANGE test:rlfair:order 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, NW);
    for (i = 0; i < NW; i++) {
        char *p = r->element[i]->str;
        unsigned long long tok = strtoull(strchr(p, ':') + 1, NULL, 10);
        unsigned long long wk = strtoull(strrchr(p, ':') + 1, NULL, 10);
        fprintf(stderr, "redlock fair grant %d: %s\n", i, p);
        assert_int_equal(atoi(p), i);
        assert_true(tok > last_tok);
        last_tok = tok;
        wakeups += wk;
    }
    freeReplyObject(r);
    fprintf(stderr, "wake-ups of %d waiters: %llu\n", NW, wakeups);
    assert_true(wakeups <= NW + NW / 2);
    for (i = 0; i < NS; i++) {
        assert_int_equal(th_cmd_int(&srv[i], "EXISTS dlock:{rl-fair}"), 0);
        assert_int_equal(th_cmd_int(&srv[i], "ZCARD dlock:{rl-fair}:q"), 0);
    }
    close(rfd);
    close(gfd);
}

/* A contender's step inside each hold: RPUSH its token onto
 * test:rlfair:toks (after its increment, so the list is in grant order). */
static int push_token(dlock_client *c, dlock_lock *l, void *arg)
{
    redisReply *x = th_cmd(&srv[0], "RPUSH test:rlfair:toks %llu",
                           (unsigned long long)dlock_lock_token(l));
    (void)c;
    (void)arg;
    if (x == NULL)
        return -1;
    freeReplyObject(x);
    return 0;
}

/* 8 processes contend: the counter never loses an update, tokens only
 * grow (each is recorded with the counter value it wrote), nobody times
 * out and everybody gets its share. */
static void test_contention(void **state)
{
    enum { NP = 8, ITERS = 15 };
    const th_contend k = {.client = rl_client,
                          .name = "rl-fair-mx",
                          .wait_ms = 20000,
                          .lease_ms = 10000,
                          .procs = NP,
                          .iters = ITERS,
                          .counter_srv = &srv[0],
                          .counter_key = "test:rlfair:n",
                          .inside = push_token};
    int i;
    unsigned long long last = 0;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv[0], "DEL test:rlfair:n test:rlfair:toks");
    assert_int_equal(th_contend_run(&k), 0);
    r = th_cmd(&srv[0], "GET test:rlfair:n");
    assert_non_null(r);
    assert_int_equal(atoll(r->str), NP * ITERS);
    freeReplyObject(r);
    r = th_cmd(&srv[0], "LRANGE test:rlfair:toks 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, NP * ITERS);
    for (i = 0; i < (int)r->elements; i++) {
        unsigned long long t = strtoull(r->element[i]->str, NULL, 10);
        assert_true(t > last);
        last = t;
    }
    freeReplyObject(r);
    for (i = 0; i < NS; i++) {
        assert_int_equal(th_cmd_int(&srv[i], "EXISTS dlock:{rl-fair-mx}"), 0);
        assert_int_equal(th_cmd_int(&srv[i], "ZCARD dlock:{rl-fair-mx}:q"), 0);
    }
}

/* A queued waiter killed -9 while the lock is held: when the holder
 * releases, the nodes wake the dead one first; the next waiter gets the
 * lock once the dead one's place has lapsed (waiter TTL 3 s) and it
 * refreshes (every 1 s): within the documented bound, well before its
 * 30 s wait runs out. */
static void test_killed_waiter(void **state)
{
    pid_t h, dead, next;
    int rfd, gfd;
    char b;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv[0], "DEL test:rlfair:kill");
    h = holder("rl-fair-kill", &rfd, &gfd);
    assert_int_equal(read(rfd, &b, 1), 1);
    dead = waiter("rl-fair-kill", 0, "test:rlfair:kill");
    th_sleep_ms(200);
    next = waiter("rl-fair-kill", 1, "test:rlfair:kill");
    th_sleep_ms(300);
    assert_int_equal(th_cmd_int(&srv[2], "ZCARD dlock:{rl-fair-kill}:q"), 2);
    kill(dead, SIGKILL);
    waitpid(dead, NULL, 0);
    assert_int_equal(write(gfd, "g", 1), 1);
    assert_true(th_exited_ok(h));
    assert_true(th_exited_ok(next));
    r = th_cmd(&srv[0], "LRANGE test:rlfair:kill 0 -1");
    assert_non_null(r);
    assert_int_equal(r->elements, 1);
    assert_int_equal(atoi(r->element[0]->str), 1);
    freeReplyObject(r);
    close(rfd);
    close(gfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_one_wakeup),
        cmocka_unit_test(test_contention),
        cmocka_unit_test(test_killed_waiter),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
