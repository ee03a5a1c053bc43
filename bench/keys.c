/*
 * keys.c - dlock_bench's many-keys workload (issue 17: "many keys across
 * 3 masters"), printed as one JSON line as W2's is.
 *
 *   dlock_bench keys -s URL [-S spin|notify|fair] [-p PROCS] [-k KEYS]
 *                    [-t SECONDS] [-r RAW_URL] [--wait-replicas N]
 *       PROCS processes, each with a client of its own, loop until the
 *       deadline: draw a key at random from KEYS names (a generator of
 *       its own, seeded by the worker's number), acquire it (wait 10 s,
 *       lease 10 s), GET and SET+1 its counter, release. The counter of
 *       lock NAME is "bench:kc:{NAME}": it shares the lock's hash slot
 *       (dlock's keys are "<prefix>:{NAME}..."), so in a cluster it is on
 *       the lock's master, and the section is a round trip to that master
 *       over a raw connection per master (route.c). With KEYS much larger
 *       than PROCS the processes seldom meet on a key: the load is spread,
 *       which is what a cluster of several masters is for; they still
 *       meet now and then, so exclusion is checked: at the end the
 *       counters must add up to the acquisitions (lost_updates = 0, else
 *       exit status 3). Also reported: acquisitions per master (how the
 *       slots spread the keys) and the Redis CPU and commands per
 *       acquisition summed over the masters.
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

/* Per-worker totals in shared memory. */
struct kstat {
    uint64_t acq;
    uint64_t errors;
    uint64_t requests;
    uint64_t per_master[ROUTE_MAX];
    int64_t finish_ns;
};

struct kshared {
    atomic_int ready;
    atomic_int go;
    int64_t end_ns;
    struct kstat w[MAX_PROCS];
};

/* Lock name and counter key of key number k of this run. */
static void key_names(long run, long k, char *name, size_t nsz, char *counter,
                      size_t csz)
{
    snprintf(name, nsz, "bench:k:%ld:%ld", run, k);
    snprintf(counter, csz, "bench:kc:{%s}", name);
}

/* xorshift64: a worker's own key generator (no rand(): one per process,
 * reproducible from the worker's number). */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One worker: loop the cycle on random keys until the deadline. Never
 * returns. */
static void keys_worker(const struct conf *cf, struct kshared *sh, int id,
                        long run)
{
    struct kstat *w = &sh->w[id];
    struct route rt;
    dlock_client *dc = make_client(cf);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
    dlock_stats st;

    route_open(&rt, raw_url(cf));
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        usleep(200);
    while (now_ns() < sh->end_ns) {
        char name[96], counter[128];
        redisContext *rc;
        redisReply *r;
        dlock_lock *l = NULL;
        long long v = 0;
        int e;

        key_names(run, (long)(next_rand(&seed) % (uint64_t)cf->nkeys), name,
                  sizeof(name), counter, sizeof(counter));
        e = dlock_lock_acquire(&l, dc, name, WAIT_MS, LEASE_MS);
        if (e != DLOCK_OK) {
            fprintf(stderr, "worker %d: acquire %s: %s: %s\n", id, name,
                    dlock_strerror(e), dlock_errmsg(dc));
            w->errors++;
            continue;
        }
        rc = route_for(&rt, counter);
        r = cmd(rc, 1, "GET %s", counter);
        if (r->type == REDIS_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
        cmd(rc, 0, "SET %s %lld", counter, v + 1);
        e = dlock_lock_release(l);
        if (e != DLOCK_OK) {
            fprintf(stderr, "worker %d: release %s: %s\n", id, name,
                    dlock_strerror(e));
            w->errors++;
        }
        w->per_master[route_index(&rt, counter)]++;
        w->acq++;
    }
    w->finish_ns = now_ns();
    dlock_client_stats(dc, &st);
    w->requests = st.requests;
    dlock_client_free(dc);
    route_close(&rt);
    _exit(0);
}

/* Sum of every counter of this run, deleting them; per-master sums go to
 * per (the route's master order). */
static long long sum_counters(const struct conf *cf, long run, long long *per)
{
    struct route rt;
    long long total = 0;
    long k;

    route_open(&rt, raw_url(cf));
    for (k = 0; k < cf->nkeys; k++) {
        char name[96], counter[128];
        redisContext *rc;
        redisReply *r;

        key_names(run, k, name, sizeof(name), counter, sizeof(counter));
        rc = route_for(&rt, counter);
        r = cmd(rc, 1, "GET %s", counter);
        if (r->type == REDIS_REPLY_STRING) {
            long long v = strtoll(r->str, NULL, 10);
            total += v;
            per[route_index(&rt, counter)] += v;
        }
        freeReplyObject(r);
        cmd(rc, 0, "DEL %s", counter);
    }
    route_close(&rt);
    return total;
}

/* Print the run's JSON line. */
static void keys_print(const struct conf *cf, const struct kshared *sh,
                       int procs, double secs, struct rstats d, long long final,
                       size_t nmasters, int hung)
{
    uint64_t acq = 0, req = 0, errors = 0, amin = UINT64_MAX, amax = 0;
    uint64_t per[ROUTE_MAX] = {0};
    double a;
    size_t m;
    int i;

    for (i = 0; i < procs; i++) {
        const struct kstat *w = &sh->w[i];
        acq += w->acq;
        req += w->requests;
        errors += w->errors;
        amin = w->acq < amin ? w->acq : amin;
        amax = w->acq > amax ? w->acq : amax;
        for (m = 0; m < nmasters; m++)
            per[m] += w->per_master[m];
    }
    a = acq ? (double)acq : 1;
    printf("{\"mode\":\"keys\",\"strategy\":\"%s\",\"nodes\":%zu,"
           "\"floor\":false,\"procs\":%d,\"keys\":%ld,\"masters\":%zu,"
           "\"wait_replicas\":%d,\"seconds\":%.3f,"
           "\"acquisitions\":%" PRIu64 ",\"acq_per_s\":%.1f,"
           "\"requests_per_acq\":%.3f,\"redis_cpu_us_per_acq\":%.2f,"
           "\"redis_commands_per_acq\":%.2f,\"fairness_min_over_max\":%.3f,"
           "\"per_master\":[",
           cf->strategy_name, cf->nservers, procs, cf->nkeys, nmasters,
           cf->wait_replicas, secs, acq, (double)acq / secs,
           (double)(req + 2 * acq) / a, d.cpu_us / a, d.calls / a,
           amax ? (double)amin / (double)amax : 0.0);
    for (m = 0; m < nmasters; m++)
        printf("%s%" PRIu64, m ? "," : "", per[m]);
    printf("],\"lost_updates\":%lld,\"errors\":%" PRIu64 ",\"hung\":%d}\n",
           (long long)acq - final, errors, hung);
}

/* The many-keys workload: PROCS workers for SECONDS; report. Exit status
 * 3 when the counters do not add up to the acquisitions. */
int run_keys(const struct conf *cf)
{
    int procs = cf->procs, i, hung;
    long run = (long)getpid();
    struct kshared *sh;
    pid_t pids[MAX_PROCS];
    struct rstats st0, st1, d;
    struct route rt;
    int64_t t_start, t_end = 0, deadline;
    long long final, per[ROUTE_MAX] = {0};
    uint64_t acq = 0;
    size_t nmasters;

    route_open(&rt, raw_url(cf)); /* fails early on a bad -s or -r */
    nmasters = rt.n;
    route_close(&rt);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        die("mmap: %s", strerror(errno));
    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    for (i = 0; i < procs; i++) {
        pids[i] = fork();
        if (pids[i] < 0)
            die("fork: %s", strerror(errno));
        if (pids[i] == 0)
            keys_worker(cf, sh, i, run);
    }
    deadline = now_ns() + 30000000000LL;
    while (atomic_load(&sh->ready) < procs && now_ns() < deadline)
        usleep(1000);
    st0 = redis_stats(cf);
    t_start = now_ns();
    sh->end_ns = t_start + (int64_t)(cf->seconds * 1e9);
    atomic_store(&sh->go, 1);
    hung = reap_workers(pids, procs,
                        sh->end_ns + 2LL * WAIT_MS * 1000000 + 5000000000LL);
    st1 = redis_stats(cf);
    d.cpu_us = st1.cpu_us - st0.cpu_us;
    d.calls = st1.calls - st0.calls;
    for (i = 0; i < procs; i++) {
        acq += sh->w[i].acq;
        if (sh->w[i].finish_ns > t_end)
            t_end = sh->w[i].finish_ns;
    }
    if (t_end <= t_start)
        t_end = now_ns();
    final = sum_counters(cf, run, per);
    keys_print(cf, sh, procs, (double)(t_end - t_start) / 1e9, d, final,
               nmasters, hung);
    munmap(sh, sizeof(*sh));
    return (long long)acq != final ? 3 : 0;
}
