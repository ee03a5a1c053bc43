/*
 * semaphore.c - the counting semaphore (issue 19) against a real
 * redis-server: N holders at most and N reached over many processes and
 * rounds (the server counts who is inside), tokens distinct and
 * increasing, the limit stored (another limit refused, changed only
 * explicitly), mixing kinds refused, a holder killed -9 frees its permit
 * after its lease, a paused holder's fenced write refused, a freed permit
 * wakes exactly one waiter, FIFO order in fair mode, lost permits
 * reported, release idempotent.
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

static dlock_client *client_s(int strategy)
{
    return fixture_client(strategy, 0, 0);
}

static dlock_client *client(void)
{
    return client_s(DLOCK_WAIT_NOTIFY);
}

static int sem(dlock_lock **l, dlock_client *c, const char *name, int64_t limit,
               int64_t wait_ms, int64_t lease_ms, int wd)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    o.watchdog = wd;
    return dlock_sem_acquire(l, c, name, limit, &o);
}

/* N permits, no more; tokens increase; a freed permit can be taken. */
static void test_basic(void **state)
{
    dlock_client *c = client();
    dlock_lock *l[4];
    dlock_shared_info info;
    dlock_holder hs[4];
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(sem(&l[i], c, "s:basic", 3, 0, 10000, 0), DLOCK_OK);
        if (i > 0)
            assert_true(dlock_lock_token(l[i]) > dlock_lock_token(l[i - 1]));
        assert_int_equal(dlock_lock_status(l[i]), DLOCK_OK);
    }
    assert_int_equal(sem(&l[3], c, "s:basic", 3, 0, 10000, 0), DLOCK_BUSY);
    assert_null(l[3]);
    assert_int_equal(dlock_shared_inspect(c, "s:basic", &info, hs, 4),
                     DLOCK_OK);
    assert_int_equal(info.kind, DLOCK_KIND_SEMAPHORE);
    assert_int_equal(info.limit, 3);
    assert_int_equal(info.holders, 3);
    assert_int_equal(info.listed, 3);
    assert_int_equal(info.last_token, dlock_lock_token(l[2]));
    assert_int_equal(dlock_lock_release(l[1]), DLOCK_OK);
    assert_int_equal(sem(&l[3], c, "s:basic", 3, 0, 10000, 0), DLOCK_OK);
    assert_true(dlock_lock_token(l[3]) > dlock_lock_token(l[2]));
    assert_int_equal(dlock_lock_extend(l[3], 20000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l[0]), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l[2]), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l[3]), DLOCK_OK);
    assert_int_equal(dlock_shared_inspect(c, "s:basic", &info, NULL, 0),
                     DLOCK_OK);
    assert_int_equal(info.holders, 0);
    dlock_client_free(c);
}

/* The limit is stored; another one is refused with a clear message; it
 * changes only by dlock_sem_set_limit, which also serves waiters. */
static void test_limit_stored(void **state)
{
    dlock_client *c = client();
    dlock_lock *a, *b;
    int64_t old = -1;
    (void)state;
    assert_int_equal(sem(&a, c, "s:lim", 1, 0, 10000, 0), DLOCK_OK);
    assert_int_equal(sem(&b, c, "s:lim", 2, 0, 10000, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "has limit 1, not 2"));
    assert_int_equal(sem(&b, c, "s:lim", 0, 0, 10000, 0), DLOCK_EINVAL);
    assert_int_equal(sem(&b, c, "s:lim", DLOCK_SEM_LIMIT_MAX + 1, 0, 10000, 0),
                     DLOCK_EINVAL);
    assert_int_equal(sem(&b, c, "s:lim", 1, 0, 10000, 0), DLOCK_BUSY);
    assert_int_equal(dlock_sem_set_limit(c, "s:lim", 2, &old), DLOCK_OK);
    assert_int_equal(old, 1);
    assert_int_equal(sem(&b, c, "s:lim", 1, 0, 10000, 0), DLOCK_EINVAL);
    assert_int_equal(sem(&b, c, "s:lim", 2, 0, 10000, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    assert_int_equal(dlock_lock_release(b), DLOCK_OK);
    dlock_client_free(c);
}

/* A semaphore is not a lock and a lock is not a semaphore; a semaphore
 * needs one server. */
static void test_kinds(void **state)
{
    dlock_client *c = client();
    dlock_lock *a, *b;
    th_server s2;
    const char *urls[2];
    dlock_client *rl;
    (void)state;
    assert_int_equal(sem(&a, c, "s:kind", 2, 0, 10000, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&b, c, "s:kind", 0, 10000),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "semaphore"));
    assert_int_equal(dlock_rw_acquire_shared(&b, c, "s:kind", 0, NULL),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    /* Idle, the semaphore is remembered. */
    assert_int_equal(dlock_lock_acquire(&b, c, "s:kind", 0, 10000),
                     DLOCK_EINVAL);

    assert_int_equal(dlock_lock_acquire(&a, c, "l:kind", 0, 10000), DLOCK_OK);
    assert_int_equal(sem(&b, c, "l:kind", 2, 0, 10000, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "lock"));
    assert_int_equal(dlock_sem_set_limit(c, "l:kind", 2, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    /* Idle, the lock's name stays a lock (its fence hash remembers). */
    assert_int_equal(sem(&b, c, "l:kind", 2, 0, 10000, 0), DLOCK_EINVAL);
    dlock_client_free(c);

    assert_int_equal(th_server_start(&s2, NULL), 0);
    urls[0] = th_url(&srv);
    urls[1] = th_url(&s2);
    rl = th_client(urls, 2, DLOCK_WAIT_NOTIFY, 0, 0);
    assert_non_null(rl);
    assert_int_equal(sem(&a, rl, "s:redlock", 2, 0, 10000, 0), DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(rl), "one server"));
    dlock_client_free(rl);
    th_server_stop(&s2);
}

/* The checker: PROCS processes, ROUNDS rounds each, limit N. Inside,
 * each INCRs a counter on the server and records the count it saw (the
 * most that were inside at once), then DECRs it. */
enum { N = 3, PROCS = 8, ROUNDS = 12 };

/* INCR or DECR the inside counter on the child's own connection; the
 * count, or _exit(5): a count that was not kept would fool the check. */
static long long count(redisContext *rc, const char *cmd)
{
    redisReply *r = redisCommand(rc, "%s test:s:inside", cmd);
    long long v;
    if (r == NULL || r->type != REDIS_REPLY_INTEGER)
        _exit(5);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static void checker_child(int idx, int fd)
{
    dlock_client *c = client();
    redisContext *rc = redisConnect("127.0.0.1", srv.port);
    int r;
    if (rc == NULL || rc->err)
        _exit(6);
    for (r = 0; r < ROUNDS; r++) {
        dlock_lock *l;
        long long in;
        uint64_t tok;
        if (sem(&l, c, "s:check", N, 60000, 5000, 1) != DLOCK_OK)
            _exit(2);
        in = count(rc, "INCR");
        tok = dlock_lock_token(l);
        th_sleep_ms(2 + (idx + r) % 5);
        count(rc, "DECR");
        if (dlock_lock_status(l) != DLOCK_OK ||
            dlock_lock_release(l) != DLOCK_OK)
            _exit(3);
        {
            /* One write per record: atomic on a pipe (< PIPE_BUF). */
            long long rec[2] = {in, (long long)tok};
            if (write(fd, rec, sizeof rec) != sizeof rec)
                _exit(4);
        }
    }
    redisFree(rc);
    dlock_client_free(c);
    _exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_checker(void **state)
{
    int p[2], i, st;
    pid_t pids[PROCS];
    long long in, most = 0;
    uint64_t tok, toks[PROCS * ROUNDS];
    size_t n = 0;
    (void)state;
    th_cmd_int(&srv, "DEL test:s:inside");
    assert_int_equal(pipe(p), 0);
    for (i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(p[0]);
            checker_child(i, p[1]);
        }
    }
    close(p[1]);
    long long rec[2];
    while (read(p[0], rec, sizeof rec) == sizeof rec) {
        in = rec[0];
        tok = (uint64_t)rec[1];
        assert_true(in >= 1);
        if (in > N)
            fprintf(stderr, "inside: %lld\n", in);
        assert_true(in <= N); /* never more than N inside */
        if (in > most)
            most = in;
        toks[n++] = tok;
    }
    close(p[0]);
    for (i = 0; i < PROCS; i++) {
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    assert_int_equal(n, PROCS * ROUNDS);
    assert_int_equal(most, N); /* and N were reached */
    qsort(toks, n, sizeof toks[0], cmp_u64);
    for (i = 1; i < (int)n; i++)
        assert_true(toks[i] > toks[i - 1]); /* every token distinct */
}

/* A holder killed -9 frees its permit when its lease runs out, not
 * before; the waiter gets it. */
static void test_crash_frees(void **state)
{
    dlock_client *c = client();
    dlock_lock *l;
    int p[2], st;
    char x;
    pid_t a;
    (void)state;
    assert_int_equal(pipe(p), 0);
    a = fork();
    if (a == 0) {
        dlock_client *cc = client();
        dlock_lock *ll;
        if (sem(&ll, cc, "s:crash", 1, 0, 1500, 1) != DLOCK_OK)
            _exit(2);
        if (write(p[1], "x", 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    assert_int_equal(read(p[0], &x, 1), 1);
    kill(a, SIGKILL);
    assert_int_equal(waitpid(a, &st, 0), a);
    assert_int_equal(sem(&l, c, "s:crash", 1, 0, 5000, 0), DLOCK_BUSY);
    assert_int_equal(sem(&l, c, "s:crash", 1, 10000, 5000, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    close(p[0]);
    close(p[1]);
    dlock_client_free(c);
}

/* The paused holder: SIGSTOPped past its lease, its permit is given to
 * another, whose fenced write wins; the old holder's late write is
 * refused. */
static void test_paused_fenced(void **state)
{
    int tp[2], gp[2], st;
    pid_t a, b;
    uint64_t tok;
    char g;
    redisReply *r;
    (void)state;
    th_cmd_int(&srv, "DEL test:s:res");
    assert_int_equal(pipe(tp), 0);
    assert_int_equal(pipe(gp), 0);
    a = fork();
    if (a == 0) {
        dlock_client *cc = client();
        dlock_lock *ll;
        uint64_t t;
        int rc;
        if (sem(&ll, cc, "s:pause", 1, 0, 800, 1) != DLOCK_OK)
            _exit(2);
        t = dlock_lock_token(ll);
        if (write(tp[1], &t, sizeof t) != sizeof t || read(gp[0], &g, 1) != 1)
            _exit(3);
        rc = dlock_fenced_set(cc, "test:s:res", t, "A", 1);
        _exit(rc == DLOCK_STALE ? 0 : 1);
    }
    assert_int_equal(read(tp[0], &tok, sizeof tok), (ssize_t)sizeof tok);
    kill(a, SIGSTOP);
    b = fork();
    if (b == 0) {
        dlock_client *cc = client();
        dlock_lock *ll;
        if (sem(&ll, cc, "s:pause", 1, 10000, 5000, 0) != DLOCK_OK)
            _exit(2);
        if (dlock_lock_token(ll) <= tok ||
            dlock_fenced_set(cc, "test:s:res", dlock_lock_token(ll), "B", 1) !=
                DLOCK_OK)
            _exit(3);
        dlock_lock_release(ll);
        _exit(0);
    }
    assert_int_equal(waitpid(b, &st, 0), b);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    kill(a, SIGCONT);
    assert_int_equal(write(gp[1], "g", 1), 1);
    assert_int_equal(waitpid(a, &st, 0), a);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    r = th_cmd(&srv, "HGET test:s:res value");
    assert_non_null(r);
    assert_string_equal(r->str, "B");
    freeReplyObject(r);
}

/* A permit of NAME (limit 1, no watchdog) in th_acquire_fn's shape. */
static int sem1(dlock_lock **l, dlock_client *c, const char *name,
                int64_t wait_ms, int64_t lease_ms)
{
    return sem(l, c, name, 1, wait_ms, lease_ms, 0);
}

/* Waiter I of the wake-one and FIFO tests: wait up to 30 s for a permit
 * of NAME, note the arrival order (seq, order) and count itself in done,
 * hold for hold_ms, release. */
static th_waiter sem_waiter(dlock_client *c, const char *name, int i,
                            atomic_int *order, int *seq, atomic_int *done,
                            int64_t hold_ms)
{
    return (th_waiter){.c = c,
                       .name = name,
                       .wait_ms = 30000,
                       .lease_ms = 10000,
                       .acquire = sem1,
                       .hold_ms = hold_ms,
                       .id = i,
                       .order = order,
                       .seq = seq,
                       .entered = done};
}

/* How many wait for a permit of NAME (-1: unknown). */
static int64_t queued(dlock_client *c, const char *name)
{
    return th_shared_info(c, name).waiters;
}

/* A freed permit wakes one waiter, not all of them: the waiting client
 * counts exactly one wake-up for one release. */
static void test_wake_one(void **state)
{
    enum { K = 6 };
    dlock_client *h = client(), *c = client();
    dlock_lock *l;
    th_waiter w[K];
    atomic_int order = 0, done = 0;
    int seq[K], i;
    dlock_stats s0, s1;
    int64_t t0;
    (void)state;
    assert_int_equal(sem(&l, h, "s:wake", 1, 0, 30000, 0), DLOCK_OK);
    for (i = 0; i < K; i++) {
        w[i] = sem_waiter(c, "s:wake", i, &order, seq, &done, 1000);
        assert_int_equal(th_waiter_start(&w[i]), 0);
    }
    t0 = th_now_ms();
    while (queued(h, "s:wake") < K && th_now_ms() - t0 < 20000)
        th_sleep_ms(10);
    assert_int_equal(queued(h, "s:wake"), K);
    dlock_client_stats(c, &s0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    t0 = th_now_ms();
    while (atomic_load(&done) < 1 && th_now_ms() - t0 < 20000)
        th_sleep_ms(1);
    assert_int_equal(atomic_load(&done), 1);
    /* Give a herd time to show: every other waiter would have woken by
     * now (the acquirer holds its permit for a second). */
    th_sleep_ms(300);
    dlock_client_stats(c, &s1);
    assert_int_equal(atomic_load(&done), 1);
    assert_int_equal(s1.wakeups - s0.wakeups, 1);
    for (i = 0; i < K; i++) {
        th_waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
    }
    dlock_client_free(c);
    dlock_client_free(h);
}

/* Fair mode: waiters get the permit in the order they queued. */
static void test_fifo(void **state)
{
    enum { K = 4 };
    dlock_client *h = client_s(DLOCK_WAIT_FAIR);
    dlock_client *c = client_s(DLOCK_WAIT_FAIR);
    dlock_lock *l;
    th_waiter w[K];
    atomic_int order = 0, done = 0;
    int seq[K], i;
    int64_t t0;
    (void)state;
    assert_int_equal(sem(&l, h, "s:fifo", 1, 0, 30000, 0), DLOCK_OK);
    for (i = 0; i < K; i++) {
        w[i] = sem_waiter(c, "s:fifo", i, &order, seq, &done, 20);
        assert_int_equal(th_waiter_start(&w[i]), 0);
        t0 = th_now_ms();
        while (queued(h, "s:fifo") < i + 1 && th_now_ms() - t0 < 20000)
            th_sleep_ms(5);
        assert_int_equal(queued(h, "s:fifo"), i + 1);
    }
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (i = 0; i < K; i++) {
        th_waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
    }
    for (i = 0; i < K; i++)
        assert_int_equal(seq[i], i);
    dlock_client_free(c);
    dlock_client_free(h);
}

static void on_lost(dlock_lock *l, void *ud)
{
    (void)l;
    atomic_fetch_add((atomic_int *)ud, 1);
}

/* The watchdog renews a permit past its lease, and reports it lost when
 * the permit is taken away behind its back. */
static void test_renew_and_lost(void **state)
{
    dlock_client *c = client();
    dlock_acquire_options o;
    dlock_lock *l;
    atomic_int lost = 0;
    int64_t t0;
    (void)state;
    dlock_acquire_options_init(&o);
    o.lease_ms = 300;
    o.watchdog = 1;
    o.on_lost = on_lost;
    o.on_lost_userdata = &lost;
    assert_int_equal(dlock_sem_acquire(&l, c, "s:wd", 2, &o), DLOCK_OK);
    th_sleep_ms(1000); /* three leases */
    assert_int_equal(dlock_lock_status(l), DLOCK_OK);
    assert_int_equal(atomic_load(&lost), 0);
    th_cmd_int(&srv, "ZREM dlock:{s:wd} %s", dlock_lock_owner(l));
    t0 = th_now_ms();
    while (atomic_load(&lost) == 0 && th_now_ms() - t0 < 10000)
        th_sleep_ms(10);
    assert_int_equal(atomic_load(&lost), 1);
    assert_int_equal(dlock_lock_status(l), DLOCK_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    dlock_client_free(c);
}

/* Release is idempotent: a second release of the same permit (adopted by
 * another client) reports success, not a loss; another holder's permit
 * is untouched. */
static void test_release_idempotent(void **state)
{
    dlock_client *c = client(), *d = client();
    dlock_lock *a, *b, *other;
    dlock_shared_info info;
    (void)state;
    assert_int_equal(sem(&a, c, "s:idem", 2, 0, 10000, 0), DLOCK_OK);
    assert_int_equal(sem(&other, c, "s:idem", 2, 0, 10000, 0), DLOCK_OK);
    assert_int_equal(dlock_lock_adopt(&b, d, "s:idem", dlock_lock_owner(a), 0),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_token(b), dlock_lock_token(a));
    assert_int_equal(dlock_lock_release(a), DLOCK_OK);
    assert_int_equal(dlock_lock_release(b), DLOCK_OK);
    assert_int_equal(dlock_shared_inspect(c, "s:idem", &info, NULL, 0),
                     DLOCK_OK);
    assert_int_equal(info.holders, 1);
    assert_int_equal(dlock_lock_release(other), DLOCK_OK);
    dlock_client_free(d);
    dlock_client_free(c);
}

/* F5 for permits: a permit handed (FIFO) to a waiter that then never
 * confirms (stopped here) is held for that waiter's handoff lease, min(its
 * lease, 2 s), not a fixed 2 s: the server's deadline for it, read right
 * after the release, is at most the waiter's 400 ms lease away. */
static void test_handoff_lease(void **state)
{
    dlock_client *a = client_s(DLOCK_WAIT_FAIR);
    dlock_lock *l;
    redisReply *r, *t;
    long long now, left = -1;
    int status;
    size_t i;
    pid_t kid;
    (void)state;
    assert_int_equal(sem(&l, a, "s:hl", 1, 0, 10000, 0), DLOCK_OK);
    kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        dlock_client *b = client_s(DLOCK_WAIT_FAIR);
        dlock_lock *m;
        _exit(sem(&m, b, "s:hl", 1, 10000, 400, 0) == DLOCK_OK ? 0 : 1);
    }
    while (queued(a, "s:hl") < 1)
        th_sleep_ms(5);
    kill(kid, SIGSTOP);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    r = th_cmd(&srv, "ZRANGE dlock:{s:hl} 0 -1 WITHSCORES");
    t = th_cmd(&srv, "TIME");
    assert_non_null(r);
    assert_non_null(t);
    now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    for (i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, "#") != 0 &&
            atoll(r->element[i + 1]->str) > now)
            left = atoll(r->element[i + 1]->str) - now;
    freeReplyObject(r);
    freeReplyObject(t);
    fprintf(stderr, "permit handed to a stopped waiter: held %lld ms more\n",
            left);
    kill(kid, SIGKILL);
    waitpid(kid, &status, 0);
    assert_true(left > 0);
    assert_true(left <= 400);
    dlock_client_free(a);
}

/* F9: a permit handed (FIFO) to a waiter that reads the handoff too late
 * to use it (stopped here: less than a quarter of its handoff lease left
 * by its own count when it resumes) is confirmed by the waiter's next
 * attempt. Meanwhile a permit freed after the handoff went to another
 * client, which could use it first. The confirmed permit must carry a
 * fresh token, above that one, not the handoff's (which is below it). */
static void test_late_handoff_token(void **state)
{
    dlock_client *a = client_s(DLOCK_WAIT_FAIR);
    dlock_lock *l1, *l2, *l3;
    dlock_shared_info info;
    redisReply *r;
    unsigned long long handed, other, got = 0;
    int fds[2], status, rc = -100;
    int64_t stopped;
    char buf[64] = "";
    ssize_t n, off = 0;
    pid_t kid;
    (void)state;
    assert_int_equal(sem(&l1, a, "s:late", 2, 0, 30000, 0), DLOCK_OK);
    assert_int_equal(sem(&l2, a, "s:late", 2, 0, 30000, 0), DLOCK_OK);
    assert_int_equal(pipe(fds), 0);
    kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        /* Lease 5 s: its handoff lease is 2 s. */
        dlock_client *b = client_s(DLOCK_WAIT_FAIR);
        dlock_lock *m = NULL;
        int got_rc = sem(&m, b, "s:late", 2, 20000, 5000, 0);
        int k = snprintf(buf, sizeof buf, "%d %llu\n", got_rc,
                         got_rc == DLOCK_OK
                             ? (unsigned long long)dlock_lock_token(m)
                             : 0ULL);
        close(fds[0]);
        _exit(write(fds[1], buf, (size_t)k) == k ? 0 : 1);
    }
    close(fds[1]);
    while (queued(a, "s:late") < 1)
        th_sleep_ms(5);
    kill(kid, SIGSTOP);
    stopped = th_now_ms();
    /* The waiter's last attempt was sent before this: by its count the
     * handoff's 2 s run from then. The release comes 1 s later, so the
     * server holds the permit for it until 3 s after the stop. */
    th_sleep_ms(1000);
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    r = th_cmd(&srv, "HGET dlock:{s:late}:f n");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    handed = strtoull(r->str, NULL, 10);
    freeReplyObject(r);
    assert_int_equal(dlock_shared_inspect(a, "s:late", &info, NULL, 0),
                     DLOCK_OK);
    assert_int_equal(info.holders, 2); /* handed over: l2 and the waiter */
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    assert_int_equal(sem(&l3, a, "s:late", 2, 0, 30000, 0), DLOCK_OK);
    other = dlock_lock_token(l3);
    assert_true(other > handed);
    /* Resume it 1.7 s after the stop: under 0.5 s of its 2 s left by its
     * count (it confirms with an attempt), 1.3 s left on the server. */
    th_sleep_ms(stopped + 1700 - th_now_ms());
    kill(kid, SIGCONT);
    while (off < (ssize_t)sizeof buf - 1 &&
           (n = read(fds[0], buf + off, sizeof buf - 1 - (size_t)off)) > 0)
        off += n;
    buf[off] = '\0';
    close(fds[0]);
    waitpid(kid, &status, 0);
    assert_int_equal(sscanf(buf, "%d %llu", &rc, &got), 2);
    fprintf(stderr,
            "handoff token %llu, granted meanwhile %llu, confirmed %llu\n",
            handed, other, got);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(got > other);
    assert_int_equal(dlock_lock_release(l3), DLOCK_OK);
    dlock_client_free(a);
}

/* Issue 29 item 14: raising the limit serves the waiters it can and
 * leaves the others waiting, under the new limit: they take the next
 * free permit (before, a waiter's next attempt was refused: "has limit
 * 3, not 1"). Each waiter has its own client, so that its attempts can
 * be counted (stats.busy). */
static void raise_keeps_waiters(int strategy, const char *name)
{
    enum { K = 3 };
    dlock_client *h = client(), *wc[K];
    dlock_lock *l;
    th_waiter w[K];
    dlock_stats st;
    uint64_t busy0;
    int64_t t0;
    int i, got, third = -1;
    assert_int_equal(sem(&l, h, name, 1, 0, 30000, 0), DLOCK_OK);
    for (i = 0; i < K; i++) {
        wc[i] = client_s(strategy);
        w[i] = (th_waiter){.c = wc[i],
                           .name = name,
                           .wait_ms = 30000,
                           .lease_ms = 10000,
                           .acquire = sem1,
                           .hold_ms = TH_WAITER_KEEP};
        assert_int_equal(th_waiter_start(&w[i]), 0);
    }
    /* Every waiter has found the semaphore full under limit 1. */
    for (i = 0; i < K; i++) {
        t0 = th_now_ms();
        do {
            dlock_client_stats(wc[i], &st);
            if (st.busy == 0)
                th_sleep_ms(5);
        } while (st.busy == 0 && th_now_ms() - t0 < 10000);
        assert_true(st.busy > 0);
    }
    assert_int_equal(dlock_sem_set_limit(h, name, 3, NULL), DLOCK_OK);
    t0 = th_now_ms();
    do {
        for (got = 0, i = 0; i < K; i++)
            got += atomic_load(&w[i].got);
        if (got < 2)
            th_sleep_ms(5);
    } while (got < 2 && th_now_ms() - t0 < 10000);
    assert_int_equal(got, 2);
    for (i = 0; i < K; i++)
        if (!atomic_load(&w[i].got))
            third = i;
    assert_true(third >= 0);
    /* The third tries again under the new limit and finds it full. */
    dlock_client_stats(wc[third], &st);
    busy0 = st.busy;
    t0 = th_now_ms();
    do {
        dlock_client_stats(wc[third], &st);
        if (st.busy == busy0)
            th_sleep_ms(10);
    } while (st.busy == busy0 && th_now_ms() - t0 < 10000);
    assert_true(st.busy > busy0);
    /* A permit comes free: the third takes it. */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (i = 0; i < K; i++) {
        th_waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
        assert_int_equal(dlock_lock_release(w[i].l), DLOCK_OK);
        dlock_client_free(wc[i]);
    }
    dlock_client_free(h);
}

static void test_raise_keeps_waiters_fair(void **state)
{
    (void)state;
    raise_keeps_waiters(DLOCK_WAIT_FAIR, "s:raise:f");
}

static void test_raise_keeps_waiters_notify(void **state)
{
    (void)state;
    raise_keeps_waiters(DLOCK_WAIT_NOTIFY, "s:raise:n");
}

static void test_raise_keeps_waiters_spin(void **state)
{
    (void)state;
    raise_keeps_waiters(DLOCK_WAIT_SPIN, "s:raise:s");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_limit_stored),
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_checker),
        cmocka_unit_test(test_crash_frees),
        cmocka_unit_test(test_paused_fenced),
        cmocka_unit_test(test_wake_one),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_renew_and_lost),
        cmocka_unit_test(test_release_idempotent),
        cmocka_unit_test(test_handoff_lease),
        cmocka_unit_test(test_late_handoff_token),
        cmocka_unit_test(test_raise_keeps_waiters_fair),
        cmocka_unit_test(test_raise_keeps_waiters_notify),
        cmocka_unit_test(test_raise_keeps_waiters_spin),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
