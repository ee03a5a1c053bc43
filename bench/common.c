/*
 * common.c - what the parts of dlock_bench share: the clock, dying with a
 * message, raw hiredis connections and commands (the floors' side), the
 * dlock client of a run, percentiles.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *bench_del_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

/* Nanoseconds on CLOCK_MONOTONIC. */
int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Print a message and exit 1: the run could not be made. */
void die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "dlock_bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* Connect with raw hiredis to one server (redis://host:port, or the
 * first seed of redis+cluster://host:port,...: bench/cluster runs a
 * cluster of one master, which serves every key). */
redisContext *raw_connect_url(const char *url)
{
    char host[256], first[300];
    const char *u = url, *colon;
    int port;
    redisContext *c;
    struct timeval tv = {5, 0};

    if (strncmp(u, "redis+cluster://", 16) == 0) {
        snprintf(first, sizeof first, "%.*s", (int)strcspn(u + 16, ","),
                 u + 16);
        u = first;
    } else if (strncmp(u, "redis://", 8) != 0) {
        die("raw connection needs redis://host:port, not %s", u);
    } else {
        u += 8;
    }
    colon = strrchr(u, ':');
    if (colon == NULL || (size_t)(colon - u) >= sizeof(host))
        die("bad URL %s", url);
    memcpy(host, u, (size_t)(colon - u));
    host[colon - u] = '\0';
    port = atoi(colon + 1);
    c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err)
        die("connect: %s", c ? c->errstr : "out of memory");
    redisSetTimeout(c, tv);
    return c;
}

/* Connect with raw hiredis to the first server. */
redisContext *raw_connect(const struct conf *cf)
{
    return raw_connect_url(cf->servers[0]);
}

/* Run one command; exit when the connection fails. The reply is freed
 * unless keep is set. */
redisReply *cmd(redisContext *c, int keep, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL)
        die("redis: %s", c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        die("redis error: %s", r->str);
    if (!keep) {
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* Load the compare-and-delete script; its SHA goes to sha (41 bytes). */
void load_script(redisContext *c, char *sha)
{
    redisReply *r = cmd(c, 1, "SCRIPT LOAD %s", bench_del_script);
    snprintf(sha, 41, "%s", r->str);
    freeReplyObject(r);
}

/* Make a client for the configured servers and strategy. */
dlock_client *make_client(const struct conf *cf)
{
    dlock_options o;
    dlock_client *c = NULL;
    char err[256] = "";

    dlock_options_init(&o);
    o.servers = cf->servers;
    o.nservers = cf->nservers;
    o.wait_strategy = cf->strategy;
    o.tls_insecure = cf->insecure;
    o.command_timeout_ms = 10000;
    o.wait_replicas = cf->wait_replicas;
    if (cf->fence_retention_ms >= 0)
        o.fence_retention_ms = cf->fence_retention_ms;
    if (dlock_client_new(&c, &o, err, sizeof(err)) != DLOCK_OK)
        die("dlock_client_new: %s", err);
    if (cf->string_layout &&
        dlock_client_set_layout(c, DLOCK_LAYOUT_STRING) != DLOCK_OK)
        die("dlock_client_set_layout: %s", dlock_errmsg(c));
    return c;
}

int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Percentile q (0..1) of a sorted array, nearest rank. */
int64_t pct(const int64_t *v, size_t n, double q)
{
    size_t i;
    if (n == 0)
        return 0;
    i = (size_t)(q * (double)n);
    if (i >= n)
        i = n - 1;
    return v[i];
}

/* See bench.h. */
int reap_workers(pid_t *pids, int procs, int64_t deadline)
{
    int i, alive, hung = 0;

    do {
        alive = 0;
        for (i = 0; i < procs; i++) {
            if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) == 0)
                alive++;
            else
                pids[i] = 0;
        }
        if (alive && now_ns() > deadline) {
            for (i = 0; i < procs; i++)
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    hung++;
                }
            alive = 0;
        }
        if (alive)
            usleep(2000);
    } while (alive);
    return hung;
}
