/*
 * loop_semaphore.c - semaphore permits through the event-loop API
 * (dlock_loop_sem_acquire) against a real redis-server: at most LIMIT
 * holders, several permits of one name on one loop (each its own owner),
 * a waiter served by a release (FIFO handoff and wake-up), renewal past
 * the lease, a cancelled waiter's queue place given back, a limit that
 * does not match refused, a name of another kind or not dlock's refused
 * with the blocking API's words, a waiter under spin not queued.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "dlock.h"
#include "dlock_loop.h"
#include "harness.h"
#include "fixture.h"
#include "th_loop.h"

typedef th_seen seen;
#define note th_note

static void run_for(dlock_loop *l, int64_t ms)
{
    th_loop_run_for(&l, 1, ms);
}

static void run1(dlock_loop *l, const int *flag)
{
    assert_int_equal(th_loop_run(&l, 1, flag), 0);
}

static void rel(dlock_loop *l, dlock_hold *h, int want)
{
    seen s = {0};
    assert_int_equal(dlock_loop_release(NULL, l, h, note, &s), DLOCK_OK);
    run1(l, &s.done);
    assert_int_equal(s.status, want);
}

static void semaphore(int strategy)
{
    dlock_client *c = fixture_client(strategy, 0, 0);
    dlock_loop *l = NULL;
    dlock_loop_acquire o, w;
    seen p[3], q = {0}, bad = {0}, x = {0};
    dlock_op *op = NULL;
    int i;
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 300; /* renewed by the loop */
    memset(p, 0, sizeof p);
    for (i = 0; i < 3; i++)
        assert_int_equal(
            dlock_loop_sem_acquire(NULL, l, "ls:s", 2, &o, note, &p[i]),
            DLOCK_OK);
    run1(l, &p[2].done);
    run1(l, &p[1].done);
    assert_int_equal(p[0].status, DLOCK_OK);
    assert_int_equal(p[1].status, DLOCK_OK);
    assert_int_equal(p[2].status, DLOCK_BUSY);
    assert_string_not_equal(dlock_hold_owner(p[0].hold),
                            dlock_hold_owner(p[1].hold));
    /* Another limit is refused. */
    assert_int_equal(dlock_loop_sem_acquire(NULL, l, "ls:s", 3, &o, note, &bad),
                     DLOCK_OK);
    run1(l, &bad.done);
    assert_int_equal(bad.status, DLOCK_EINVAL);
    assert_non_null(strstr(bad.err, "limit"));
    /* A waiter; renewals keep both permits past their lease. */
    w = o;
    w.wait_ms = 20000;
    assert_int_equal(dlock_loop_sem_acquire(NULL, l, "ls:s", 2, &w, note, &q),
                     DLOCK_OK);
    run_for(l, 1000);
    assert_int_equal(q.done, 0);
    assert_int_equal(dlock_hold_status(p[0].hold), DLOCK_OK);
    assert_int_equal(dlock_hold_status(p[1].hold), DLOCK_OK);
    rel(l, p[0].hold, DLOCK_OK);
    run1(l, &q.done);
    assert_int_equal(q.status, DLOCK_OK);
    /* A cancelled waiter leaves the queue. */
    w.wait_ms = -1;
    assert_int_equal(dlock_loop_sem_acquire(&op, l, "ls:s", 2, &w, note, &x),
                     DLOCK_OK);
    run_for(l, 200);
    assert_int_equal(th_cmd_int(&srv, "LLEN dlock:{ls:s}:q"), 1);
    dlock_op_cancel(op);
    assert_int_equal(x.status, DLOCK_CANCELED);
    run_for(l, 200);
    assert_int_equal(th_cmd_int(&srv, "LLEN dlock:{ls:s}:q"), 0);
    rel(l, p[1].hold, DLOCK_OK);
    rel(l, q.hold, DLOCK_OK);
    /* All free again: two tries succeed. */
    memset(p, 0, sizeof p);
    for (i = 0; i < 2; i++)
        assert_int_equal(
            dlock_loop_sem_acquire(NULL, l, "ls:s", 2, &o, note, &p[i]),
            DLOCK_OK);
    run1(l, &p[1].done);
    run1(l, &p[0].done);
    assert_int_equal(p[0].status, DLOCK_OK);
    assert_int_equal(p[1].status, DLOCK_OK);
    rel(l, p[0].hold, DLOCK_OK);
    rel(l, p[1].hold, DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

static void test_fair(void **state)
{
    (void)state;
    semaphore(DLOCK_WAIT_FAIR);
}

static void test_notify(void **state)
{
    (void)state;
    semaphore(DLOCK_WAIT_NOTIFY);
}

/* Two waiters of one loop on one semaphore (limit 1): both served, one
 * after the other (the handoff channel's confirmation wakes every
 * waiter of the loop: it once woke only the last one to subscribe). */
static void test_two_waiters_one_loop(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock_loop *l = NULL;
    dlock_loop_acquire o, w;
    seen h = {0}, w1 = {0}, w2 = {0};
    (void)state;
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 60000;
    assert_int_equal(dlock_loop_sem_acquire(NULL, l, "ls:two", 1, &o, note, &h),
                     DLOCK_OK);
    run1(l, &h.done);
    assert_int_equal(h.status, DLOCK_OK);
    w = o;
    w.wait_ms = -1;
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, l, "ls:two", 1, &w, note, &w1), DLOCK_OK);
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, l, "ls:two", 1, &w, note, &w2), DLOCK_OK);
    run_for(l, 300);
    assert_int_equal(th_cmd_int(&srv, "LLEN dlock:{ls:two}:q"), 2);
    rel(l, h.hold, DLOCK_OK);
    {
        int64_t end = th_now_ms() + 30000; /* a hang fails */
        while (w1.done + w2.done == 0) {
            assert_true(th_now_ms() < end);
            run_for(l, 10);
        }
    }
    if (w1.done) {
        rel(l, w1.hold, DLOCK_OK);
        run1(l, &w2.done);
        rel(l, w2.hold, DLOCK_OK);
    } else {
        rel(l, w2.hold, DLOCK_OK);
        run1(l, &w1.done);
        rel(l, w1.hold, DLOCK_OK);
    }
    assert_int_equal(w1.status, DLOCK_OK);
    assert_int_equal(w2.status, DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* One try on l of KIND (0 lock, 1 permit, 2 reader) for NAME: its status
 * and message in *s. */
static void try_kind(dlock_loop *l, dlock_client *c, int kind, const char *name,
                     seen *s)
{
    dlock_loop_acquire o;
    dlock_loop_acquire_init(&o, c);
    if (kind == 0)
        assert_int_equal(dlock_loop_lock(NULL, l, name, &o, note, s), DLOCK_OK);
    else if (kind == 1)
        assert_int_equal(dlock_loop_sem_acquire(NULL, l, name, 2, &o, note, s),
                         DLOCK_OK);
    else
        assert_int_equal(dlock_loop_read_acquire(NULL, l, name, &o, note, s),
                         DLOCK_OK);
    run1(l, &s->done);
}

/* One try of KIND for NAME on l is refused: DLOCK_EINVAL, its message
 * holding WORDS. */
static void refused(dlock_loop *l, dlock_client *c, int kind, const char *name,
                    const char *words)
{
    seen s = {0};
    try_kind(l, c, kind, name, &s);
    assert_int_equal(s.status, DLOCK_EINVAL);
    if (strstr(s.err, words) == NULL)
        fail_msg("%s: \"%s\" does not say \"%s\"", name, s.err, words);
}

/* A name of another kind, or a key dlock did not write, is refused by
 * the loop's attempt with the blocking API's verdict and words (kind.h:
 * dlock__refusal): the loop once called a foreign key "another kind of
 * lock". */
static void test_foreign_names(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_client *s = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *l = NULL, *ls = NULL;
    seen b = {0}, k = {0};
    dlock_loop_acquire o;
    (void)state;
    freeReplyObject(th_cmd(&srv, "RPUSH dlock:{lf:list} x"));
    assert_int_equal(dlock_client_set_layout(s, DLOCK_LAYOUT_STRING), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&ls, s), DLOCK_OK);
    /* A permit on a list. */
    refused(l, c, 1, "lf:list",
            "holds a Redis list that dlock did not "
            "write: not dlock's");
    /* A reader on a semaphore. */
    try_kind(l, c, 1, "lf:sem", &b);
    assert_int_equal(b.status, DLOCK_OK);
    refused(l, c, 2, "lf:sem", "lf:sem is a semaphore, not a read-write");
    /* A string-layout lock on a list. */
    refused(ls, s, 0, "lf:list", "holds a Redis list");
    /* A hash-layout lock on a list (WRONGTYPE: kind.lua says what the
     * key holds), on a semaphore, and waiting (not ridden until its
     * deadline as a failing server). */
    refused(l, c, 0, "lf:list", "holds a Redis list");
    refused(l, c, 0, "lf:sem", "the name is a semaphore, not a lock");
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = 60000;
    assert_int_equal(dlock_loop_lock(NULL, l, "lf:list", &o, note, &k),
                     DLOCK_OK);
    run1(l, &k.done);
    assert_int_equal(k.status, DLOCK_EINVAL);
    rel(l, b.hold, DLOCK_OK);
    dlock_loop_free(ls);
    dlock_loop_free(l);
    dlock_client_free(s);
    dlock_client_free(c);
}

/* A permit's waiter under SPIN polls without a place in the queue, as
 * the blocking API's does (hold/wait.h: one rule for the asks of every
 * wait); the loop's once joined the queue (a QUEUE ask). */
static void test_spin_not_queued(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_SPIN, 0, 0);
    dlock_loop *l = NULL;
    dlock_loop_acquire o, w;
    seen h = {0}, x = {0};
    (void)state;
    assert_int_equal(dlock_loop_new(&l, c), DLOCK_OK);
    dlock_loop_acquire_init(&o, c);
    o.lease_ms = 60000;
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, l, "ls:spin", 1, &o, note, &h), DLOCK_OK);
    run1(l, &h.done);
    assert_int_equal(h.status, DLOCK_OK);
    w = o;
    w.wait_ms = 20000;
    assert_int_equal(
        dlock_loop_sem_acquire(NULL, l, "ls:spin", 1, &w, note, &x), DLOCK_OK);
    run_for(l, 300);
    assert_int_equal(x.done, 0);
    assert_int_equal(th_cmd_int(&srv, "LLEN dlock:{ls:spin}:q"), 0);
    rel(l, h.hold, DLOCK_OK);
    run1(l, &x.done);
    assert_int_equal(x.status, DLOCK_OK);
    rel(l, x.hold, DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fair),
        cmocka_unit_test(test_notify),
        cmocka_unit_test(test_two_waiters_one_loop),
        cmocka_unit_test(test_foreign_names),
        cmocka_unit_test(test_spin_not_queued),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
