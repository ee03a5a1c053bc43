/*
 * prims.c - dlock_bench's workloads of the semaphore and the read-write
 * lock (issue 19), each printed as one JSON line as W2's are, with the
 * Redis CPU and commands per acquisition from INFO deltas (see
 * redis_stats() in dlock_bench.c).
 *
 *   dlock_bench sem -s URL [-S spin|notify|fair] [-p PROCS] [-l LIMIT]
 *                   [-t SECONDS] [--floor]
 *       PROCS processes (bench/run: 16) on one semaphore of LIMIT (4)
 *       permits, each looping dlock_sem_acquire (wait 10 s, lease 10 s),
 *       INCR inside, DECR inside (raw hiredis, a connection of its own:
 *       two round trips, as W2's GET and SET), release. INCR's reply is
 *       how many are inside as Redis sees it; the workers also count
 *       themselves in shared memory from the acquire's return to the
 *       release's call. Either count above LIMIT is reported
 *       (over_limit) and makes the exit status 3.
 *       --floor: LIMIT raw-hiredis processes, each alone on a lock key of
 *       its own (SET NX PX, INCR, DECR, EVALSHA delete): LIMIT slots that
 *       are always busy and never waited for, the most LIMIT permits can
 *       give with these round trips on this machine.
 *
 *   dlock_bench rw -s URL [-s URL...] [-p READERS] [-W WRITERS]
 *                  [-w WRITER_WAIT_MS] [-g WRITER_GAP_US]
 *                  [--prefer-readers] [-t SECONDS]
 *       READERS processes loop dlock_rw_acquire_shared (wait 10 s,
 *       DLOCK_RW_PREFER_READERS with --prefer-readers), GET counter, GET
 *       counter, release. WRITERS more processes loop dlock_lock_acquire
 *       (waiting at most WRITER_WAIT_MS), GET counter, SET counter+1,
 *       release, then pause WRITER_GAP_US. Writers start no acquire after
 *       SECONDS; readers keep streaming until every writer has stopped,
 *       so that each writer wait is measured under the stream. Every
 *       acquire's wait (call to return, a timed-out one included) is kept
 *       per role: p50, p99, max. A reader inside with a writer, or two
 *       writers inside at once, counted in shared memory, is a violation
 *       (exit status 3).
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* What a worker does. */
enum role { R_SEM, R_SEM_FLOOR, R_READER, R_WRITER };

/* Per-worker totals in shared memory. */
struct pstat {
    int role;
    uint64_t acq;
    uint64_t timeouts;
    uint64_t errors;
    uint64_t requests;
    uint64_t nwait;
    int64_t finish_ns;
};

/* The region shared by the parent and the workers. The inside counts
 * are taken between an acquire's return and the release's call. */
struct psh {
    atomic_int ready;
    atomic_int go;
    atomic_int writers_active;
    int64_t end_ns;
    atomic_long inside;     /* sem: permit holders inside */
    atomic_long max_inside; /* sem */
    atomic_long max_redis;  /* sem: the highest INCR reply */
    atomic_long readers_in;
    atomic_long writers_in;
    atomic_long max_readers;
    atomic_long violations; /* rw: a writer with anyone else inside */
    struct pstat w[MAX_PROCS];
};

/* The keys of one run. */
struct pkeys {
    char lock[64];    /* the semaphore or the read-write lock */
    char inside[64];  /* sem: INCR/DECR'd by the section */
    char counter[64]; /* rw: read by readers, incremented by writers */
};

/* Raise *m to v if v is higher. */
static void note_max(atomic_long *m, long v)
{
    long cur = atomic_load(m);
    while (v > cur && !atomic_compare_exchange_weak(m, &cur, v))
        ;
}

/* Count a worker of ROLE in (after its acquire returned). */
static void enter(struct psh *sh, int role)
{
    switch (role) {
    case R_SEM:
    case R_SEM_FLOOR:
        note_max(&sh->max_inside, atomic_fetch_add(&sh->inside, 1) + 1);
        break;
    case R_READER:
        note_max(&sh->max_readers, atomic_fetch_add(&sh->readers_in, 1) + 1);
        if (atomic_load(&sh->writers_in) > 0)
            atomic_fetch_add(&sh->violations, 1);
        break;
    default:
        if (atomic_fetch_add(&sh->writers_in, 1) > 0 ||
            atomic_load(&sh->readers_in) > 0)
            atomic_fetch_add(&sh->violations, 1);
    }
}

/* Count a worker of ROLE out (before it releases). */
static void leave(struct psh *sh, int role)
{
    if (role == R_SEM || role == R_SEM_FLOOR)
        atomic_fetch_sub(&sh->inside, 1);
    else if (role == R_READER)
        atomic_fetch_sub(&sh->readers_in, 1);
    else
        atomic_fetch_sub(&sh->writers_in, 1);
}

/* The critical section of ROLE over the raw connection rc: two round
 * trips for every role. */
static void section(redisContext *rc, int role, struct psh *sh,
                    const struct pkeys *k)
{
    redisReply *r;
    long long v = 0;

    switch (role) {
    case R_SEM:
    case R_SEM_FLOOR:
        r = cmd(rc, 1, "INCR %s", k->inside);
        note_max(&sh->max_redis, (long)r->integer);
        freeReplyObject(r);
        cmd(rc, 0, "DECR %s", k->inside);
        break;
    case R_READER:
        cmd(rc, 0, "GET %s", k->counter);
        cmd(rc, 0, "GET %s", k->counter);
        break;
    default:
        r = cmd(rc, 1, "GET %s", k->counter);
        if (r->type == REDIS_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
        cmd(rc, 0, "SET %s %lld", k->counter, v + 1);
    }
}

/* One worker's raw floor lock: a key of its own, never contended. */
struct rawlock {
    redisContext *c;
    char sha[41];
    char key[96];
    char tok[64];
    long n;
};

/* Acquire for ROLE; returns a dlock status. */
static int acquire_one(const struct conf *cf, int role, dlock_client *dc,
                       struct rawlock *rl, const struct pkeys *k,
                       const dlock_acquire_options *ao, dlock_lock **l)
{
    redisReply *r;
    int ok;

    switch (role) {
    case R_SEM:
        return dlock_sem_acquire(l, dc, k->lock, cf->limit, ao);
    case R_READER:
        return dlock_rw_acquire_shared(
            l, dc, k->lock, cf->prefer_readers ? DLOCK_RW_PREFER_READERS : 0,
            ao);
    case R_WRITER:
        return dlock_lock_acquire_ex(l, dc, k->lock, ao);
    default:
        snprintf(rl->tok, sizeof rl->tok, "%ld:%ld", (long)getpid(), rl->n++);
        r = cmd(rl->c, 1, "SET %s %s NX PX %d", rl->key, rl->tok, LEASE_MS);
        ok = r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        return ok ? DLOCK_OK : DLOCK_BUSY;
    }
}

/* One worker: loop until the deadline (readers: and until the writers
 * have stopped). Never returns. */
static void worker(const struct conf *cf, struct psh *sh, int id,
                   int64_t *waits, uint64_t cap, const struct pkeys *k)
{
    struct pstat *w = &sh->w[id];
    redisContext *rc = raw_connect(cf);
    dlock_client *dc = NULL;
    struct rawlock rl = {.c = NULL};
    dlock_acquire_options ao;
    dlock_stats st;

    if (w->role == R_SEM_FLOOR) {
        rl.c = raw_connect(cf);
        load_script(rl.c, rl.sha);
        snprintf(rl.key, sizeof rl.key, "%s:%d", k->lock, id);
    } else {
        dc = make_client(cf);
    }
    dlock_acquire_options_init(&ao);
    ao.wait_ms = w->role == R_WRITER ? cf->writer_wait_ms : WAIT_MS;
    ao.lease_ms = LEASE_MS;
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        usleep(200);
    for (;;) {
        dlock_lock *l = NULL;
        int64_t t0 = now_ns(), t1;
        int e;

        if (t0 >= sh->end_ns &&
            (w->role != R_READER || atomic_load(&sh->writers_active) == 0))
            break;
        e = acquire_one(cf, w->role, dc, &rl, k, &ao, &l);
        t1 = now_ns();
        if (w->nwait < cap)
            waits[w->nwait++] = t1 - t0;
        if (e == DLOCK_TIMEDOUT) {
            w->timeouts++;
            continue;
        }
        if (e != DLOCK_OK) {
            /* A few messages, not a flood; a refusal does not change. */
            if (w->errors < 5 || e == DLOCK_EINVAL)
                fprintf(stderr, "worker %d: acquire: %s: %s\n", id,
                        dlock_strerror(e), dc ? dlock_errmsg(dc) : "raw");
            w->errors++;
            if (e == DLOCK_EINVAL)
                break;
            continue;
        }
        enter(sh, w->role);
        section(rc, w->role, sh, k);
        leave(sh, w->role);
        if (l != NULL) {
            e = dlock_lock_release(l);
            if (e != DLOCK_OK) {
                if (w->errors < 5)
                    fprintf(stderr, "worker %d: release: %s\n", id,
                            dlock_strerror(e));
                w->errors++;
            }
        } else {
            cmd(rl.c, 0, "EVALSHA %s 1 %s %s", rl.sha, rl.key, rl.tok);
        }
        w->acq++;
        if (w->role == R_WRITER && cf->writer_gap_us > 0)
            usleep((useconds_t)cf->writer_gap_us);
    }
    if (w->role == R_WRITER)
        atomic_fetch_sub(&sh->writers_active, 1);
    w->finish_ns = now_ns();
    if (dc) {
        dlock_client_stats(dc, &st);
        w->requests = st.requests;
    } else {
        w->requests = 2 * w->acq;
    }
    dlock_client_free(dc);
    if (rl.c)
        redisFree(rl.c);
    redisFree(rc);
    _exit(0);
}

/* One run's totals, measured by the parent. */
struct prun {
    struct psh *sh;
    int64_t *waits;
    uint64_t cap;
    int nproc;
    double secs;
    struct rstats d; /* Redis CPU and commands over the run */
    int hung;
};

/* Fork sh->w[0..nproc-1] (their roles set), start them together, wait
 * for them (a worker stuck well past the deadline is killed and counted
 * as hung), and measure the run. */
static void run_workers(const struct conf *cf, struct prun *p,
                        const struct pkeys *k)
{
    pid_t pids[MAX_PROCS];
    int64_t t_start, t_end = 0, deadline;
    struct rstats st0, st1;
    int i;

    fflush(NULL);
    for (i = 0; i < p->nproc; i++) {
        pids[i] = fork();
        if (pids[i] < 0)
            die("fork: %s", strerror(errno));
        if (pids[i] == 0)
            worker(cf, p->sh, i, p->waits + (size_t)i * p->cap, p->cap, k);
    }
    deadline = now_ns() + 30000000000LL;
    while (atomic_load(&p->sh->ready) < p->nproc && now_ns() < deadline)
        usleep(1000);
    st0 = redis_stats(cf);
    t_start = now_ns();
    p->sh->end_ns = t_start + (int64_t)(cf->seconds * 1e9);
    atomic_store(&p->sh->go, 1);
    deadline = p->sh->end_ns + (2LL * WAIT_MS + cf->writer_wait_ms) * 1000000 +
               5000000000LL;
    p->hung += reap_workers(pids, p->nproc, deadline);
    st1 = redis_stats(cf);
    for (i = 0; i < p->nproc; i++)
        if (p->sh->w[i].finish_ns > t_end)
            t_end = p->sh->w[i].finish_ns;
    if (t_end <= t_start)
        t_end = now_ns();
    p->secs = (double)(t_end - t_start) / 1e9;
    p->d.cpu_us = st1.cpu_us - st0.cpu_us;
    p->d.calls = st1.calls - st0.calls;
}

/* The totals of the workers of one role. */
struct rolesum {
    int n;
    uint64_t acq, timeouts, errors, requests, amin, amax, nw;
    int64_t *waits; /* sorted */
};

/* Sum the workers of ROLE (waits sorted into a new array). */
static void summarize(const struct prun *p, int role, struct rolesum *s)
{
    int i;

    memset(s, 0, sizeof(*s));
    s->amin = UINT64_MAX;
    s->waits = calloc((size_t)TOTAL_RECORDS + 1, sizeof(int64_t));
    if (s->waits == NULL)
        die("%s", "out of memory");
    for (i = 0; i < p->nproc; i++) {
        const struct pstat *w = &p->sh->w[i];
        if (w->role != role)
            continue;
        s->n++;
        s->acq += w->acq;
        s->timeouts += w->timeouts;
        s->errors += w->errors;
        s->requests += w->requests;
        s->amin = w->acq < s->amin ? w->acq : s->amin;
        s->amax = w->acq > s->amax ? w->acq : s->amax;
        memcpy(s->waits + s->nw, p->waits + (size_t)i * p->cap,
               w->nwait * sizeof(int64_t));
        s->nw += w->nwait;
    }
    if (s->n == 0)
        s->amin = 0;
    qsort(s->waits, s->nw, sizeof(int64_t), cmp_i64);
}

/* Map the shared region and the wait records for NPROC workers. */
static void prun_open(struct prun *p, int nproc)
{
    memset(p, 0, sizeof(*p));
    p->nproc = nproc;
    p->cap = TOTAL_RECORDS / (uint64_t)nproc;
    p->sh = mmap(NULL, sizeof(struct psh), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    p->waits = mmap(NULL, (size_t)TOTAL_RECORDS * sizeof(int64_t),
                    PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p->sh == MAP_FAILED || p->waits == MAP_FAILED)
        die("mmap: %s", strerror(errno));
}

static void prun_close(struct prun *p)
{
    munmap(p->waits, (size_t)TOTAL_RECORDS * sizeof(int64_t));
    munmap(p->sh, sizeof(struct psh));
}

/* The fairness of a role: min/max acquisitions per worker. */
static double fairness(const struct rolesum *s)
{
    return s->amax ? (double)s->amin / (double)s->amax : 0.0;
}

/* sem: see the top of the file. */
int run_sem(const struct conf *cf)
{
    int nproc = cf->floor ? (int)cf->limit : cf->procs, i, bad;
    struct prun p;
    struct rolesum s;
    struct pkeys k;
    redisContext *rc;
    double a;
    long mi, mr;

    if (cf->nservers != 1)
        die("%s", "sem: one server (a semaphore refuses several)");
    memset(&k, 0, sizeof(k));
    snprintf(k.lock, sizeof k.lock, "bench:sem:%ld", (long)getpid());
    snprintf(k.inside, sizeof k.inside, "bench:inside:%ld", (long)getpid());
    rc = raw_connect(cf);
    cmd(rc, 0, "DEL %s", k.inside);
    prun_open(&p, nproc);
    for (i = 0; i < nproc; i++)
        p.sh->w[i].role = cf->floor ? R_SEM_FLOOR : R_SEM;
    run_workers(cf, &p, &k);
    cmd(rc, 0, "DEL %s", k.inside);
    redisFree(rc);
    summarize(&p, cf->floor ? R_SEM_FLOOR : R_SEM, &s);
    a = s.acq ? (double)s.acq : 1;
    mi = atomic_load(&p.sh->max_inside);
    mr = atomic_load(&p.sh->max_redis);
    bad = mi > cf->limit || mr > cf->limit;
    printf("{\"mode\":\"sem\",\"strategy\":\"%s\",\"nodes\":%zu,"
           "\"floor\":%s,\"procs\":%d,\"limit\":%lld,\"seconds\":%.3f,"
           "\"acquisitions\":%" PRIu64 ",\"acq_per_s\":%.1f,"
           "\"wait_p50_us\":%.1f,\"wait_p99_us\":%.1f,"
           "\"requests_per_acq\":%.3f,\"redis_cpu_us_per_acq\":%.2f,"
           "\"redis_commands_per_acq\":%.2f,"
           "\"fairness_min_over_max\":%.3f,\"max_inside\":%ld,"
           "\"max_inside_redis\":%ld,\"over_limit\":%s,"
           "\"timeouts\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"hung\":%d}\n",
           cf->floor ? "raw" : cf->strategy_name, cf->nservers,
           cf->floor ? "true" : "false", nproc, (long long)cf->limit, p.secs,
           s.acq, (double)s.acq / p.secs, pct(s.waits, s.nw, 0.5) / 1e3,
           pct(s.waits, s.nw, 0.99) / 1e3, (double)(s.requests + 2 * s.acq) / a,
           p.d.cpu_us / a, p.d.calls / a, fairness(&s), mi, mr,
           bad ? "true" : "false", s.timeouts, s.errors + s.timeouts, p.hung);
    free(s.waits);
    prun_close(&p);
    return bad ? 3 : 0;
}

/* rw: see the top of the file. */
int run_rw(const struct conf *cf)
{
    int nproc = cf->procs + cf->writers, i;
    struct prun p;
    struct rolesum r, w;
    struct pkeys k;
    redisContext *rc;
    double a;
    long viol;

    memset(&k, 0, sizeof(k));
    snprintf(k.lock, sizeof k.lock, "bench:rw:%ld", (long)getpid());
    snprintf(k.counter, sizeof k.counter, "bench:rwc:%ld", (long)getpid());
    rc = raw_connect(cf);
    cmd(rc, 0, "DEL %s", k.counter);
    prun_open(&p, nproc);
    for (i = 0; i < nproc; i++)
        p.sh->w[i].role = i < cf->writers ? R_WRITER : R_READER;
    atomic_store(&p.sh->writers_active, cf->writers);
    run_workers(cf, &p, &k);
    cmd(rc, 0, "DEL %s", k.counter);
    redisFree(rc);
    summarize(&p, R_READER, &r);
    summarize(&p, R_WRITER, &w);
    a = r.acq + w.acq ? (double)(r.acq + w.acq) : 1;
    viol = atomic_load(&p.sh->violations);
    printf("{\"mode\":\"rw\",\"strategy\":\"%s\",\"nodes\":%zu,"
           "\"floor\":false,\"readers\":%d,\"writers\":%d,"
           "\"prefer_readers\":%s,\"writer_wait_ms\":%lld,"
           "\"writer_gap_us\":%lld,\"seconds\":%.3f,"
           "\"acquisitions\":%" PRIu64 ",\"acq_per_s\":%.1f,"
           "\"reader_acquisitions\":%" PRIu64 ",\"reader_acq_per_s\":%.1f,"
           "\"reader_wait_p50_us\":%.1f,\"reader_wait_p99_us\":%.1f,"
           "\"reader_fairness_min_over_max\":%.3f,"
           "\"max_readers_inside\":%ld,"
           "\"writer_acquisitions\":%" PRIu64 ",\"writer_acq_per_s\":%.1f,"
           "\"writer_waits\":%" PRIu64 ",\"writer_wait_p50_us\":%.1f,"
           "\"writer_wait_p99_us\":%.1f,\"writer_wait_max_us\":%.1f,"
           "\"writer_timeouts\":%" PRIu64 ",\"requests_per_acq\":%.3f,"
           "\"redis_cpu_us_per_acq\":%.2f,\"redis_commands_per_acq\":%.2f,"
           "\"violations\":%ld,\"reader_timeouts\":%" PRIu64 ","
           "\"errors\":%" PRIu64 ",\"hung\":%d}\n",
           cf->strategy_name, cf->nservers, cf->procs, cf->writers,
           cf->prefer_readers ? "true" : "false", (long long)cf->writer_wait_ms,
           (long long)cf->writer_gap_us, p.secs, r.acq + w.acq,
           (double)(r.acq + w.acq) / p.secs, r.acq, (double)r.acq / p.secs,
           pct(r.waits, r.nw, 0.5) / 1e3, pct(r.waits, r.nw, 0.99) / 1e3,
           fairness(&r), atomic_load(&p.sh->max_readers), w.acq,
           (double)w.acq / p.secs, w.nw, pct(w.waits, w.nw, 0.5) / 1e3,
           pct(w.waits, w.nw, 0.99) / 1e3, w.nw ? w.waits[w.nw - 1] / 1e3 : 0.0,
           w.timeouts, (double)(r.requests + w.requests) / a + 2,
           p.d.cpu_us / a, p.d.calls / a, viol, r.timeouts,
           r.errors + r.timeouts + w.errors, p.hung);
    free(r.waits);
    free(w.waits);
    prun_close(&p);
    return viol > 0 ? 3 : 0;
}
