/*
 * bench.h - what dlock_bench.c's workloads share with prims.c's: the
 * command-line settings, the raw-hiredis helpers the floors use, the
 * Redis-side counters and the percentile helpers. Private to the
 * benchmark program (bench/), never installed.
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <dlock.h>
#include <hiredis/hiredis.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_SERVERS 16
#define MAX_PROCS 256
#define LEASE_MS 10000
#define WAIT_MS 10000
#define TOTAL_RECORDS (4u << 20)

/* Command-line settings. */
struct conf {
    const char *mode;
    const char *servers[MAX_SERVERS];
    size_t nservers;
    dlock_wait_strategy strategy;
    const char *strategy_name;
    long cycles;
    int procs;
    double seconds;
    int floor;
    int paired;
    int insecure;
    const char *handoff_file;
    /* prims.c: the semaphore's limit (sem), the writers among the
     * readers (rw), DLOCK_RW_PREFER_READERS on the readers, a writer's
     * wait bound and its pause between two acquisitions. */
    int64_t limit;
    int writers;
    int prefer_readers;
    int64_t writer_wait_ms;
    int64_t writer_gap_us;
    /* Topologies (bench/topology): the server dlock_bench's own commands
     * (counters, INFO) go to when -s is a redis+sentinel:// URL (-r, the
     * master's redis:// URL); WAIT after every lock write
     * (--wait-replicas); the many-keys workload's key count (-k). */
    const char *raw_url;
    int wait_replicas;
    long nkeys;
    /* The clients' fence_retention_ms (--fence-retention); -1: the
     * library's default. */
    int64_t fence_retention_ms;
    /* --layout string: the clients use DLOCK_LAYOUT_STRING (issue 31). */
    int string_layout;
    /* memory.c: what each name is (--kind): "lock" (default), "permit"
     * (a semaphore's, limit 2) or "reader" (a read-write lock's). */
    const char *kind;
};

/* Redis-side totals, summed over the servers (see redis_stats()). */
struct rstats {
    double cpu_us;
    double calls;
};

/* The compare-and-delete script of the floors. */
extern const char *bench_del_script;

/* common.c */
int64_t now_ns(void);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
redisContext *raw_connect_url(const char *url);
redisContext *raw_connect(const struct conf *cf);
redisReply *cmd(redisContext *c, int keep, const char *fmt, ...);
void load_script(redisContext *c, char *sha);
dlock_client *make_client(const struct conf *cf);
int cmp_i64(const void *a, const void *b);
int64_t pct(const int64_t *v, size_t n, double q);
/* Wait for every worker pids[0..procs-1] (0: none); those still running
 * past deadline (CLOCK_MONOTONIC ns) are killed with SIGKILL. Returns how
 * many were killed (hung). */
int reap_workers(pid_t *pids, int procs, int64_t deadline);

/* route.c: raw connections routed by hash slot (Cluster) or to -r, and
 * Redis's own counters summed over the servers (INFO commandstats, cpu). */
struct rstats redis_stats(const struct conf *cf);
#define ROUTE_MAX 16
struct route {
    redisContext *c[ROUTE_MAX];
    char host[ROUTE_MAX][256];
    int port[ROUTE_MAX];
    size_t n;
    unsigned char slot[16384];
};
unsigned route_slot(const char *key);
void route_open(struct route *r, const char *url);
redisContext *route_for(struct route *r, const char *key);
size_t route_index(const struct route *r, const char *key);
void route_close(struct route *r);
const char *raw_url(const struct conf *cf);
redisContext *raw_connect_key(const struct conf *cf, const char *key);

/* keys.c: `dlock_bench keys`, many keys (across a cluster's masters). */
int run_keys(const struct conf *cf);

/* holds.c: `dlock_bench holds`, the cost of a cycle beside many holds. */
int run_holds(const struct conf *cf);

/* memory.c: `dlock_bench memory`, Redis memory after many names. */
int run_memory(const struct conf *cf);

/* prims.c: `dlock_bench sem` and `dlock_bench rw`. */
int run_sem(const struct conf *cf);
int run_rw(const struct conf *cf);

#endif
