/*
 * rwlock.c - the read-write lock (issue 19) against real redis-servers:
 * readers share, a writer excludes them and they it; a waiting writer
 * keeps new readers out (unless they prefer readers, or already read);
 * downgrade lets waiting readers in; upgrade is refused; a reader killed
 * -9 frees the lock after its lease; lost readers are reported; Redlock
 * readers and writers exclude each other; and a checker over many
 * processes and rounds: never a writer with anyone, readers overlapping.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"
#include "th_waiter.h"

static dlock_client *client(void)
{
    return fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
}

static dlock_acquire_options opts(int64_t wait_ms, int64_t lease_ms, int wd)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    o.watchdog = wd;
    return o;
}

/* A reader and a writer in th_acquire_fn's shape (for waiter threads
 * too): no watchdog. */
static int reader_acq(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options o = opts(wait_ms, lease_ms, 0);
    return dlock_rw_acquire_shared(l, c, name, 0, &o);
}

static int writer_acq(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options o = opts(wait_ms, lease_ms, 0);
    return dlock_lock_acquire_ex(l, c, name, &o);
}

static int rd(dlock_lock **l, dlock_client *c, const char *name, unsigned flags,
              int64_t wait_ms)
{
    dlock_acquire_options o = opts(wait_ms, 10000, 0);
    return dlock_rw_acquire_shared(l, c, name, flags, &o);
}

static int wr(dlock_lock **l, dlock_client *c, const char *name,
              int64_t wait_ms)
{
    return writer_acq(l, c, name, wait_ms, 10000);
}

/* Readers share; a writer waits for them, and they for it. */
static void test_exclusion(void **state)
{
    /* wc writes: a client of ours that reads a name may not write it
     * from the same thread (an upgrade). */
    dlock_client *a = client(), *b = client(), *wc = client();
    dlock_lock *r1, *r2, *w, *x;
    dlock_shared_info info;
    uint64_t tok;
    (void)state;
    assert_int_equal(rd(&r1, a, "rw:ex", 0, 0), DLOCK_OK);
    assert_int_equal(rd(&r2, b, "rw:ex", 0, 0), DLOCK_OK);
    assert_true(dlock_lock_token(r2) > dlock_lock_token(r1));
    assert_int_equal(wr(&w, wc, "rw:ex", 0), DLOCK_BUSY);
    assert_int_equal(dlock_shared_inspect(a, "rw:ex", &info, NULL, 0),
                     DLOCK_OK);
    assert_int_equal(info.kind, DLOCK_KIND_LOCK);
    assert_int_equal(info.holders, 2);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    assert_int_equal(wr(&w, wc, "rw:ex", 0), DLOCK_BUSY);
    tok = dlock_lock_token(r2);
    assert_int_equal(dlock_lock_release(r2), DLOCK_OK);
    assert_int_equal(wr(&w, wc, "rw:ex", 0), DLOCK_OK);
    assert_true(dlock_lock_token(w) > tok);
    assert_int_equal(rd(&x, a, "rw:ex", 0, 0), DLOCK_BUSY);
    assert_int_equal(rd(&x, a, "rw:ex", DLOCK_RW_PREFER_READERS, 0),
                     DLOCK_BUSY);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    assert_int_equal(rd(&x, a, "rw:ex", 0, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(x), DLOCK_OK);
    dlock_client_free(wc);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A reader or writer waiting in another thread (wait 20 s, lease 10 s),
 * holding for hold_ms once in. */
static th_waiter waiter_of(dlock_client *c, const char *name, int writer,
                           int64_t hold_ms)
{
    return (th_waiter){.c = c,
                       .name = name,
                       .wait_ms = 20000,
                       .lease_ms = 10000,
                       .acquire = writer ? writer_acq : reader_acq,
                       .hold_ms = hold_ms};
}

/* A reader waiting for a writer with a long lease hears its release: the
 * reader's attempts mark the writer's hold ('#l', rw_acquire.lua), and
 * release.lua announces only marked holds. Unmarked, the reader would
 * sleep until the 60 s lease ran out, past its 20 s wait. */
static void test_reader_hears_release(void **state)
{
    dlock_client *a = client(), *wc = client();
    dlock_lock *w;
    th_waiter r = waiter_of(a, "rw:hear", 0, 0);
    (void)state;
    assert_int_equal(wr(&w, wc, "rw:hear", 0), DLOCK_OK);
    assert_int_equal(dlock_lock_extend(w, 60000), DLOCK_OK);
    assert_int_equal(th_release_heard(&r, w), 0);
    dlock_client_free(wc);
    dlock_client_free(a);
}

/* How long a writer has been waiting on NAME (-1: unknown). */
static int64_t writer_mark(dlock_client *c, const char *name)
{
    return th_shared_info(c, name).writer_waiting_ms;
}

/* Wait (up to 10 s) until a waiting writer has marked NAME. */
static void await_mark(dlock_client *c, const char *name)
{
    int64_t t0 = th_now_ms();
    while (writer_mark(c, name) <= 0 && th_now_ms() - t0 < 10000)
        th_sleep_ms(5);
    assert_true(writer_mark(c, name) > 0);
}

/* A reader kept out by a waiting writer's mark alone (the readers have
 * left, the writer has not come in yet) hears that writer's release: its
 * attempt marks the hash ('#l', rw_acquire.lua), the writer's grant keeps
 * the mark (acquire.lua) and release.lua announces it. Unmarked, the
 * reader slept until the mark ran out (the readers' lease + 1 s), past its
 * wait: bench/run's rw row saw a reader time out once the writers had
 * stopped. The writer is a process, stopped (SIGSTOP) while the reader
 * comes, so that the reader surely finds the mark alone. */
static void test_reader_hears_marked_writer(void **state)
{
    const char *name = "rw:markonly";
    dlock_client *a = client(), *rc = client();
    dlock_lock *r1;
    th_waiter r = waiter_of(rc, name, 0, 0);
    int st = -1;
    pid_t w;
    (void)state;
    r.wait_ms = 8000; /* under the mark's life: 10 s lease + 1 s */
    assert_int_equal(rd(&r1, a, name, 0, 0), DLOCK_OK);
    w = fork();
    assert_true(w >= 0);
    if (w == 0) {
        dlock_client *c = client();
        dlock_lock *l;
        int e = wr(&l, c, name, 20000);
        if (e == DLOCK_OK) {
            th_sleep_ms(100);
            e = dlock_lock_release(l);
        }
        _exit(e == DLOCK_OK ? 0 : 1);
    }
    await_mark(a, name);
    assert_int_equal(kill(w, SIGSTOP), 0);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    assert_int_equal(th_waiter_start(&r), 0);
    /* Refused twice: once, then again once subscribed (that one marks). */
    assert_int_equal(th_wait_busy(rc, 2, 10000), 0);
    assert_int_equal(kill(w, SIGCONT), 0);
    assert_int_equal(waitpid(w, &st, 0), w);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(th_waiter_join(&r), 0);
    assert_int_equal(r.rc, DLOCK_OK);
    dlock_client_free(rc);
    dlock_client_free(a);
}

/* Writer preference: a waiting writer keeps new readers out (a reader
 * preferring readers gets in, and so does a thread that reads already);
 * when the readers leave, the writer goes first. */
static void test_writer_preference(void **state)
{
    dlock_client *a = client(), *b = client(), *wc = client();
    dlock_lock *r1, *r2, *r3;
    th_waiter w = waiter_of(wc, "rw:pref", 1, 200);
    (void)state;
    assert_int_equal(rd(&r1, a, "rw:pref", 0, 0), DLOCK_OK);
    assert_int_equal(th_waiter_start(&w), 0);
    await_mark(a, "rw:pref");
    assert_int_equal(rd(&r2, b, "rw:pref", 0, 0), DLOCK_BUSY);
    assert_int_equal(rd(&r2, b, "rw:pref", DLOCK_RW_PREFER_READERS, 0),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(r2), DLOCK_OK);
    /* The thread that holds r1 reads again: it must not wait for the
     * writer that waits for it. */
    assert_int_equal(rd(&r3, a, "rw:pref", 0, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(r3), DLOCK_OK);
    assert_int_equal(atomic_load(&w.got), 0);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    /* Readers woken by the last reader's release do not get in first. */
    assert_int_equal(rd(&r2, b, "rw:pref", 0, 5000), DLOCK_OK);
    assert_int_equal(atomic_load(&w.got), 1);
    assert_int_equal(dlock_lock_release(r2), DLOCK_OK);
    th_waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    dlock_client_free(wc);
    dlock_client_free(b);
    dlock_client_free(a);
}

/* Issue 29 item 12: a writer that gives up (its wait runs out) takes its
 * mark with it: new readers get in at once, not after the readers' lease
 * + 1 s. Another writer still waiting keeps them out. Both waiting
 * strategies: notify (the plain waiting writer) and fair (queued). */
static void writer_leaves(int strategy, const char *name)
{
    dlock_client *a = client(), *b = client(), *wc = client();
    dlock_client *wf = fixture_client(strategy, 0, 0);
    dlock_lock *r1, *r2, *w;
    th_waiter w2 = waiter_of(wc, name, 1, 0);
    assert_int_equal(rd(&r1, a, name, 0, 0), DLOCK_OK);
    /* A lone writer gives up: its mark goes with it. */
    assert_int_equal(wr(&w, wf, name, 300), DLOCK_TIMEDOUT);
    assert_int_equal(writer_mark(a, name), 0);
    assert_int_equal(rd(&r2, b, name, 0, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(r2), DLOCK_OK);
    /* Another writer waits: one giving up leaves that one's mark. */
    assert_int_equal(th_waiter_start(&w2), 0);
    await_mark(a, name);
    assert_int_equal(wr(&w, wf, name, 300), DLOCK_TIMEDOUT);
    assert_true(writer_mark(a, name) > 0);
    assert_int_equal(rd(&r2, b, name, 0, 0), DLOCK_BUSY);
    assert_int_equal(atomic_load(&w2.got), 0);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    th_waiter_join(&w2);
    assert_int_equal(w2.rc, DLOCK_OK);
    dlock_client_free(wf);
    dlock_client_free(wc);
    dlock_client_free(b);
    dlock_client_free(a);
}

static void test_writer_leaves_notify(void **state)
{
    (void)state;
    writer_leaves(DLOCK_WAIT_NOTIFY, "rw:leave:n");
}

static void test_writer_leaves_fair(void **state)
{
    (void)state;
    writer_leaves(DLOCK_WAIT_FAIR, "rw:leave:f");
}

/* Downgrade: the writer becomes a reader in one step; a waiting reader
 * gets in at once; a writer still waits. Upgrade is refused. */
static void test_downgrade_upgrade(void **state)
{
    dlock_client *a = client(), *b = client();
    dlock_lock *w, *r, *x, *w2;
    th_waiter t = waiter_of(b, "rw:down", 0, 0);
    uint64_t tok;
    int64_t t0;
    (void)state;
    assert_int_equal(wr(&w, a, "rw:down", 0), DLOCK_OK);
    tok = dlock_lock_token(w);
    assert_int_equal(th_waiter_start(&t), 0);
    th_sleep_ms(100);
    assert_int_equal(atomic_load(&t.got), 0);
    assert_int_equal(dlock_rw_downgrade(&r, w), DLOCK_OK);
    assert_int_equal(dlock_lock_token(r), tok);
    assert_string_equal(dlock_lock_owner(r), dlock_lock_owner(r));
    t0 = th_now_ms();
    while (atomic_load(&t.got) == 0 && th_now_ms() - t0 < 10000)
        th_sleep_ms(5);
    assert_int_equal(atomic_load(&t.got), 1);
    th_waiter_join(&t);
    assert_int_equal(wr(&x, b, "rw:down", 0), DLOCK_BUSY);
    /* Upgrade: refused, not a deadlock. */
    assert_int_equal(wr(&x, a, "rw:down", 1000), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(a), "upgrad"));
    /* A reader is not downgraded; a re-entered writer is not either. */
    assert_int_equal(dlock_rw_downgrade(&x, r), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(r), DLOCK_OK);
    assert_int_equal(wr(&w, a, "rw:down", 0), DLOCK_OK);
    assert_int_equal(wr(&w2, a, "rw:down", 0), DLOCK_OK);
    assert_int_equal(dlock_rw_downgrade(&x, w2), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(w2), DLOCK_OK);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A reader killed -9 holds the lock until its lease ends, then a writer
 * gets it. */
static void test_reader_crash(void **state)
{
    dlock_client *c = client();
    dlock_lock *w;
    int p[2], st;
    char x;
    pid_t a;
    (void)state;
    assert_int_equal(pipe(p), 0);
    a = fork();
    if (a == 0) {
        dlock_client *cc = client();
        dlock_acquire_options o = opts(0, 1500, 1);
        dlock_lock *l;
        if (dlock_rw_acquire_shared(&l, cc, "rw:crash", 0, &o) != DLOCK_OK)
            _exit(2);
        if (write(p[1], "x", 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    assert_int_equal(read(p[0], &x, 1), 1);
    kill(a, SIGKILL);
    assert_int_equal(waitpid(a, &st, 0), a);
    assert_int_equal(wr(&w, c, "rw:crash", 0), DLOCK_BUSY);
    assert_int_equal(wr(&w, c, "rw:crash", 10000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    close(p[0]);
    close(p[1]);
    dlock_client_free(c);
}

/* Issue 29 item 2: the lock is the writers' as soon as the last live
 * reader's lease has ended, however long a lease an earlier reader took
 * (the hash kept the longest lease any reader ever had). Readers without
 * renewal: a long one that leaves, a short one that lapses. */
static void test_expired_reader_frees(void **state)
{
    dlock_client *c = client(), *wc = client();
    dlock_lock *r1, *r2, *w;
    dlock_acquire_options o = opts(0, 30000, 0);
    int64_t t0;
    (void)state;
    assert_int_equal(dlock_rw_acquire_shared(&r1, c, "rw:lapse", 0, &o),
                     DLOCK_OK);
    o.lease_ms = 300;
    assert_int_equal(dlock_rw_acquire_shared(&r2, c, "rw:lapse", 0, &o),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    t0 = th_now_ms();
    while (th_shared_info(c, "rw:lapse").holders > 0 &&
           th_now_ms() - t0 < 10000)
        th_sleep_ms(10);
    assert_int_equal(th_shared_info(c, "rw:lapse").holders, 0);
    /* No live reader: a writer's try gets in at once. */
    assert_int_equal(wr(&w, wc, "rw:lapse", 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    assert_int_equal(dlock_lock_release(r2), DLOCK_NOT_OWNER);
    dlock_client_free(wc);
    dlock_client_free(c);
}

static void on_lost(dlock_lock *l, void *ud)
{
    (void)l;
    atomic_fetch_add((atomic_int *)ud, 1);
}

/* The watchdog renews a reader; a reader whose lock is deleted behind
 * its back is reported lost (a writer could have it now). */
static void test_reader_renew_lost(void **state)
{
    dlock_client *c = client();
    dlock_acquire_options o = opts(0, 300, 1);
    dlock_lock *l;
    atomic_int lost = 0;
    int64_t t0;
    (void)state;
    o.on_lost = on_lost;
    o.on_lost_userdata = &lost;
    assert_int_equal(dlock_rw_acquire_shared(&l, c, "rw:wd", 0, &o), DLOCK_OK);
    th_sleep_ms(1000);
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    th_cmd_int(&srv, "DEL dlock:{rw:wd}");
    t0 = th_now_ms();
    while (atomic_load(&lost) == 0 && th_now_ms() - t0 < 10000)
        th_sleep_ms(10);
    assert_int_equal(atomic_load(&lost), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    dlock_client_free(c);
}

/* Redlock: readers on a majority, a writer on a majority: one node of
 * both refuses one of them. Works with a node down. */
static void test_redlock(void **state)
{
    th_server s[3];
    const char *urls[3];
    dlock_client *a, *b, *wc;
    dlock_lock *r1, *r2, *w;
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(th_server_start(&s[i], NULL), 0);
        urls[i] = th_url(&s[i]);
    }
    a = th_client(urls, 3, DLOCK_WAIT_NOTIFY, 0, 0);
    b = th_client(urls, 3, DLOCK_WAIT_NOTIFY, 0, 0);
    wc = th_client(urls, 3, DLOCK_WAIT_NOTIFY, 0, 0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(wc);
    assert_int_equal(rd(&r1, a, "rw:rl", 0, 0), DLOCK_OK);
    assert_int_equal(rd(&r2, b, "rw:rl", 0, 0), DLOCK_OK);
    assert_true(dlock_lock_token(r2) > dlock_lock_token(r1));
    assert_int_equal(wr(&w, wc, "rw:rl", 0), DLOCK_BUSY);
    th_server_stop(&s[2]);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    assert_int_equal(dlock_lock_release(r2), DLOCK_OK);
    assert_int_equal(wr(&w, wc, "rw:rl", 0), DLOCK_OK);
    assert_int_equal(rd(&r1, a, "rw:rl", 0, 0), DLOCK_BUSY);
    assert_int_equal(dlock_lock_release(w), DLOCK_OK);
    assert_int_equal(rd(&r1, a, "rw:rl", 0, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(r1), DLOCK_OK);
    dlock_client_free(wc);
    dlock_client_free(a);
    dlock_client_free(b);
    th_server_stop(&s[0]);
    th_server_stop(&s[1]);
}

/* The checker: PROCS processes, ROUNDS rounds, a third of them writes.
 * Inside, readers and writers count themselves on the server (HINCRBY on
 * one hash, so both counts come back together): a writer must see one
 * writer and no reader, a reader no writer; readers must overlap. */
enum { PROCS = 8, ROUNDS = 12 };

static void checker_child(int idx, int fd)
{
    dlock_client *c = client();
    redisContext *rc = redisConnect("127.0.0.1", srv.port);
    int r;
    if (rc == NULL || rc->err)
        _exit(6);
    for (r = 0; r < ROUNDS; r++) {
        int writer = (idx + r) % 3 == 0;
        dlock_acquire_options o = opts(60000, 5000, 1);
        dlock_lock *l;
        redisReply *rep;
        long long rec[3];
        int rcd = writer ? dlock_lock_acquire_ex(&l, c, "rw:check", &o)
                         : dlock_rw_acquire_shared(&l, c, "rw:check", 0, &o);
        if (rcd != DLOCK_OK)
            _exit(2);
        rep = redisCommand(rc, "EVAL %s 1 test:rw:inside %s",
                           "redis.call('HINCRBY', KEYS[1], ARGV[1], 1) "
                           "return {tonumber(redis.call('HGET', KEYS[1], "
                           "'w') or '0'), tonumber(redis.call('HGET', "
                           "KEYS[1], 'r') or '0')}",
                           writer ? "w" : "r");
        if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2)
            _exit(5);
        rec[0] = writer;
        rec[1] = rep->element[0]->integer;
        rec[2] = rep->element[1]->integer;
        freeReplyObject(rep);
        th_sleep_ms(writer ? 2 : 5 + (idx + r) % 5);
        rep = redisCommand(rc, "HINCRBY test:rw:inside %s -1",
                           writer ? "w" : "r");
        if (rep == NULL || rep->type != REDIS_REPLY_INTEGER)
            _exit(5);
        freeReplyObject(rep);
        if (dlock_lock_status(l) != DLOCK_OK ||
            dlock_lock_release(l) != DLOCK_OK)
            _exit(3);
        if (write(fd, rec, sizeof rec) != sizeof rec)
            _exit(4);
    }
    redisFree(rc);
    dlock_client_free(c);
    _exit(0);
}

static void test_checker(void **state)
{
    int p[2], i, st, n = 0, writes = 0;
    pid_t pids[PROCS];
    long long rec[3], most_readers = 0;
    (void)state;
    th_cmd_int(&srv, "DEL test:rw:inside");
    assert_int_equal(pipe(p), 0);
    for (i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(p[0]);
            checker_child(i, p[1]);
        }
    }
    close(p[1]);
    while (read(p[0], rec, sizeof rec) == sizeof rec) {
        n++;
        if (rec[0]) {
            writes++;
            assert_int_equal(rec[1], 1); /* the only writer */
            assert_int_equal(rec[2], 0); /* and no reader */
        } else {
            assert_int_equal(rec[1], 0); /* no writer with a reader */
            if (rec[2] > most_readers)
                most_readers = rec[2];
        }
    }
    close(p[0]);
    for (i = 0; i < PROCS; i++) {
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    assert_int_equal(n, PROCS * ROUNDS);
    assert_true(writes > 0);
    assert_true(most_readers >= 2); /* readers overlapped */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exclusion),
        cmocka_unit_test(test_writer_preference),
        cmocka_unit_test(test_reader_hears_release),
        cmocka_unit_test(test_reader_hears_marked_writer),
        cmocka_unit_test(test_writer_leaves_notify),
        cmocka_unit_test(test_writer_leaves_fair),
        cmocka_unit_test(test_downgrade_upgrade),
        cmocka_unit_test(test_reader_crash),
        cmocka_unit_test(test_reader_renew_lost),
        cmocka_unit_test(test_expired_reader_frees),
        cmocka_unit_test(test_redlock),
        cmocka_unit_test(test_checker),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
