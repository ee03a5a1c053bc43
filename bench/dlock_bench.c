/*
 * dlock_bench.c - one benchmark run of libdlock, or of its round-trip
 * floor, printed as one JSON line on stdout.
 *
 * bench/run drives this program: it starts the redis-servers, calls it
 * once per (workload, strategy, node count), and aggregates the lines into
 * bench/results.json and a table. Modes:
 *
 *   dlock_bench w1 -s URL [-s URL...] [-S fair|notify|spin] [-n CYCLES]
 *                  [--floor] [--insecure]
 *       One client: acquire (lease 10 s) + release, CYCLES times, each
 *       cycle timed. --floor: the same two round trips with raw hiredis
 *       (SET NX PX, then EVALSHA of a compare-and-delete script).
 *       --paired: both, alternating in blocks in one process (two lines).
 *
 *   dlock_bench w2 -s URL [-s URL...] [-S ...] [-p PROCS] [-t SECONDS]
 *                  [-H HANDOFF_FILE] [--floor]
 *       PROCS processes on one key, each looping acquire, GET counter,
 *       SET counter+1 (raw hiredis, own connection), release until the
 *       deadline. Every acquire/release return is stamped on
 *       CLOCK_MONOTONIC (system-wide) into shared memory; afterwards the
 *       stamps are merged to give handoff latencies (a release returning in
 *       one process to the next acquire returning in another), fairness
 *       and lost updates (final counter vs acquisitions). Redis CPU is the
 *       INFO cpu delta summed over the servers, Redis commands the INFO
 *       commandstats delta (commands run by scripts counted; W1 reports
 *       both per cycle). --floor: one process doing the cycle with raw
 *       hiredis (SET NX PX, GET, SET, EVALSHA delete).
 *
 *   dlock_bench sem -s URL [-S ...] [-p PROCS] [-l LIMIT] [-t SECONDS]
 *                   [--floor]
 *   dlock_bench rw -s URL [-s URL...] [-p READERS] [-W WRITERS]
 *                  [-w WRITER_WAIT_MS] [-g WRITER_GAP_US]
 *                  [--prefer-readers] [-t SECONDS]
 *       The semaphore and the read-write lock: see prims.c.
 *
 *   dlock_bench keys -s URL [-S ...] [-p PROCS] [-k KEYS] [-t SECONDS]
 *       Many keys: PROCS processes, each looping over keys drawn at random
 *       from KEYS (bench/topology: across a cluster's masters), each
 *       cycle W2's: acquire, GET and SET of a counter beside the lock (the
 *       lock's name as its hash tag, so on the lock's master), release.
 *       See keys.c.
 *
 *   dlock_bench memory -s URL [-k NAMES] [-p THREADS] [--fence-retention MS]
 *                      [--kind lock|permit|reader]
 *       Redis's used_memory before and after NAMES distinct names were
 *       each acquired and released once. See memory.c.
 *   dlock_bench holds -s URL [-k HOLDS] [-n CYCLES]
 *       The client CPU of an acquire + release while the same client holds
 *       HOLDS other locks, against none held. See holds.c.
 *
 * Any mode: --wait-replicas N sets the client's wait_replicas (WAIT N
 * after every lock write); -r URL names the server of dlock_bench's own
 * commands when -s is a redis+sentinel:// URL (the master's redis://).
 *
 * Raw hiredis connections use the first URL (or -r), which must be
 * redis://host:port (no password) for --floor and for the counter; with
 * redis+cluster:// the counters and INFO go to the masters serving them
 * (route.c).
 * Exit status: 0 when the run completed (whatever the numbers), 1 when it
 * could not run, 3 when updates were lost (or, sem and rw, when more
 * holders than allowed were inside at once).
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One acquisition as seen by the worker that made it. */
struct rec {
    int64_t acq_ns;
    int64_t rel_ns;
};

/* Per-worker totals in shared memory. */
struct wstat {
    uint64_t acq;
    uint64_t requests;
    uint64_t errors;
    uint64_t nrec;
    int64_t finish_ns;
};

/* The region shared by the parent and the workers. */
struct shared {
    atomic_int ready;
    atomic_int go;
    int64_t end_ns;
    struct wstat w[MAX_PROCS];
};

/*
 * The floor's lock: raw hiredis connections to every server. With one
 * server a call is exactly redisCommand(); with several it is the
 * cheapest parallel fan-out hiredis allows: the command is appended on
 * every connection, every output buffer is flushed, and only then are
 * the replies read, one connection after another (they are in flight
 * together, so the wait is the slowest server's). A naive Redlock without
 * scripts, fencing or reentrancy: what any Redlock pays on these servers.
 */
struct fan {
    redisContext *c[MAX_SERVERS];
    size_t n;
    char sha[41];
};

static void fan_open(struct fan *f, const struct conf *cf)
{
    size_t i;
    f->n = cf->nservers;
    for (i = 0; i < f->n; i++) {
        f->c[i] = raw_connect_url(cf->servers[i]);
        load_script(f->c[i], f->sha); /* the same SHA everywhere */
    }
}

static void fan_close(struct fan *f)
{
    size_t i;
    for (i = 0; i < f->n; i++)
        redisFree(f->c[i]);
    f->n = 0;
}

/* Run one command on every server in parallel; returns how many answered
 * with a status reply (+OK: SET NX PX succeeded). Exits when a connection
 * fails or a server answers with an error. */
static size_t fan_call(struct fan *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static size_t fan_call(struct fan *f, const char *fmt, ...)
{
    size_t i, ok = 0;
    for (i = 0; i < f->n; i++) {
        va_list ap;
        int done = 0;
        va_start(ap, fmt);
        if (redisvAppendCommand(f->c[i], fmt, ap) != REDIS_OK)
            die("redis: %s", f->c[i]->errstr);
        va_end(ap);
        while (!done)
            if (redisBufferWrite(f->c[i], &done) != REDIS_OK)
                die("redis: %s", f->c[i]->errstr);
    }
    for (i = 0; i < f->n; i++) {
        void *v = NULL;
        redisReply *r;
        if (redisGetReply(f->c[i], &v) != REDIS_OK || v == NULL)
            die("redis: %s", f->c[i]->errstr);
        r = v;
        if (r->type == REDIS_REPLY_ERROR)
            die("redis error: %s", r->str);
        if (r->type == REDIS_REPLY_STATUS)
            ok++;
        freeReplyObject(r);
    }
    return ok;
}

/* One W1 side: a raw connection (the floor) or a dlock client. */
struct w1side {
    struct fan raw; /* the floor when raw.n > 0 */
    dlock_client *dc;
    double cpu_us; /* Redis CPU over this side's blocks, all servers */
    double calls;  /* Redis commands over this side's blocks */
    int64_t *lat;
    long n;
    int64_t total;
    long errors;
};

/* One acquire+release cycle on side w; its latency is kept when keep. */
static void w1_cycle(struct w1side *w, const char *key, long i, int keep)
{
    int64_t t0 = now_ns(), t1;
    char tok[64];

    if (w->raw.n > 0) {
        snprintf(tok, sizeof(tok), "%ld:%ld", (long)getpid(), i);
        if (fan_call(&w->raw, "SET %s %s NX PX %d", key, tok, LEASE_MS) <
            w->raw.n / 2 + 1)
            w->errors++;
        fan_call(&w->raw, "EVALSHA %s 1 %s %s", w->raw.sha, key, tok);
    } else {
        dlock_lock *l = NULL;
        int e = dlock_lock_acquire(&l, w->dc, key, WAIT_MS, LEASE_MS);
        if (e != DLOCK_OK) {
            fprintf(stderr, "acquire: %s: %s\n", dlock_strerror(e),
                    dlock_errmsg(w->dc));
            w->errors++;
            return;
        }
        if (dlock_lock_release(l) != DLOCK_OK)
            w->errors++;
    }
    t1 = now_ns();
    if (keep) {
        w->lat[w->n++] = t1 - t0;
        w->total += t1 - t0;
    }
}

/* Print one side's W1 line. */
static void w1_print(const struct conf *cf, struct w1side *w, int floor,
                     long warm)
{
    dlock_stats st;
    long n = w->n ? w->n : 1;

    qsort(w->lat, (size_t)w->n, sizeof(*w->lat), cmp_i64);
    memset(&st, 0, sizeof(st));
    if (w->dc)
        dlock_client_stats(w->dc, &st);
    printf("{\"mode\":\"w1\",\"strategy\":\"%s\",\"layout\":\"%s\","
           "\"nodes\":%zu,"
           "\"floor\":%s,\"paired\":%s,\"cycles\":%ld,"
           "\"cycles_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
           "\"mean_us\":%.1f,\"requests_per_cycle\":%.3f,"
           "\"redis_cpu_us_per_cycle\":%.1f,"
           "\"redis_commands_per_cycle\":%.2f,\"errors\":%ld}\n",
           floor ? "raw" : cf->strategy_name,
           cf->string_layout && !floor ? "string" : "hash", cf->nservers,
           floor ? "true" : "false", cf->paired ? "true" : "false", w->n,
           w->total ? (double)w->n * 1e9 / (double)w->total : 0.0,
           pct(w->lat, (size_t)w->n, 0.5) / 1e3,
           pct(w->lat, (size_t)w->n, 0.99) / 1e3,
           (double)w->total / (double)n / 1e3,
           w->dc ? (double)st.requests / (double)(w->n + warm)
                 : 2.0 * (double)w->raw.n,
           w->cpu_us / (double)n, w->calls / (double)n, w->errors);
}

/*
 * W1: N timed acquire+release cycles, with dlock or the raw floor. With
 * --paired both run in this process, alternating in blocks of 200 cycles,
 * so that noise from other load on the machine hits both alike; two lines
 * are printed, the floor's first. cycles_per_s is 1 / mean cycle time.
 */
static int run_w1(const struct conf *cf)
{
    struct w1side side[2];
    long warm = cf->cycles / 20 + 10, i, b, block = 200;
    int ns = 0, k;
    char key[64];

    memset(side, 0, sizeof(side));
    snprintf(key, sizeof(key), "bench:w1:%ld", (long)getpid());
    if (cf->floor || cf->paired) {
        fan_open(&side[ns].raw, cf);
        ns++;
    }
    if (!cf->floor) {
        side[ns].dc = make_client(cf);
        ns++;
    }
    for (k = 0; k < ns; k++) {
        side[k].lat = calloc((size_t)cf->cycles, sizeof(int64_t));
        if (side[k].lat == NULL)
            die("%s", "out of memory");
        for (i = 0; i < warm; i++)
            w1_cycle(&side[k], key, -i - 1, 0);
    }
    /* Redis CPU is read around every block (INFO on each server), so
     * that each side is charged for its own cycles only. */
    for (b = 0; b < cf->cycles; b += block)
        for (k = 0; k < ns; k++) {
            struct rstats s0 = redis_stats(cf), s1;
            for (i = b; i < b + block && i < cf->cycles; i++)
                w1_cycle(&side[k], key, i, 1);
            s1 = redis_stats(cf);
            side[k].cpu_us += s1.cpu_us - s0.cpu_us;
            side[k].calls += s1.calls - s0.calls;
        }
    for (k = 0; k < ns; k++) {
        w1_print(cf, &side[k], side[k].raw.n > 0, warm);
        fan_close(&side[k].raw);
        dlock_client_free(side[k].dc);
        free(side[k].lat);
    }
    return 0;
}

/* One W2 worker: loop the cycle until the deadline, stamping each
 * acquisition into recs (at most cap of them). Never returns. */
static void w2_worker(const struct conf *cf, struct shared *sh, int id,
                      struct rec *recs, uint64_t cap, const char *key,
                      const char *counter)
{
    redisContext *rc = raw_connect_key(cf, counter);
    dlock_client *dc = NULL;
    struct wstat *w = &sh->w[id];
    struct fan raw = {.n = 0};
    char tok[64];
    dlock_stats st;
    long n = 0;

    if (cf->floor)
        fan_open(&raw, cf);
    else
        dc = make_client(cf);
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        usleep(200);
    while (now_ns() < sh->end_ns) {
        redisReply *r;
        dlock_lock *l = NULL;
        long long v = 0;
        int64_t ta, tr;

        if (cf->floor) {
            snprintf(tok, sizeof(tok), "%d:%ld", id, n++);
            if (fan_call(&raw, "SET %s %s NX PX %d", key, tok, LEASE_MS) <
                raw.n / 2 + 1) {
                w->errors++;
                continue;
            }
        } else {
            int e = dlock_lock_acquire(&l, dc, key, WAIT_MS, LEASE_MS);
            if (e != DLOCK_OK) {
                fprintf(stderr, "worker %d: acquire: %s: %s\n", id,
                        dlock_strerror(e), dlock_errmsg(dc));
                w->errors++;
                continue;
            }
        }
        ta = now_ns();
        r = cmd(rc, 1, "GET %s", counter);
        if (r->type == REDIS_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
        cmd(rc, 0, "SET %s %lld", counter, v + 1);
        if (cf->floor) {
            fan_call(&raw, "EVALSHA %s 1 %s %s", raw.sha, key, tok);
        } else {
            int e = dlock_lock_release(l);
            if (e != DLOCK_OK) {
                fprintf(stderr, "worker %d: release: %s\n", id,
                        dlock_strerror(e));
                w->errors++;
            }
        }
        tr = now_ns();
        if (w->nrec < cap) {
            recs[w->nrec].acq_ns = ta;
            recs[w->nrec].rel_ns = tr;
            w->nrec++;
        }
        w->acq++;
    }
    w->finish_ns = now_ns();
    if (dc) {
        dlock_client_stats(dc, &st);
        w->requests = st.requests;
    } else {
        w->requests = (2 * w->acq + w->errors) * raw.n;
    }
    dlock_client_free(dc);
    fan_close(&raw);
    redisFree(rc);
    _exit(0);
}

/* A stamped acquisition with the worker that made it, for merging. */
struct mrec {
    int64_t acq_ns;
    int64_t rel_ns;
    int worker;
};

static int cmp_mrec(const void *a, const void *b)
{
    int64_t x = ((const struct mrec *)a)->acq_ns;
    int64_t y = ((const struct mrec *)b)->acq_ns;
    return (x > y) - (x < y);
}

/* W2/W3: PROCS workers on one key for SECONDS; merge and report. */
static int run_w2(const struct conf *cf)
{
    int procs = cf->floor ? 1 : cf->procs;
    uint64_t cap = TOTAL_RECORDS / (uint64_t)procs, acq = 0, req = 0;
    uint64_t errors = 0, amin = UINT64_MAX, amax = 0, n = 0, nh = 0;
    uint64_t same = 0, negative = 0;
    size_t shsz = sizeof(struct shared);
    size_t rsz = (size_t)TOTAL_RECORDS * sizeof(struct rec);
    struct shared *sh;
    struct rec *recs;
    struct mrec *m;
    int64_t *h, t_start, t_end = 0, deadline;
    pid_t pids[MAX_PROCS];
    char key[64], counter[64];
    struct rstats st0, st1;
    long long final = 0;
    int i, hung;
    redisContext *rc;
    redisReply *r;

    sh = mmap(NULL, shsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
              -1, 0);
    recs = mmap(NULL, rsz, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (sh == MAP_FAILED || recs == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    snprintf(key, sizeof(key), "bench:w2:%ld", (long)getpid());
    snprintf(counter, sizeof(counter), "bench:counter:%ld", (long)getpid());
    rc = raw_connect_key(cf, counter);
    cmd(rc, 0, "DEL %s", counter);
    fflush(NULL);
    for (i = 0; i < procs; i++) {
        pids[i] = fork();
        if (pids[i] < 0)
            die("fork: %s", strerror(errno));
        if (pids[i] == 0)
            w2_worker(cf, sh, i, recs + (size_t)i * cap, cap, key, counter);
    }
    deadline = now_ns() + 30000000000LL;
    while (atomic_load(&sh->ready) < procs && now_ns() < deadline)
        usleep(1000);
    st0 = redis_stats(cf);
    t_start = now_ns();
    sh->end_ns = t_start + (int64_t)(cf->seconds * 1e9);
    atomic_store(&sh->go, 1);
    /* Bounded wait: a worker stuck past the deadline plus twice the wait
     * bound is reported as hung and killed. */
    deadline = sh->end_ns + 2LL * WAIT_MS * 1000000 + 5000000000LL;
    hung = reap_workers(pids, procs, deadline);
    st1 = redis_stats(cf);
    r = cmd(rc, 1, "GET %s", counter);
    if (r->type == REDIS_REPLY_STRING)
        final = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    cmd(rc, 0, "DEL %s", counter);
    redisFree(rc);

    for (i = 0; i < procs; i++) {
        struct wstat *w = &sh->w[i];
        acq += w->acq;
        req += w->requests;
        errors += w->errors;
        n += w->nrec;
        amin = w->acq < amin ? w->acq : amin;
        amax = w->acq > amax ? w->acq : amax;
        if (w->finish_ns > t_end)
            t_end = w->finish_ns;
    }
    if (t_end <= t_start)
        t_end = now_ns();
    m = calloc(n + 1, sizeof(*m));
    h = calloc(n + 1, sizeof(*h));
    if (m == NULL || h == NULL)
        die("%s", "out of memory");
    n = 0;
    for (i = 0; i < procs; i++) {
        uint64_t k;
        for (k = 0; k < sh->w[i].nrec; k++) {
            m[n].acq_ns = recs[(size_t)i * cap + k].acq_ns;
            m[n].rel_ns = recs[(size_t)i * cap + k].rel_ns;
            m[n].worker = i;
            n++;
        }
    }
    qsort(m, n, sizeof(*m), cmp_mrec);
    for (uint64_t k = 1; k < n; k++) {
        int64_t d;
        if (m[k].worker == m[k - 1].worker) {
            same++;
            continue;
        }
        /* The release reply may arrive after the next holder's acquire
         * reply: the handoff then counts as 0 (and is counted). */
        d = m[k].acq_ns - m[k - 1].rel_ns;
        if (d < 0) {
            negative++;
            d = 0;
        }
        h[nh++] = d;
    }
    qsort(h, nh, sizeof(*h), cmp_i64);
    if (cf->handoff_file && nh > 0) {
        FILE *f = fopen(cf->handoff_file, "w");
        if (f == NULL)
            die("%s: cannot write", cf->handoff_file);
        for (uint64_t k = 0; k < nh; k++)
            fprintf(f, "%.1f\n", h[k] / 1e3);
        fclose(f);
    }
    {
        double secs = (double)(t_end - t_start) / 1e9;
        double a = acq ? (double)acq : 1;
        double hold = 0, ho = 0;
        /* Where a cycle's time goes: the mean time held (acquire return
         * to release return) and the mean handoff between processes. */
        for (uint64_t k = 0; k < n; k++)
            hold += (double)(m[k].rel_ns - m[k].acq_ns);
        for (uint64_t k = 0; k < nh; k++)
            ho += (double)h[k];
        printf("{\"mode\":\"w2\",\"strategy\":\"%s\",\"nodes\":%zu,"
               "\"floor\":%s,\"procs\":%d,\"seconds\":%.3f,"
               "\"acquisitions\":%" PRIu64 ",\"acq_per_s\":%.1f,"
               "\"requests_per_acq\":%.3f,\"redis_cpu_us_per_acq\":%.2f,"
               "\"redis_commands_per_acq\":%.2f,"
               "\"handoffs\":%" PRIu64 ",\"handoff_p50_us\":%.1f,"
               "\"handoff_p99_us\":%.1f,\"handoff_mean_us\":%.1f,"
               "\"hold_mean_us\":%.1f,\"handoff_negative\":%" PRIu64 ","
               "\"same_worker_reacquire\":%" PRIu64 ","
               "\"fairness_min_over_max\":%.3f,\"lost_updates\":%lld,"
               "\"errors\":%" PRIu64 ",\"hung\":%d}\n",
               cf->floor ? "raw" : cf->strategy_name, cf->nservers,
               cf->floor ? "true" : "false", procs, secs, acq,
               (double)acq / secs, (double)(req + 2 * acq) / a,
               (st1.cpu_us - st0.cpu_us) / a, (st1.calls - st0.calls) / a, nh,
               pct(h, nh, 0.5) / 1e3, pct(h, nh, 0.99) / 1e3,
               nh ? ho / (double)nh / 1e3 : 0.0,
               n ? hold / (double)n / 1e3 : 0.0, negative, same,
               amax ? (double)amin / (double)amax : 0.0, (long long)acq - final,
               errors, hung);
    }
    free(m);
    free(h);
    munmap(recs, rsz);
    munmap(sh, shsz);
    return (long long)acq != final ? 3 : 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: dlock_bench w1|w2|sem|rw -s URL [-s URL...] "
            "[-S spin|notify|fair]\n"
            "       [-n cycles] [-p procs] [-t seconds] [-H handoff_file] "
            "[--floor] [--paired] [--insecure]\n"
            "       [-l limit] [-W writers] [-w writer_wait_ms] "
            "[-g writer_gap_us] [--prefer-readers]\n"
            "       dlock_bench keys -s URL [-k keys] [-p procs] "
            "[-t seconds] [-S ...]\n"
            "       dlock_bench holds -s URL [-k holds] [-n cycles]\n"
            "       dlock_bench memory -s URL [-k names] [-p threads]\n"
            "                          [--kind lock|permit|reader]\n"
            "       (any mode) [--fence-retention MS] [--layout hash|string]\n"
            "       (any mode) [-r RAW_URL] [--wait-replicas N]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    struct conf cf;
    int i;

    memset(&cf, 0, sizeof(cf));
    cf.strategy = DLOCK_WAIT_FAIR; /* the library's default */
    cf.strategy_name = "fair";
    cf.cycles = 10000;
    cf.procs = 8;
    cf.seconds = 5;
    cf.limit = 4;
    cf.writer_wait_ms = WAIT_MS;
    cf.nkeys = 1000;
    cf.fence_retention_ms = -1;
    /* DLOCK_LAYOUT=string (as the CLI reads it): the string layout unless
     * --layout says otherwise, so that bench/run's W2/W3 can run in it. */
    cf.string_layout = getenv("DLOCK_LAYOUT") != NULL &&
                       strcmp(getenv("DLOCK_LAYOUT"), "string") == 0;
    cf.kind = "lock";
    if (argc < 2)
        usage();
    cf.mode = argv[1];
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--floor") == 0) {
            cf.floor = 1;
            continue;
        }
        if (strcmp(a, "--paired") == 0) {
            cf.paired = 1;
            continue;
        }
        if (strcmp(a, "--insecure") == 0) {
            cf.insecure = 1;
            continue;
        }
        if (strcmp(a, "--prefer-readers") == 0) {
            cf.prefer_readers = 1;
            continue;
        }
        if (v == NULL)
            usage();
        i++;
        if (strcmp(a, "-s") == 0 && cf.nservers < MAX_SERVERS)
            cf.servers[cf.nservers++] = v;
        else if (strcmp(a, "-S") == 0) {
            cf.strategy_name = v;
            if (strcmp(v, "spin") == 0)
                cf.strategy = DLOCK_WAIT_SPIN;
            else if (strcmp(v, "notify") == 0)
                cf.strategy = DLOCK_WAIT_NOTIFY;
            else if (strcmp(v, "fair") == 0)
                cf.strategy = DLOCK_WAIT_FAIR;
            else
                usage();
        } else if (strcmp(a, "-n") == 0)
            cf.cycles = atol(v);
        else if (strcmp(a, "-p") == 0)
            cf.procs = atoi(v);
        else if (strcmp(a, "-t") == 0)
            cf.seconds = atof(v);
        else if (strcmp(a, "-H") == 0)
            cf.handoff_file = v;
        else if (strcmp(a, "-l") == 0)
            cf.limit = atol(v);
        else if (strcmp(a, "-W") == 0)
            cf.writers = atoi(v);
        else if (strcmp(a, "-w") == 0)
            cf.writer_wait_ms = atol(v);
        else if (strcmp(a, "-g") == 0)
            cf.writer_gap_us = atol(v);
        else if (strcmp(a, "-r") == 0)
            cf.raw_url = v;
        else if (strcmp(a, "--wait-replicas") == 0)
            cf.wait_replicas = atoi(v);
        else if (strcmp(a, "-k") == 0)
            cf.nkeys = atol(v);
        else if (strcmp(a, "--fence-retention") == 0)
            cf.fence_retention_ms = atoll(v);
        else if (strcmp(a, "--layout") == 0 &&
                 (strcmp(v, "string") == 0 || strcmp(v, "hash") == 0))
            cf.string_layout = strcmp(v, "string") == 0;
        else if (strcmp(a, "--kind") == 0 &&
                 (strcmp(v, "lock") == 0 || strcmp(v, "permit") == 0 ||
                  strcmp(v, "reader") == 0))
            cf.kind = v;
        else
            usage();
    }
    if (cf.nservers == 0 || cf.cycles < 1 || cf.procs < 1 ||
        cf.procs > MAX_PROCS || cf.seconds <= 0 || cf.limit < 1 ||
        cf.limit > MAX_PROCS || cf.writers < 0 ||
        cf.procs + cf.writers > MAX_PROCS || cf.writer_wait_ms < 1 ||
        cf.writer_gap_us < 0 || cf.wait_replicas < 0 || cf.nkeys < 1)
        usage();
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(cf.mode, "w1") == 0)
        return run_w1(&cf);
    if (strcmp(cf.mode, "w2") == 0)
        return run_w2(&cf);
    if (strcmp(cf.mode, "sem") == 0)
        return run_sem(&cf);
    if (strcmp(cf.mode, "rw") == 0)
        return run_rw(&cf);
    if (strcmp(cf.mode, "keys") == 0)
        return run_keys(&cf);
    if (strcmp(cf.mode, "holds") == 0)
        return run_holds(&cf);
    if (strcmp(cf.mode, "memory") == 0)
        return run_memory(&cf);
    usage();
    return 1;
}
