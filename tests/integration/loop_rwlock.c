/*
 * loop_rwlock.c - read-write locks through the event-loop API
 * (dlock_loop_read_acquire; a writer is dlock_loop_lock) against a real
 * redis-server: readers share (two on one loop), a writer is refused
 * while they read and waits until the last leaves, a reader waits for
 * the writer's release, readers are renewed past their lease.
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

static void wait_done(dlock_loop *l, th_seen *s)
{
    assert_int_equal(th_loop_run(&l, 1, &s->done), 0);
}

static void rel(dlock_loop *l, dlock_hold *h)
{
    th_seen s = {0};
    assert_int_equal(dlock_loop_release(NULL, l, h, th_note, &s), DLOCK_OK);
    wait_done(l, &s);
    assert_int_equal(s.status, DLOCK_OK);
}

static void test_readers_and_writer(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *l = NULL;
    dlock_loop_acquire o;
    th_seen r1 = {0}, r2 = {0}, w = {0}, r3 = {0}, wt = {0};
    (void)state;
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 300; /* renewed by the loop */
    assert_int_equal(dlock_loop_read_acquire(NULL, l, "lr:x", &o, th_note, &r1),
                     DLOCK_OK);
    assert_int_equal(dlock_loop_read_acquire(NULL, l, "lr:x", &o, th_note, &r2),
                     DLOCK_OK);
    wait_done(l, &r1);
    wait_done(l, &r2);
    assert_int_equal(r1.status, DLOCK_OK);
    assert_int_equal(r2.status, DLOCK_OK);
    /* A writer's try is refused while they read. */
    assert_int_equal(dlock_loop_lock(NULL, l, "lr:x", &o, th_note, &wt),
                     DLOCK_OK);
    wait_done(l, &wt);
    assert_int_equal(wt.status, DLOCK_BUSY);
    /* Renewed: both still read after three leases. */
    th_loop_run_for(&l, 1, 1000);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{lr:x}:r"), 2);
    assert_int_equal(dlock_hold_status(r1.hold), DLOCK_OK);
    /* A waiting writer gets it once the last reader left. */
    o.wait_ms = 20000;
    assert_int_equal(dlock_loop_lock(NULL, l, "lr:x", &o, th_note, &w),
                     DLOCK_OK);
    th_loop_run_for(&l, 1, 100);
    assert_int_equal(w.done, 0);
    rel(l, r1.hold);
    th_loop_run_for(&l, 1, 100);
    assert_int_equal(w.done, 0);
    rel(l, r2.hold);
    wait_done(l, &w);
    assert_int_equal(w.status, DLOCK_OK);
    /* A waiting reader gets in when the writer releases. */
    assert_int_equal(dlock_loop_read_acquire(NULL, l, "lr:x", &o, th_note, &r3),
                     DLOCK_OK);
    th_loop_run_for(&l, 1, 100);
    assert_int_equal(r3.done, 0);
    rel(l, w.hold);
    wait_done(l, &r3);
    assert_int_equal(r3.status, DLOCK_OK);
    rel(l, r3.hold);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lr:x}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A waiting writer keeps new readers out (its mark); cancelled, it
 * takes its mark with it and readers get in again. */
static void test_writer_preference(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *ls[2] = {NULL, NULL};
    dlock_loop_acquire o;
    th_seen r1 = {0}, w = {0}, r2 = {0}, r3 = {0};
    dlock_op *wop = NULL;
    (void)state;
    assert_int_equal(dlock_loop_new(&ls[0], c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&ls[1], c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 30000;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "lr:w", &o, th_note, &r1),
        DLOCK_OK);
    wait_done(ls[0], &r1);
    assert_int_equal(r1.status, DLOCK_OK);
    o.wait_ms = -1;
    assert_int_equal(dlock_loop_lock(&wop, ls[1], "lr:w", &o, th_note, &w),
                     DLOCK_OK);
    th_loop_run_for(ls, 2, 300);
    assert_int_equal(w.done, 0);
    o.wait_ms = 0;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "lr:w", &o, th_note, &r2),
        DLOCK_OK);
    wait_done(ls[0], &r2);
    assert_int_equal(r2.status, DLOCK_BUSY); /* the writer waits */
    dlock_op_cancel(wop);
    assert_int_equal(w.status, DLOCK_CANCELED);
    th_loop_run_for(ls, 2, 200);
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "lr:w", &o, th_note, &r3),
        DLOCK_OK);
    wait_done(ls[0], &r3);
    assert_int_equal(r3.status, DLOCK_OK); /* the mark left with it */
    rel(ls[0], r1.hold);
    rel(ls[0], r3.hold);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_and_writer),
        cmocka_unit_test(test_writer_preference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
