/*
 * loop_options.c - the client's options honoured by the event-loop API
 * (dlock_loop.h) on one real redis-server, as the blocking API honours
 * them:
 *  - metrics and on_event: a loop's acquires, busy tries, given-up waits,
 *    renewals, losses and releases are counted in dlock_client_metrics
 *    and told to on_event, with their names and tokens;
 *  - reader preference: dlock_loop_read_acquire_ex with
 *    DLOCK_RW_PREFER_READERS gets in while a writer waits (a plain reader
 *    is kept out);
 *  - the lock-delay: after the server restarts (a new run id), a loop's
 *    try is refused with DLOCK_LOCK_DELAY and a waiting acquire waits
 *    the delay out;
 *  - downgrade: dlock_loop_downgrade turns a loop's write hold into a
 *    read hold (same owner and token) that a waiting reader then shares;
 *  - the watchdog thread as renewer (dlock_loop_set_watchdog): a loop
 *    that does not run for five leases keeps its hold; a loss the
 *    watchdog finds is reported by process through on_lost;
 *  - the one wait policy (issue 28): a waiting acquire without a deadline
 *    ends when an outage outlasts the client's outage ride
 *    (dlock_client_set_outage_ride_ms), and at once on an error the
 *    blocking acquire does not retry (OOM), with the blocking API's
 *    status.
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
#include "th_replication.h"

/* on_event's tally, by type (1 to 6), and the last name told. */
static int events[8];
static char last_name[64];

static void on_event(const dlock_event *ev, void *ud)
{
    (void)ud;
    if (ev->type >= 1 && ev->type <= 6)
        events[ev->type]++;
    snprintf(last_name, sizeof last_name, "%s", ev->name);
}

static void wait_done(dlock_loop *l, th_seen *s)
{
    assert_int_equal(th_loop_run(&l, 1, &s->done), 0);
}

static dlock_client *events_client(int64_t lock_delay_ms)
{
    th_durable d;
    dlock_client *c;
    th_durable_init(&d);
    d.on_event = on_event;
    d.lock_delay_ms = lock_delay_ms;
    c = th_durable_new(th_url(&srv), &d, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

static void test_events_metrics(void **state)
{
    dlock_client *c = events_client(TH_DEFAULT_LOCK_DELAY);
    dlock_loop *ls[2] = {NULL, NULL};
    dlock_loop_acquire o;
    dlock_metrics m;
    th_seen a = {0}, b = {0}, w = {0}, r = {0}, x = {0}, lost = {0};
    (void)state;
    memset(events, 0, sizeof events);
    ls[0] = th_loop_new(c);
    ls[1] = th_loop_new(c);
    o = th_loop_opts(c, 0, 300); /* renewed by the loop at 100 ms */
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "lo:e", &o, th_note, &a),
                     DLOCK_OK);
    wait_done(ls[0], &a);
    assert_int_equal(a.status, DLOCK_OK);
    assert_int_equal(events[DLOCK_EVENT_ACQUIRED], 1);
    assert_string_equal(last_name, "lo:e");
    /* Busy on the other loop, then a wait given up. */
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lo:e", &o, th_note, &b),
                     DLOCK_OK);
    wait_done(ls[1], &b);
    assert_int_equal(b.status, DLOCK_BUSY);
    assert_int_equal(events[DLOCK_EVENT_BUSY], 1);
    o.wait_ms = 200;
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lo:e", &o, th_note, &w),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &w.done), 0);
    assert_int_equal(w.status, DLOCK_TIMEDOUT);
    assert_int_equal(events[DLOCK_EVENT_WAITED], 1);
    /* Renewed by the loop (several rounds in 1 s at a 300 ms lease). */
    th_loop_run_for(ls, 2, 1000);
    assert_true(events[DLOCK_EVENT_RENEWED] >= 2);
    assert_int_equal(dlock_loop_extend(NULL, ls[0], a.hold, 300, th_note, &x),
                     DLOCK_OK);
    wait_done(ls[0], &x);
    assert_int_equal(x.status, DLOCK_OK);
    assert_int_equal(dlock_loop_release(NULL, ls[0], a.hold, th_note, &r),
                     DLOCK_OK);
    wait_done(ls[0], &r);
    assert_int_equal(r.status, DLOCK_OK);
    assert_int_equal(events[DLOCK_EVENT_RELEASED], 1);
    /* A hold whose key is deleted is found lost by its renewal. */
    o.wait_ms = 0;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "lo:l", &o, th_note, &lost),
                     DLOCK_OK);
    wait_done(ls[0], &lost);
    assert_int_equal(lost.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{lo:l}"), 1);
    th_loop_run_for(ls, 1, 600);
    assert_int_equal(dlock_hold_status(lost.hold), DLOCK_NOT_OWNER);
    assert_int_equal(events[DLOCK_EVENT_LOST], 1);
    dlock_client_metrics(c, &m);
    assert_int_equal(m.stats.acquisitions, 2);
    assert_int_equal(m.stats.busy, 2); /* the try and the wait's first */
    assert_int_equal(m.stats.waits, 1);
    assert_int_equal(m.stats.lost, 1);
    assert_true(m.stats.renewals >= 2);
    assert_true(m.stats.requests >= 6);
    assert_int_equal(m.acquire_wait.count, 2);
    assert_int_equal(m.hold.count, 1);
    assert_true(m.renewal.count >= 3); /* rounds and the extend */
    r.done = 0;
    assert_int_equal(dlock_loop_release(NULL, ls[0], lost.hold, th_note, &r),
                     DLOCK_OK);
    wait_done(ls[0], &r);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

static void test_prefer_readers(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *ls[2] = {th_loop_new(c), th_loop_new(c)};
    dlock_loop_acquire o = th_loop_opts(c, 0, 5000);
    th_seen r1 = {0}, w = {0}, r2 = {0}, r3 = {0};
    dlock_op *wop = NULL;
    (void)state;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "lo:p", &o, th_note, &r1),
        DLOCK_OK);
    wait_done(ls[0], &r1);
    assert_int_equal(r1.status, DLOCK_OK);
    o.wait_ms = 20000; /* a writer waits: its mark keeps readers out */
    assert_int_equal(dlock_loop_lock(&wop, ls[1], "lo:p", &o, th_note, &w),
                     DLOCK_OK);
    th_loop_run_for(ls, 2, 200);
    assert_int_equal(w.done, 0);
    o.wait_ms = 0;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[0], "lo:p", &o, th_note, &r2),
        DLOCK_OK);
    wait_done(ls[0], &r2);
    assert_int_equal(r2.status, DLOCK_BUSY);
    assert_int_equal(dlock_loop_read_acquire_ex(NULL, ls[0], "lo:p",
                                                DLOCK_RW_PREFER_READERS, &o,
                                                th_note, &r3),
                     DLOCK_OK);
    wait_done(ls[0], &r3);
    assert_int_equal(r3.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{lo:p}:r"), 2);
    /* An unknown flag is refused at once. */
    assert_int_equal(
        dlock_loop_read_acquire_ex(NULL, ls[0], "lo:p", 0x80, &o, th_note, &r2),
        DLOCK_EINVAL);
    dlock_op_cancel(wop);
    assert_int_equal(w.status, DLOCK_CANCELED);
    assert_int_equal(th_loop_release(ls[0], r1.hold), DLOCK_OK);
    assert_int_equal(th_loop_release(ls[0], r3.hold), DLOCK_OK);
    th_loop_run_for(ls, 2, 100);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

static void test_downgrade(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *ls[2] = {th_loop_new(c), th_loop_new(c)};
    dlock_loop_acquire o = th_loop_opts(c, 0, 300); /* renewed */
    th_seen wr = {0}, rd = {0}, d = {0}, t = {0}, bad = {0};
    uint64_t token;
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "lo:d", &o, th_note, &wr),
                     DLOCK_OK);
    wait_done(ls[0], &wr);
    assert_int_equal(wr.status, DLOCK_OK);
    token = dlock_hold_token(wr.hold);
    o.wait_ms = 20000;
    assert_int_equal(
        dlock_loop_read_acquire(NULL, ls[1], "lo:d", &o, th_note, &rd),
        DLOCK_OK);
    th_loop_run_for(ls, 2, 200);
    assert_int_equal(rd.done, 0); /* the writer holds it */
    assert_int_equal(dlock_loop_downgrade(NULL, ls[0], wr.hold, th_note, &d),
                     DLOCK_OK);
    assert_int_equal(th_loop_run(ls, 2, &d.done), 0);
    assert_int_equal(d.status, DLOCK_OK);
    assert_ptr_equal(d.hold, wr.hold);
    assert_int_equal(dlock_hold_token(d.hold), token);
    assert_int_equal(th_loop_run(ls, 2, &rd.done), 0); /* woken, in */
    assert_int_equal(rd.status, DLOCK_OK);
    /* Renewed as a reader past its lease; still two readers. */
    th_loop_run_for(ls, 2, 1000);
    assert_int_equal(dlock_hold_status(d.hold), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{lo:d}:r"), 2);
    /* Not a writer now: a writer's try is refused (readers), and a
     * reader's hold cannot be downgraded. */
    o.wait_ms = 0;
    assert_int_equal(dlock_loop_lock(NULL, ls[0], "lo:d", &o, th_note, &t),
                     DLOCK_OK);
    wait_done(ls[0], &t);
    assert_int_equal(t.status, DLOCK_BUSY);
    assert_int_equal(dlock_loop_downgrade(NULL, ls[0], d.hold, th_note, &bad),
                     DLOCK_EINVAL);
    assert_int_equal(th_loop_release(ls[0], d.hold), DLOCK_OK);
    assert_int_equal(th_loop_release(ls[1], rd.hold), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lo:d}"), 0);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

static void test_lock_delay(void **state)
{
    dlock_client *c = events_client(3000);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 500);
    th_seen a = {0}, t = {0}, w = {0}, s = {0};
    dlock_op *wop = NULL;
    const char *msg = NULL;
    int i;
    (void)state;
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:x", &o, th_note, &a),
                     DLOCK_OK);
    wait_done(l, &a);
    assert_int_equal(a.status, DLOCK_OK);
    th_loop_run_for(&l, 1, 50);
    /* A restart: a new run id, the lock forgotten. */
    assert_int_equal(th_server_restart(&srv), 0);
    th_loop_run_for(&l, 1, 100);
    /* The first try may meet the old connection's end. */
    for (i = 0; i < 5; i++) {
        memset(&t, 0, sizeof t);
        assert_int_equal(dlock_loop_lock(NULL, l, "lo:y", &o, th_note, &t),
                         DLOCK_OK);
        wait_done(l, &t);
        if (t.status == DLOCK_LOCK_DELAY)
            break;
    }
    assert_int_equal(t.status, DLOCK_LOCK_DELAY);
    assert_non_null(strstr(t.err, "lock-delay"));
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lo:y}"), 0);
    /* A wait whose deadline comes within the delay ends as the blocking
     * wait does: DLOCK_TIMEDOUT (it said DLOCK_LOCK_DELAY), in the
     * delay's words. */
    o.wait_ms = 100;
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:y", &o, th_note, &s),
                     DLOCK_OK);
    wait_done(l, &s);
    assert_int_equal(s.status, DLOCK_TIMEDOUT);
    assert_non_null(strstr(s.err, "lock-delay"));
    /* A wait waits the delay out, saying why meanwhile. */
    o.wait_ms = 20000;
    assert_int_equal(dlock_loop_lock(&wop, l, "lo:y", &o, th_note, &w),
                     DLOCK_OK);
    th_loop_run_for(&l, 1, 100);
    if (!w.done)
        assert_int_equal(dlock_op_last_failure(wop, &msg), DLOCK_LOCK_DELAY);
    wait_done(l, &w);
    assert_int_equal(w.status, DLOCK_OK);
    dlock_loop_free(l); /* holds' leases run out */
    dlock_client_free(c);
}

/* on_lost of a watchdog-renewed hold: counts. */
static void lost_note(dlock_hold *h, int status, void *ud)
{
    (void)h;
    *(int *)ud = status;
}

static void test_watchdog(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = th_loop_opts(c, 0, 300);
    th_seen a = {0}, b = {0}, d = {0};
    const char *why = NULL;
    int lost = 0;
    (void)state;
    assert_int_equal(dlock_loop_set_watchdog(NULL, 1), DLOCK_EINVAL);
    assert_int_equal(dlock_loop_set_watchdog(l, 1), DLOCK_OK);
    o.on_lost = lost_note;
    o.on_lost_userdata = &lost;
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:w", &o, th_note, &a),
                     DLOCK_OK);
    wait_done(l, &a);
    assert_int_equal(a.status, DLOCK_OK);
    /* The loop stalls for five leases: the watchdog thread renews. */
    th_sleep_ms(1500);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{lo:w}") > 0);
    assert_int_equal(dlock_hold_status(a.hold), DLOCK_OK);
    assert_true(dlock_hold_validity_ms(a.hold) > 0);
    th_loop_run_for(&l, 1, 200);
    assert_int_equal(lost, 0);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lo:w}"), 1);
    /* Released through the loop: the watchdog stops, the key goes. */
    assert_int_equal(dlock_loop_release(NULL, l, a.hold, th_note, &d),
                     DLOCK_OK);
    wait_done(l, &d);
    assert_int_equal(d.status, DLOCK_OK);
    th_sleep_ms(400);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lo:w}"), 0);
    /* A loss the watchdog finds is reported by process, with its reason. */
    assert_int_equal(dlock_loop_lock(NULL, l, "lo:w2", &o, th_note, &b),
                     DLOCK_OK);
    wait_done(l, &b);
    assert_int_equal(b.status, DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{lo:w2}"), 1);
    th_sleep_ms(500);
    th_loop_run_for(&l, 1, 300);
    assert_int_equal(lost, DLOCK_NOT_OWNER);
    assert_int_equal(dlock_hold_lost_reason(b.hold, &why), DLOCK_NOT_OWNER);
    assert_non_null(strstr(why, "watchdog"));
    memset(&d, 0, sizeof d);
    assert_int_equal(dlock_loop_release(NULL, l, b.hold, th_note, &d),
                     DLOCK_OK);
    wait_done(l, &d);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* NAME acquired through c's blocking API, waiting bwait ms (*brc: its
 * status), then through l waiting without a deadline (*w: what it
 * completed with). 0, or -1 when the loop's acquire did not end (30 s:
 * th_loop_run) or did not start. */
static int both_acquire(dlock_client *c, dlock_loop *l, const char *name,
                        int64_t bwait, int *brc, th_seen *w)
{
    dlock_loop_acquire o = th_loop_opts(c, -1, 1000);
    dlock_lock *lk = NULL;
    int ran = -1;
    *brc = dlock_lock_acquire(&lk, c, name, bwait, 1000);
    if (lk != NULL)
        (void)dlock_lock_release(lk); /* not expected: the test fails */
    if (dlock_loop_lock(NULL, l, name, &o, th_note, w) == DLOCK_OK)
        ran = th_loop_run(&l, 1, &w->done);
    fprintf(stderr, "%s: blocking %d, loop %d (%s)\n", name, *brc, w->status,
            w->err);
    return ran;
}

/* The server paused for longer than the client's outage ride: a waiting
 * loop acquire with no deadline ends with the outage's error, as the
 * blocking acquire does. */
static void test_outage_ride(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 200, 200);
    dlock_loop *l = th_loop_new(c);
    th_seen w = {0};
    int brc, ran;
    (void)state;
    assert_int_equal(dlock_client_set_outage_ride_ms(c, 500), DLOCK_OK);
    th_server_pause(&srv);
    ran = both_acquire(c, l, "lo:o", -1, &brc, &w);
    th_server_resume(&srv); /* before any assert: teardown stops it */
    assert_true(brc == DLOCK_EIO || brc == DLOCK_ETIMEDOUT);
    assert_int_equal(ran, 0); /* it ended, without a deadline of its own */
    assert_true(w.status == DLOCK_EIO || w.status == DLOCK_ETIMEDOUT);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A server error the blocking acquire does not retry (out of memory:
 * the script's write refused) ends a loop acquire's wait at once, with
 * the same status, however long it may wait. */
static void test_error_ends_wait(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_loop *l = th_loop_new(c);
    redisReply *r;
    th_seen w = {0};
    int brc, ran;
    (void)state;
    r = th_cmd(&srv, "CONFIG SET maxmemory 1");
    assert_non_null(r);
    freeReplyObject(r);
    ran = both_acquire(c, l, "lo:m", 20000, &brc, &w);
    r = th_cmd(&srv, "CONFIG SET maxmemory 0");
    if (r != NULL)
        freeReplyObject(r);
    assert_int_equal(brc, DLOCK_ESERVER);
    assert_int_equal(ran, 0);
    assert_int_equal(w.status, brc);
    assert_non_null(strstr(w.err, "OOM"));
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_metrics),
        cmocka_unit_test(test_prefer_readers),
        cmocka_unit_test(test_downgrade),
        cmocka_unit_test(test_lock_delay),
        cmocka_unit_test(test_watchdog),
        cmocka_unit_test(test_outage_ride),
        cmocka_unit_test(test_error_ends_wait),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
