/*
 * memory.c - `dlock_bench memory`: what distinct names cost Redis in
 * memory once their locks are over (issue 31: every name ever locked left
 * its fence hash for 7 to 14 days).
 *
 *   dlock_bench memory -s URL [-k NAMES] [-p THREADS]
 *                      [--fence-retention MS] [--kind lock|permit|reader]
 *
 * THREADS threads (one client each) acquire and release NAMES distinct
 * names once each (names of this run only: bench:mem:<pid>:<i>), with the
 * client's fence retention (default: the library's). Redis's used_memory
 * and key count (INFO memory, DBSIZE) are read before and after, once
 * every lease is over (each name was released, so at once). Prints
 * bytes_per_name = (used_memory after - before) / NAMES and the
 * difference in MB. --kind: each name a plain lock (default), a
 * semaphore's permit (limit 2) or a read-write lock's reader.
 */
#include "bench.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mem_worker {
    const struct conf *cf;
    long from, to; /* names [from, to) */
    pthread_t tid;
};

/* One thread: its names, each acquired and released once. */
static void *mem_work(void *arg)
{
    struct mem_worker *w = arg;
    dlock_client *c = make_client(w->cf);
    char name[96];
    long i;
    dlock_acquire_options o;
    int permit = strcmp(w->cf->kind, "permit") == 0;
    int reader = strcmp(w->cf->kind, "reader") == 0;
    dlock_acquire_options_init(&o);
    o.wait_ms = 0;
    o.lease_ms = LEASE_MS;
    for (i = w->from; i < w->to; i++) {
        dlock_lock *l;
        int rc;
        snprintf(name, sizeof name, "bench:mem:%ld:%ld", (long)getpid(), i);
        rc = permit   ? dlock_sem_acquire(&l, c, name, 2, &o)
             : reader ? dlock_rw_acquire_shared(&l, c, name, 0, &o)
                      : dlock_lock_acquire(&l, c, name, 0, LEASE_MS);
        if (rc != DLOCK_OK)
            die("acquire %s: %s", name, dlock_errmsg(c));
        if (dlock_lock_release(l) != DLOCK_OK)
            die("release %s: %s", name, dlock_errmsg(c));
    }
    dlock_client_free(c);
    return NULL;
}

/* used_memory (bytes) and the key count of the server of r. */
static void mem_read(redisContext *r, long long *used, long long *keys)
{
    redisReply *rep = cmd(r, 1, "INFO memory");
    const char *p = strstr(rep->str, "used_memory:");
    if (p == NULL)
        die("%s", "INFO memory: no used_memory");
    *used = atoll(p + 12);
    freeReplyObject(rep);
    rep = cmd(r, 1, "DBSIZE");
    *keys = rep->integer;
    freeReplyObject(rep);
}

/* See the top of the file. */
int run_memory(const struct conf *cf)
{
    redisContext *r = raw_connect(cf);
    struct mem_worker *w = calloc((size_t)cf->procs, sizeof *w);
    long long used0, used1, keys0, keys1;
    int64_t t0;
    int i;

    if (w == NULL)
        die("%s", "out of memory");
    mem_read(r, &used0, &keys0);
    t0 = now_ns();
    for (i = 0; i < cf->procs; i++) {
        w[i].cf = cf;
        w[i].from = cf->nkeys * i / cf->procs;
        w[i].to = cf->nkeys * (i + 1) / cf->procs;
        if (pthread_create(&w[i].tid, NULL, mem_work, &w[i]) != 0)
            die("%s", "pthread_create");
    }
    for (i = 0; i < cf->procs; i++)
        pthread_join(w[i].tid, NULL);
    mem_read(r, &used1, &keys1);
    printf("{\"mode\":\"memory\",\"floor\":false,\"kind\":\"%s\","
           "\"names\":%ld,"
           "\"fence_retention_ms\":%lld,\"threads\":%d,"
           "\"seconds\":%.1f,\"used_memory_before\":%lld,"
           "\"used_memory_after\":%lld,\"keys_before\":%lld,"
           "\"keys_after\":%lld,\"delta_mb\":%.2f,"
           "\"bytes_per_name\":%.1f}\n",
           cf->kind, cf->nkeys,
           (long long)(cf->fence_retention_ms < 0 ? 604800000LL
                                                  : cf->fence_retention_ms),
           cf->procs, (double)(now_ns() - t0) / 1e9, used0, used1, keys0, keys1,
           (double)(used1 - used0) / 1048576.0,
           (double)(used1 - used0) / (double)cf->nkeys);
    redisFree(r);
    free(w);
    return 0;
}
