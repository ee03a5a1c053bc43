/*
 * watchdog.c - lease renewal against a real redis-server (issue 4): a
 * watchdog holder outlives its lease while it works, finds out when the
 * lock is deleted or taken behind its back, stops renewing at release
 * (also under a tight acquire/release race), rides out a short server
 * stall, reports a loss when the server stays away past the validity, and
 * a paused holder process's late fenced write is refused (DLOCK_STALE).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

static dlock_client *client_for(const th_server *s, int64_t cmd_timeout)
{
    const char *url = th_url(s);
    dlock_client *c =
        th_client(&url, 1, DLOCK_WAIT_NOTIFY, cmd_timeout, cmd_timeout);
    if (c == NULL && getpid() != main_pid)
        _exit(9); /* a forked child must not longjmp into cmocka */
    assert_non_null(c);
    return c;
}

/* What the lost callback saw. */
typedef struct lost_rec {
    atomic_int calls;
    atomic_llong at_ms;
    atomic_int status; /* dlock_lock_status() inside the callback */
} lost_rec;

static void on_lost(dlock_lock *l, void *ud)
{
    lost_rec *r = ud;
    atomic_store(&r->status, dlock_lock_status(l));
    atomic_store(&r->at_ms, th_now_ms());
    atomic_fetch_add(&r->calls, 1);
}

static int acquire_wd(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t lease, lost_rec *rec)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = 0;
    o.lease_ms = lease;
    o.watchdog = 1;
    if (rec != NULL) {
        o.on_lost = on_lost;
        o.on_lost_userdata = rec;
    }
    return dlock_lock_acquire_ex(l, c, name, &o);
}

/* Wait (bounded) for the callback; returns ms from t0 or -1. */
static int64_t wait_lost(lost_rec *r, int64_t t0, int64_t bound_ms)
{
    while (th_now_ms() - t0 < bound_ms) {
        if (atomic_load(&r->calls) > 0)
            return atomic_load(&r->at_ms) - t0;
        th_sleep_ms(5);
    }
    return -1;
}

/* ---- work of 5x the lease: held all along, released cleanly ------------ */

static void test_long_work_kept(void **state)
{
    dlock_client *c = client_for(&srv, 0);
    dlock_client *other = client_for(&srv, 0);
    lost_rec rec = {0};
    dlock_lock *l;
    int64_t t0;
    int polls = 0, stolen = 0;
    (void)state;
    assert_int_equal(acquire_wd(&l, c, "wd-long", 300, &rec), DLOCK_OK);
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 1500) {
        dlock_lock *x = NULL;
        int rc = dlock_lock_acquire(&x, other, "wd-long", 0, 10000);
        if (rc != DLOCK_BUSY) {
            fprintf(stderr, "poll %d: try returned %s\n", polls,
                    dlock_status_name(rc));
            stolen++;
            if (x != NULL)
                dlock_lock_release(x);
        }
        polls++;
        if (dlock_lock_status(l) != DLOCK_OK) {
            dlock_stats st;
            dlock_client_stats(c, &st);
            fprintf(stderr,
                    "long work: status %s after %lld ms (renewals %llu, "
                    "lost %llu), PTTL now %lld\n",
                    dlock_status_name(dlock_lock_status(l)),
                    (long long)(th_now_ms() - t0),
                    (unsigned long long)st.renewals,
                    (unsigned long long)st.lost,
                    th_cmd_int(&srv, "PTTL dlock:{wd-long}"));
        }
        assert_int_equal(dlock_lock_status(l), DLOCK_OK);
        th_sleep_ms(50);
    }
    assert_true(polls >= 10);
    assert_int_equal(stolen, 0);
    assert_int_equal(atomic_load(&rec.calls), 0);
    {
        dlock_stats st;
        dlock_client_stats(c, &st);
        assert_true(st.renewals >= 3); /* 1.5 s at one per 100 ms */
        assert_int_equal(st.lost, 0);
    }
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{wd-long}"), 0);
    dlock_client_free(c);
    dlock_client_free(other);
}

/* ---- an extend beside the watchdog's renewal ---------------------------- */

/* dlock_lock_extend and the watchdog's renewal of the same lock never
 * overlap on the server with the client believing the longer lease: the
 * server is paused (CLIENT PAUSE) while an extend to 60 s is out, so that
 * the watchdog's renewal (a 900 ms lease, due every 300 ms) would be
 * queued on its own connection and may run last. Once both are answered,
 * the validity the client believes is never longer than what the key has
 * left. Several rounds: the order the two answers come back in varies. */
static void test_extend_beside_renewal(void **state)
{
    dlock_client *c = client_for(&srv, 0);
    lost_rec rec = {0};
    dlock_lock *l;
    int i, bad = 0;
    (void)state;
    for (i = 0; i < 4; i++) {
        int64_t pttl, valid;
        assert_int_equal(acquire_wd(&l, c, "wd-xr", 900, &rec), DLOCK_OK);
        th_sleep_ms(250); /* the next renewal falls inside the pause */
        freeReplyObject(th_cmd(&srv, "CLIENT PAUSE 350 ALL"));
        assert_int_equal(dlock_lock_extend(l, 60000), DLOCK_OK);
        th_sleep_ms(150); /* a renewal sent in the pause is answered */
        pttl = th_cmd_int(&srv, "PTTL dlock:{wd-xr}");
        valid = dlock_lock_validity_ms(l);
        if (valid > pttl + 50) {
            fprintf(stderr,
                    "round %d: the client believes %lld ms, the key "
                    "has %lld ms left\n",
                    i, (long long)valid, (long long)pttl);
            bad++;
        }
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    assert_int_equal(bad, 0);
    dlock_client_free(c);
}

/* ---- the key deleted behind the holder's back -------------------------- */

static void test_deleted_is_lost(void **state)
{
    dlock_client *c = client_for(&srv, 0);
    lost_rec rec = {0};
    dlock_lock *l;
    int64_t t0, dt;
    (void)state;
    assert_int_equal(acquire_wd(&l, c, "wd-del", 300, &rec), DLOCK_OK);
    th_sleep_ms(150); /* a renewal or so has happened */
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{wd-del}"), 1);
    t0 = th_now_ms();
    dt = wait_lost(&rec, t0, 5000);
    assert_true(dt >= 0);
    /* One renewal period is lease/3 = 100 ms; allow generous slack. */
    assert_true(dt <= 600);
    assert_int_equal(atomic_load(&rec.calls), 1);
    assert_int_equal(atomic_load(&rec.status), DLOCK_LOST);
    assert_int_equal(dlock_lock_status(l), DLOCK_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    /* The watchdog did not re-create the key. */
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{wd-del}"), 0);
    dlock_client_free(c);
}

/* ---- the key overwritten by another owner ------------------------------ */

/* The owner fields of the lock hash KEY: fields starting with '#' are
 * marks (a queue's '#q', a listener's '#l', the token's '#t': design.md,
 * "Keys"), not owners. */
static long long owners(const char *key)
{
    redisReply *r = th_cmd(&srv, "HKEYS %s", key);
    long long n = 0;
    size_t i;
    assert_non_null(r);
    for (i = 0; i < r->elements; i++)
        if (r->element[i]->str[0] != '#')
            n++;
    freeReplyObject(r);
    return n;
}

static void test_overwritten_is_lost(void **state)
{
    dlock_client *c = client_for(&srv, 0);
    lost_rec rec = {0};
    dlock_lock *l;
    int64_t t0, dt;
    redisReply *r;
    (void)state;
    assert_int_equal(acquire_wd(&l, c, "wd-over", 300, &rec), DLOCK_OK);
    th_sleep_ms(120);
    th_cmd_int(&srv, "DEL dlock:{wd-over}");
    r = th_cmd(&srv, "HSET dlock:{wd-over} %s 1",
               "ffffffffffffffffffffffffffffffff:1");
    assert_non_null(r);
    freeReplyObject(r);
    th_cmd_int(&srv, "PEXPIRE dlock:{wd-over} 10000");
    t0 = th_now_ms();
    dt = wait_lost(&rec, t0, 5000);
    assert_true(dt >= 0);
    assert_true(dt <= 600);
    assert_int_equal(dlock_lock_status(l), DLOCK_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    /* The other owner's lock is untouched: its field, and no field of
     * ours, and its TTL was not raised (it is <= the 10 s it got). */
    assert_int_equal(owners("dlock:{wd-over}"), 1);
    assert_int_equal(th_cmd_int(&srv, "HEXISTS dlock:{wd-over} %s",
                                "ffffffffffffffffffffffffffffffff:1"),
                     1);
    assert_true(th_cmd_int(&srv, "PTTL dlock:{wd-over}") <= 10000);
    th_cmd_int(&srv, "DEL dlock:{wd-over}");
    dlock_client_free(c);
}

/* ---- no renewal lands after release ----------------------------------- */

static void test_no_renewal_after_release(void **state)
{
    dlock_client *c = client_for(&srv, 0);
    dlock_client *other = client_for(&srv, 0);
    lost_rec rec = {0};
    dlock_lock *l, *o;
    long long prev, cur;
    int64_t t0;
    dlock_stats before, after;
    (void)state;
    assert_int_equal(acquire_wd(&l, c, "wd-stop", 300, &rec), DLOCK_OK);
    th_sleep_ms(250); /* let some renewals happen */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_stats(c, &before);
    assert_int_equal(dlock_lock_acquire(&o, other, "wd-stop", 0, 5000),
                     DLOCK_OK);
    prev = th_cmd_int(&srv, "PTTL dlock:{wd-stop}");
    assert_true(prev > 0 && prev <= 5000);
    t0 = th_now_ms();
    while (th_now_ms() - t0 < 1200) { /* 4 lease periods of ours */
        th_sleep_ms(20);
        cur = th_cmd_int(&srv, "PTTL dlock:{wd-stop}");
        assert_true(cur > 0);
        assert_true(cur <= prev);
        prev = cur;
        assert_int_equal(owners("dlock:{wd-stop}"), 1);
        assert_int_equal(
            th_cmd_int(&srv, "HEXISTS dlock:{wd-stop} %s", dlock_lock_owner(o)),
            1);
    }
    dlock_client_stats(c, &after);
    assert_int_equal(after.renewals, before.renewals);
    assert_int_equal(after.lost, 0);
    assert_int_equal(atomic_load(&rec.calls), 0);
    assert_int_equal(dlock_lock_release(o), DLOCK_OK);
    dlock_client_free(c);
    dlock_client_free(other);
}

/* The race: tiny leases, many cycles, the other client grabs the key right
 * after each release. Our renewals must never extend the other's lock and
 * no lost callback may fire for a released lock. */
static void test_release_race(void **state)
{
    enum { CYCLES = 150 };
    dlock_client *c = client_for(&srv, 0);
    dlock_client *other = client_for(&srv, 0);
    lost_rec rec = {0};
    int i, touched = 0, foreign = 0, grabbed = 0, late_lost = 0;
    int lost_before_release = 0;
    (void)state;
    for (i = 0; i < CYCLES; i++) {
        dlock_lock *l = NULL, *o = NULL;
        long long p1, p2;
        int64_t t1, t2;
        int calls0;
        int rc = acquire_wd(&l, c, "wd-race", 30, &rec);
        assert_int_equal(rc, DLOCK_OK);
        /* Hold for 0..2 renewal periods so releases land mid-renewal. */
        if (i % 3)
            usleep((useconds_t)((i % 7) * 3000));
        calls0 = atomic_load(&rec.calls);
        rc = dlock_lock_release(l);
        /* The lease is tiny: on a loaded machine the watchdog may miss
         * 30 ms, and then NOT_OWNER, or LOST if it noticed first, is the
         * honest answer (counted, not the point here). */
        assert_true(rc == DLOCK_OK || rc == DLOCK_NOT_OWNER ||
                    rc == DLOCK_LOST);
        if (rc == DLOCK_LOST)
            lost_before_release++;
        if (dlock_lock_acquire(&o, other, "wd-race", 0, 5000) == DLOCK_OK) {
            grabbed++;
            t1 = th_now_ms();
            p1 = th_cmd_int(&srv, "PTTL dlock:{wd-race}");
            usleep(25000); /* past our renewal period of 10 ms */
            p2 = th_cmd_int(&srv, "PTTL dlock:{wd-race}");
            t2 = th_now_ms();
            /* Only time may lower the other's TTL: not raised, not cut to
             * our 30 ms lease. */
            if (p1 <= 0 || p2 <= 0 || p2 > p1 || p2 < p1 - (t2 - t1) - 100)
                touched++;
            if (owners("dlock:{wd-race}") != 1 ||
                th_cmd_int(&srv, "HEXISTS dlock:{wd-race} %s",
                           dlock_lock_owner(o)) != 1)
                foreign++;
            {
                int64_t v = dlock_lock_validity_ms(o);
                int orc = dlock_lock_release(o);
                if (orc != DLOCK_OK)
                    fprintf(stderr,
                            "race cycle %d: the other's release: %s (%s); "
                            "held %lld ms, validity left %lld, PTTL %lld -> "
                            "%lld, our release %s\n",
                            i, dlock_status_name(orc), dlock_errmsg(other),
                            (long long)(th_now_ms() - t1), (long long)v, p1, p2,
                            dlock_status_name(rc));
                assert_int_equal(orc, DLOCK_OK);
            }
        }
        /* A callback after a release that said anything but LOST is a
         * callback for a released lock. */
        if (rc != DLOCK_LOST && atomic_load(&rec.calls) != calls0)
            late_lost++;
    }
    th_sleep_ms(100);
    fprintf(stderr,
            "race: %d/%d grabbed, %d touched, %d foreign, %d late lost "
            "callbacks, %d lost before release\n",
            grabbed, CYCLES, touched, foreign, late_lost, lost_before_release);
    assert_true(grabbed > CYCLES / 2);
    assert_int_equal(touched, 0);
    assert_int_equal(foreign, 0);
    assert_int_equal(late_lost, 0);
    assert_int_equal(atomic_load(&rec.calls), lost_before_release);
    dlock_client_free(c);
    dlock_client_free(other);
}

/* ---- server stalls ----------------------------------------------------- */

/* A stall (1 s) well within the lease (6 s, margin for loaded machines):
 * the lease survives. */
static void test_brief_stall_survives(void **state)
{
    dlock_client *c = client_for(&srv, 0);
    lost_rec rec = {0};
    dlock_lock *l;
    dlock_info info;
    (void)state;
    assert_int_equal(acquire_wd(&l, c, "wd-stall", 6000, &rec), DLOCK_OK);
    th_sleep_ms(200);
    th_server_pause(&srv);
    th_sleep_ms(1000);
    th_server_resume(&srv);
    th_sleep_ms(4500); /* two renewal periods after the stall */
    assert_int_equal(atomic_load(&rec.calls), 0);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_true(dlock_lock_validity_ms(l) > 0);
    assert_int_equal(dlock_lock_inspect(c, "wd-stall", &info), DLOCK_OK);
    assert_int_equal(info.held, 1);
    assert_string_equal(info.owner, dlock_lock_owner(l));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* A crash and restart (AOF always) within the lease: the lease survives. */
static void test_restart_within_lease_survives(void **state)
{
    th_server s2;
    th_server_opts so = {0};
    dlock_client *c;
    lost_rec rec = {0};
    dlock_lock *l;
    (void)state;
    so.aof_always = 1;
    assert_int_equal(th_server_start(&s2, &so), 0);
    c = client_for(&s2, 500);
    assert_int_equal(acquire_wd(&l, c, "wd-restart", 3000, &rec), DLOCK_OK);
    th_sleep_ms(200);
    th_server_kill9(&s2);
    th_sleep_ms(300);
    assert_int_equal(th_server_restart(&s2), 0);
    th_sleep_ms(2500);
    assert_int_equal(atomic_load(&rec.calls), 0);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_int_equal(
        th_cmd_int(&s2, "HEXISTS dlock:{wd-restart} %s", dlock_lock_owner(l)),
        1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    th_server_stop(&s2);
}

/* Unreachable past the validity: the loss is reported. */
static void test_unreachable_is_lost(void **state)
{
    dlock_client *c = client_for(&srv, 200);
    lost_rec rec = {0};
    dlock_lock *l;
    int64_t t0, dt;
    (void)state;
    assert_int_equal(acquire_wd(&l, c, "wd-gone", 600, &rec), DLOCK_OK);
    t0 = th_now_ms();
    th_server_pause(&srv);
    dt = wait_lost(&rec, t0, 5000);
    th_server_resume(&srv);
    fprintf(stderr, "unreachable: lost after %lld ms\n", (long long)dt);
    assert_true(dt >= 0);
    /* Not before the validity could have run out... */
    assert_true(dt >= 300);
    assert_int_equal(dlock_lock_status(l), DLOCK_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    {
        dlock_stats st;
        dlock_client_stats(c, &st);
        assert_true(st.lost >= 1);
    }
    dlock_client_free(c);
}

/* ---- fenced writes: a paused holder process cannot write late --------- */

/* The paused holder: acquire (300 ms lease), tell the parent its token,
 * wait for "go", then try its fenced write. Exit 0: STALE (refused),
 * 1: accepted, 2: anything else. */
static void holder_child(int tokfd, int gofd, int round)
{
    dlock_client *c = client_for(&srv, 0);
    dlock_lock *l;
    uint64_t tok;
    char go, val[64];
    int rc;
    if (dlock_lock_acquire(&l, c, "wd-fence", 5000, 300) != DLOCK_OK)
        _exit(3);
    tok = dlock_lock_token(l);
    if (write(tokfd, &tok, sizeof tok) != (ssize_t)sizeof tok)
        _exit(4);
    if (read(gofd, &go, 1) != 1)
        _exit(5);
    snprintf(val, sizeof val, "A%d", round);
    rc = dlock_fenced_set(c, "test:fenced:res", tok, val, strlen(val));
    dlock_lock_release(l);
    dlock_client_free(c);
    _exit(rc == DLOCK_STALE ? 0 : rc == DLOCK_OK ? 1 : 2);
}

/* The newer owner: waits for the lock (the paused holder's lease runs
 * out), writes with its token. Exit 0 on success. */
static void newer_child(int round)
{
    dlock_client *c = client_for(&srv, 0);
    dlock_lock *l;
    char val[64];
    int rc;
    if (dlock_lock_acquire(&l, c, "wd-fence", 5000, 5000) != DLOCK_OK)
        _exit(3);
    snprintf(val, sizeof val, "B%d", round);
    rc = dlock_fenced_set(c, "test:fenced:res", dlock_lock_token(l), val,
                          strlen(val));
    dlock_lock_release(l);
    dlock_client_free(c);
    _exit(rc == DLOCK_OK ? 0 : 1);
}

static void test_paused_holder_fenced(void **state)
{
    enum { ROUNDS = 5 };
    int round, accepted = 0;
    (void)state;
    th_cmd_int(&srv, "DEL test:fenced:res");
    for (round = 0; round < ROUNDS; round++) {
        int tp[2], gp[2], st;
        pid_t a, b;
        uint64_t tok = 0;
        redisReply *r;
        char expect[64];
        assert_int_equal(pipe(tp), 0);
        assert_int_equal(pipe(gp), 0);
        a = fork();
        if (a == 0) {
            close(tp[0]);
            close(gp[1]);
            holder_child(tp[1], gp[0], round);
        }
        close(tp[1]);
        close(gp[0]);
        assert_int_equal(read(tp[0], &tok, sizeof tok), (ssize_t)sizeof tok);
        assert_true(tok > 0);
        kill(a, SIGSTOP); /* a GC pause, a swapped-out process... */
        b = fork();
        if (b == 0)
            newer_child(round);
        th_sleep_ms(1000);
        assert_int_equal(waitpid(b, &st, 0), b);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        kill(a, SIGCONT);
        assert_int_equal(write(gp[1], "g", 1), 1);
        assert_int_equal(waitpid(a, &st, 0), a);
        assert_true(WIFEXITED(st));
        if (WEXITSTATUS(st) == 1)
            accepted++;
        else
            assert_int_equal(WEXITSTATUS(st), 0);
        r = th_cmd(&srv, "HGET test:fenced:res value");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        snprintf(expect, sizeof expect, "B%d", round);
        assert_string_equal(r->str, expect);
        freeReplyObject(r);
        close(tp[0]);
        close(gp[1]);
    }
    assert_int_equal(accepted, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_work_kept),
        cmocka_unit_test(test_extend_beside_renewal),
        cmocka_unit_test(test_deleted_is_lost),
        cmocka_unit_test(test_overwritten_is_lost),
        cmocka_unit_test(test_no_renewal_after_release),
        cmocka_unit_test(test_release_race),
        cmocka_unit_test(test_brief_stall_survives),
        cmocka_unit_test(test_restart_within_lease_survives),
        cmocka_unit_test(test_unreachable_is_lost),
        cmocka_unit_test(test_paused_holder_fenced),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
