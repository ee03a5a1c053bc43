/*
 * loop_noperm.c - the event-loop API for a user without pub/sub
 * permission (ACL resetchannels): SUBSCRIBE is refused, so a waiter
 * cannot be woken by a message; it must poll (bounded by the holder's
 * lease or its queue refresh) and still get the lock, not wait for a
 * confirmation that never comes; a notify waiter falls back to spin as
 * the blocking one does, not sleeping to the holder's lease's end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "dlock_loop.h"
#include "harness.h"
#include "th_loop.h"

#include "fixture_nochan.h"

/* Release h on l and run l until it is done. */
static void release_on(dlock_loop *l, dlock_hold *h)
{
    th_seen r = {0};
    assert_int_equal(dlock_loop_release(NULL, l, h, th_note, &r), DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &r.done), 0);
}

/* A holder (lease_ms) and a waiter (wait_ms) of user nochan, waiting by
 * strategy: the holder releases while the waiter waits, and the waiter
 * gets the lock within its wait; its loop warns of the refusal. */
static void waits(int strategy, int64_t lease_ms, int64_t wait_ms)
{
    const char *url = th_url(&srv);
    dlock_client *c = th_client_user(&url, 1, strategy, 0, 0, "nochan", "pw");
    dlock_loop *ls[2] = {NULL, NULL};
    dlock_loop_acquire o;
    th_seen a = {0}, b = {0}, r = {0};
    assert_non_null(c);
    assert_int_equal(dlock_loop_new(&ls[0], c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&ls[1], c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = lease_ms;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "ln:x", &o, th_note, &a),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &a.done), 0);
    assert_int_equal(a.status, DLOCK_OK);
    o.wait_ms = wait_ms;
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "ln:x", &o, th_note, &b),
                     DLOCK_OK);
    th_loop_run_for(ls, 2, 200);
    assert_int_equal(b.done, 0);
    assert_int_equal(dlock_loop_release(NULL, ls[0], a.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &b.done), 0); /* 30 s: a hang */
    assert_int_equal(b.status, DLOCK_OK);
    assert_string_not_equal(dlock_loop_warning(ls[1]), "");
    release_on(ls[1], b.hold);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* A notify waiter whose SUBSCRIBE is refused falls back as the blocking
 * one does (wait.c: dlock__wait_unsubscribed): it spins, so a release
 * long before the holder's lease would end lets it in within its wait.
 * (The loop's own rule took the refusal for a confirmation and slept
 * until the lease's end: 30 s, past the waiter's 5.) */
static void test_notify_long_lease(void **state)
{
    (void)state;
    waits(DLOCK_WAIT_NOTIFY, 30000, 5000);
}

static void test_notify(void **state)
{
    (void)state;
    waits(DLOCK_WAIT_NOTIFY, 1000, -1);
}

static void test_fair(void **state)
{
    (void)state;
    waits(DLOCK_WAIT_FAIR, 1000, -1);
}

/* Start a lock of name on l of c's (lease 30 s, wait wait_ms) into seen. */
static void lock_on(dlock_client *c, dlock_loop *l, const char *name,
                    int64_t wait_ms, th_seen *seen)
{
    dlock_loop_acquire o;
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 30000;
    o.wait_ms = wait_ms;
    memset(seen, 0, sizeof *seen);
    assert_int_equal(dlock_loop_lock(NULL, l, name, &o, th_note, seen),
                     DLOCK_OK);
}

/* A refusal is a channel's, not the loop's for ever: a notify waiter
 * refused (ACL resetchannels) polls; the user is then given the channels
 * (ACL SETUSER allchannels) and the next waiter of that loop, on another
 * name, is confirmed and sleeps until the release's message: no try in
 * the half second it waits (counted by the server). Before, one refusal
 * made every later waiter of the loop fall back to spin. */
static void test_refusal_per_channel(void **state)
{
    const char *url = th_url(&srv);
    dlock_client *c;
    dlock_loop *ls[2] = {NULL, NULL};
    th_seen h = {0}, w = {0}, r = {0};
    const char *names[2] = {"ln:pc1", "ln:pc2"};
    long long before;
    int round;
    (void)state;
    freeReplyObject(
        th_cmd(&srv, "ACL SETUSER nochan2 on >pw ~* +@all resetchannels"));
    c = th_client_user(&url, 1, DLOCK_WAIT_NOTIFY, 0, 0, "nochan2", "pw");
    assert_non_null(c);
    assert_int_equal(dlock_loop_new(&ls[0], c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&ls[1], c), DLOCK_OK);
    for (round = 0; round < 2; round++) {
        if (round == 1)
            freeReplyObject(th_cmd(&srv, "ACL SETUSER nochan2 allchannels"));
        lock_on(c, ls[0], names[round], 0, &h);
        assert_int_equal(th_loop_run(ls, 1, &h.done), 0);
        assert_int_equal(h.status, DLOCK_OK);
        lock_on(c, ls[1], names[round], 5000, &w);
        th_loop_run_for(ls, 2, 200); /* its wait begun, settled */
        before = th_scripts_run(&srv);
        th_loop_run_for(ls, 2, 500);
        print_message("round %d: %lld tries in 500 ms\n", round,
                      th_scripts_run(&srv) - before);
        if (round == 1)
            assert_int_equal(th_scripts_run(&srv) - before, 0);
        assert_int_equal(w.done, 0);
        memset(&r, 0, sizeof r);
        assert_int_equal(dlock_loop_release(NULL, ls[0], h.hold, th_note, &r),
                         DLOCK_OK);
        assert_int_equal(th_loop_run(ls, 2, &w.done), 0);
        assert_int_equal(w.status, DLOCK_OK);
        release_on(ls[1], w.hold);
    }
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify),
        cmocka_unit_test(test_fair),
        cmocka_unit_test(test_notify_long_lease),
        cmocka_unit_test(test_refusal_per_channel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
