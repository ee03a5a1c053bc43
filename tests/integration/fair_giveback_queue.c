/*
 * fair_giveback_queue.c - a fair waiter that gave up gets no handoff
 * (finding F6 of docs/reliability.md, issue 29 item 9).
 *
 * When an attempt's answer is lost (a timeout: network delay, a paused
 * server), the waiter gives back what the attempt may have taken: a
 * release.lua of the attempt's owner id with token 0 (the token is not
 * known), which also takes that owner out of the queue, and the waiter
 * goes on under a new owner id. release.lua took such a give-back for a
 * retry of an applied release whenever the fence hash's r (the last
 * token released) was "0", and returned at once: the queue entry stayed,
 * and the next release handed the lock to an owner nobody waited as any
 * more, which kept it for the handoff lease. r was "0" after any
 * give-back that found the lock handed to its owner and passed it on
 * (it wrote its token 0 as the last released). In chaos fair_net_delay
 * (seed 202) this went on for 8.5 s without a section: each gave-up
 * entry got a handoff or headed the free lock's queue for its 3 s.
 *
 * The server-side order is replayed here with the library's own scripts,
 * as MONITOR showed it, and the handoffs a gave-up entry receives are
 * counted: the bound is none.
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
#include "harness.h"
#include "fixture.h"

/* The library's scripts, as it sends them (lua_scripts.c, generated). */
extern const char dlock__lua_acquire[];
extern const char dlock__lua_release[];

#define KEY "dlock:{fgq}"
#define CHAN KEY ":c"
#define KEYS4 KEY " " KEY ":f " KEY ":q " KEY ":qt"

/* Owner ids as the library makes them: client id (32 hex), thread,
 * hold. The handoff channel is CHAN:<client id>. */
#define OWNER(c, hold) c "0000000000000000000000000000000:1:" hold
#define H OWNER("a", "1")  /* the holder */
#define G OWNER("b", "1")  /* a waiter whose answer was lost, handed */
#define D OWNER("c", "1")  /* a waiter that gave up (its first id) */
#define L OWNER("d", "1")  /* a live waiter */
#define H2 OWNER("a", "2") /* the holder's next hold */

/* The first element of an array reply as an integer (or the integer). */
static long long first_int(redisReply *r)
{
    long long v = -100;
    assert_non_null(r);
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_INTEGER)
        v = r->element[0]->integer;
    else if (r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "script error: %s\n", r->str);
    freeReplyObject(r);
    return v;
}

/* A fair waiter's queueing attempt (mode 2, waiter TTL 3 s, lease 800). */
static long long queue(const char *owner)
{
    return first_int(th_cmd(&srv, "EVAL %s 4 " KEYS4 " %s 800 0 2 0 3000 0",
                            dlock__lua_acquire, owner));
}

/* A plain acquire by owner (mode 0): 1 when granted. */
static long long take(const char *owner)
{
    return first_int(th_cmd(&srv, "EVAL %s 4 " KEYS4 " %s 5000 0",
                            dlock__lua_acquire, owner));
}

/* owner's release of depth 1 with token tok ("0": a give-back of an
 * attempt whose answer was lost), handoff lease 2 s. */
static long long release(const char *owner, const char *tok, const char *id)
{
    return first_int(
        th_cmd(&srv, "EVAL %s 4 " KEYS4 " %s 1 %s " CHAN " 2000 604800000 %s",
               dlock__lua_release, owner, tok, id));
}

/* The token of the hold of owner now (the fence hash's n). */
static void token_of(char *buf, size_t len)
{
    redisReply *r = th_cmd(&srv, "HGET " KEY ":f n");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(buf, len, "%s", r->str);
    freeReplyObject(r);
}

/* Is owner the lock's owner now? */
static int holds(const char *owner)
{
    return (int)th_cmd_int(&srv, "HEXISTS " KEY " %s", owner);
}

/* A give-back of a handed lock leaves r as it was (the token 0 is no
 * token): G was handed the lock while its attempt's answer was lost, and
 * its give-back passes the lock on. */
static void handed_then_given_back(void)
{
    char tok[64];
    th_cmd_int(&srv, "DEL " KEY " " KEY ":f " KEY ":q " KEY ":qt");
    assert_int_equal(take(H), 1);
    token_of(tok, sizeof tok);
    assert_int_equal(queue(G), 0);
    assert_int_equal(release(H, tok, "a:1"), 1); /* handed to G */
    assert_int_equal(holds(G), 1);
    assert_int_equal(release(G, "0", "b:1"), 1); /* G's give-back */
    assert_int_equal(th_cmd_int(&srv, "EXISTS " KEY), 0);
}

/* The order seen in seed 202: r is "0" or not (both must behave), D
 * queues behind the holder and L behind D; D's attempt answer is lost:
 * its give-back (token 0) runs; the holder releases. Returns the number
 * of handoffs D received (0 or 1). */
static int gave_up_then_released(int after_handed)
{
    char tok[64];
    int got;
    if (after_handed)
        handed_then_given_back();
    else
        th_cmd_int(&srv, "DEL " KEY " " KEY ":f " KEY ":q " KEY ":qt");
    assert_int_equal(take(H2), 1);
    token_of(tok, sizeof tok);
    assert_int_equal(queue(D), 0);
    assert_int_equal(queue(L), 0);
    release(D, "0", "c:1"); /* the give-back: D waits no more */
    assert_int_equal(release(H2, tok, "a:2"), 1);
    got = holds(D);
    fprintf(stderr, "handoffs to the owner that gave up: %d\n", got);
    /* The handoff went to the live waiter, or (before the fix) to D. */
    assert_int_equal(got + holds(L), 1);
    return got;
}

static void test_giveback_leaves_queue(void **state)
{
    (void)state;
    assert_int_equal(gave_up_then_released(0), 0);
}

/* The case the chaos run found: before the fix D kept its entry and got
 * the lock (1 handoff to an owner that had given up). */
static void test_giveback_after_handed_giveback(void **state)
{
    redisReply *r;
    (void)state;
    assert_int_equal(gave_up_then_released(1), 0);
    /* r is the last token released, never the 0 of a give-back. */
    r = th_cmd(&srv, "HGET " KEY ":f r");
    assert_non_null(r);
    assert_true(r->type == REDIS_REPLY_STRING && strcmp(r->str, "0") != 0);
    freeReplyObject(r);
}

/* The give-back that overtook the attempt (the watchdog's retry, on
 * another connection) finds nothing; the late attempt queues D, and L
 * queues behind it; the give-back sent after the attempt on its own
 * connection takes D out again, also when r is "0". D receives no
 * handoff (before the fix: 1). */
static void test_late_attempt_then_pinned_giveback(void **state)
{
    char tok[64];
    (void)state;
    handed_then_given_back();
    assert_int_equal(take(H2), 1);
    token_of(tok, sizeof tok);
    release(D, "0", "c:3");        /* the retry, ahead of the attempt */
    assert_int_equal(queue(D), 0); /* the attempt, late */
    assert_int_equal(queue(L), 0);
    release(D, "0", "c:2"); /* the give-back behind it */
    assert_int_equal(release(H2, tok, "a:2"), 1);
    fprintf(stderr, "handoffs to the owner that gave up: %d\n", holds(D));
    assert_int_equal(holds(D), 0);
    assert_int_equal(holds(L), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_giveback_leaves_queue),
        cmocka_unit_test(test_giveback_after_handed_giveback),
        cmocka_unit_test(test_late_attempt_then_pinned_giveback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
