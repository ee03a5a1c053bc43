/*
 * loop_election.c - leader election through the event-loop API
 * (dlock_loop_campaign / proclaim / leader; resign is a release) against
 * a real redis-server: a campaign wins and proclaims, who leads agrees
 * with the blocking dlock_leader, a leader wait times out while nothing
 * changes and ends on a proclaim, a second campaign waits and wins with
 * a greater epoch once the first resigns, a proclaim changes the value.
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
#include "fixture.h"
#include "th_loop.h"

typedef struct asked {
    int done, status;
    dlock_leader_info li;
} asked;

static void leader_cb(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    asked *a = ud;
    (void)h;
    a->status = status;
    assert_int_equal(dlock_op_leader(op, &a->li), DLOCK_OK);
    a->done = 1;
}

static dlock_leader_info who(dlock_loop *l, const char *name)
{
    asked a;
    memset(&a, 0, sizeof a);
    assert_int_equal(dlock_loop_leader(NULL, l, name, leader_cb, &a), DLOCK_OK);
    assert_int_equal(th_loop_run(&l, 1, &a.done), 0);
    assert_int_equal(a.status, DLOCK_OK);
    return a.li;
}

static void test_campaign(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock_loop *ls[2] = {NULL, NULL};
    dlock_loop_acquire o;
    th_seen a = {0}, b = {0}, p = {0}, r = {0};
    dlock_leader_info li;
    asked watch;
    uint64_t epoch_a;
    (void)state;
    assert_int_equal(dlock_loop_new(&ls[0], c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&ls[1], c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = -1;
    o.lease_ms = 5000;
    li = who(ls[0], "le:e");
    assert_int_equal(li.leading, 0);
    assert_int_equal(
        dlock_loop_campaign(NULL, ls[0], "le:e", "a:1", &o, th_note, &a),
        DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 1, &a.done), 0);
    assert_int_equal(a.status, DLOCK_OK);
    epoch_a = dlock_hold_token(a.hold);
    li = who(ls[1], "le:e");
    assert_int_equal(li.leading, 1);
    assert_int_equal(li.proclaimed, 1);
    assert_string_equal(li.value, "a:1");
    assert_int_equal(li.epoch, epoch_a);
    assert_string_equal(li.owner, dlock_hold_owner(a.hold));
    {
        dlock_leader_info bl;
        assert_int_equal(dlock_leader(c, "le:e", &bl), DLOCK_OK);
        assert_string_equal(bl.value, "a:1");
        assert_int_equal(bl.epoch, epoch_a);
    }
    /* A leader wait: nothing changes within 300 ms (TIMEDOUT). */
    memset(&watch, 0, sizeof watch);
    assert_int_equal(dlock_loop_leader_wait(NULL, ls[1], "le:e", &li, 300,
                                            leader_cb, &watch),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(&ls[1], 1, &watch.done), 0);
    assert_int_equal(watch.status, DLOCK_TIMEDOUT);
    /* A second campaign waits. */
    assert_int_equal(
        dlock_loop_campaign(NULL, ls[1], "le:e", "b:2", &o, th_note, &b),
        DLOCK_OK);
    th_loop_run_for(ls, 2, 200);
    assert_int_equal(b.done, 0);
    memset(&watch, 0, sizeof watch);
    assert_int_equal(
        dlock_loop_leader_wait(NULL, ls[1], "le:e", &li, -1, leader_cb, &watch),
        DLOCK_OK);
    th_loop_run_for(ls, 2, 100);
    assert_int_equal(watch.done, 0);
    assert_int_equal(
        dlock_loop_proclaim(NULL, ls[0], a.hold, "a:2", th_note, &p), DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &p.done), 0);
    assert_int_equal(p.status, DLOCK_OK);
    /* The proclaim's announcement ends the wait (the lease is 5 s). */
    assert_int_equal(th_loop_run(ls, 2, &watch.done), 0);
    assert_int_equal(watch.status, DLOCK_OK);
    assert_string_equal(watch.li.value, "a:2");
    li = who(ls[1], "le:e");
    assert_string_equal(li.value, "a:2");
    /* Resign: the waiting campaign wins with a greater epoch. */
    assert_int_equal(dlock_loop_release(NULL, ls[0], a.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &b.done), 0);
    assert_int_equal(b.status, DLOCK_OK);
    assert_true(dlock_hold_token(b.hold) > epoch_a);
    li = who(ls[0], "le:e");
    assert_string_equal(li.value, "b:2");
    assert_int_equal(li.epoch, dlock_hold_token(b.hold));
    memset(&r, 0, sizeof r);
    assert_int_equal(dlock_loop_release(NULL, ls[1], b.hold, th_note, &r),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &r.done), 0);
    li = who(ls[0], "le:e");
    assert_int_equal(li.leading, 0);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_campaign),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
