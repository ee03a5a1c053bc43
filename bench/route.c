/*
 * route.c - raw hiredis connections for dlock_bench's own commands (the
 * W2 counter, the many-keys counters, the Redis-side statistics) when the
 * servers under test are not one plain redis:// server: a Redis Cluster
 * (redis+cluster://seed,...), whose keys live on the master serving their
 * hash slot, or a Sentinel deployment, named by the -r URL of its master.
 *
 * A route is a set of connections, one per master, and a table slot ->
 * connection read once from CLUSTER SLOTS (the benchmark makes no
 * failover, so the table does not change during a run). For a redis://
 * URL it is one connection that serves every slot. The slot of a key is
 * CRC16 (XMODEM) of its hash tag or whole name, modulo 16384, as the
 * Cluster specification defines it.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), bit by bit. */
static unsigned crc16(const char *p, size_t n)
{
    unsigned crc = 0;
    size_t i;
    int b;

    for (i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)p[i] << 8;
        for (b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

/* The hash slot of key: its first non-empty {tag} when it has one. */
unsigned route_slot(const char *key)
{
    size_t n = strlen(key);
    const char *open = strchr(key, '{'), *close;

    if (open != NULL) {
        close = strchr(open + 1, '}');
        if (close != NULL && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return crc16(key, n) & 16383;
}

/* Connect to host:port; exit when it fails. */
static redisContext *connect_hp(const char *host, int port)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);

    if (c == NULL || c->err)
        die("connect %s:%d: %s", host, port, c ? c->errstr : "no memory");
    redisSetTimeout(c, tv);
    return c;
}

/* Split "host:port" (the part of a URL after its scheme, up to a ',' or
 * '/') into host and port; exit when malformed. */
static void split_hp(const char *s, char *host, size_t hsz, int *port)
{
    size_t len = strcspn(s, ",/"), i;
    const char *colon = NULL;

    for (i = 0; i < len; i++)
        if (s[i] == ':')
            colon = s + i;
    if (colon == NULL || (size_t)(colon - s) >= hsz)
        die("bad host:port in %s", s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    *port = atoi(colon + 1);
}

/* Index of the master host:port in r, connecting it when new. */
static size_t route_master(struct route *r, const char *host, int port)
{
    size_t i;

    for (i = 0; i < r->n; i++)
        if (r->port[i] == port && strcmp(r->host[i], host) == 0)
            return i;
    if (r->n == ROUTE_MAX)
        die("more than %d masters", ROUTE_MAX);
    snprintf(r->host[r->n], sizeof(r->host[r->n]), "%s", host);
    r->port[r->n] = port;
    r->c[r->n] = connect_hp(host, port);
    return r->n++;
}

/* Fill the slot table from CLUSTER SLOTS asked of seed, at seed_host.
 * A master whose address is "" (one that never met another node does not
 * know its own IP) is the seed's host, as the specification says. */
static void route_slots(struct route *r, redisContext *seed,
                        const char *seed_host)
{
    redisReply *rep = cmd(seed, 1, "CLUSTER SLOTS");
    size_t i, covered = 0;

    for (i = 0; i < rep->elements; i++) {
        redisReply *e = rep->element[i], *m;
        long long lo, hi, s;
        size_t k;

        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
            die("%s", "unexpected CLUSTER SLOTS answer");
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 || lo < 0 ||
            hi > 16383 || lo > hi)
            die("%s", "unexpected CLUSTER SLOTS entry");
        k = route_master(r, m->element[0]->len ? m->element[0]->str : seed_host,
                         (int)m->element[1]->integer);
        for (s = lo; s <= hi; s++)
            r->slot[s] = (unsigned char)k;
        covered += (size_t)(hi - lo + 1);
    }
    freeReplyObject(rep);
    if (covered != 16384)
        die("the cluster serves %zu of 16384 slots", covered);
}

/* Open a route for url: redis://host:port (one connection for every
 * slot) or redis+cluster://host:port[,...] (every master, from the first
 * seed's CLUSTER SLOTS). Exits when the servers cannot be reached. */
void route_open(struct route *r, const char *url)
{
    char host[256];
    int port;

    memset(r, 0, sizeof(*r));
    if (strncmp(url, "redis+cluster://", 16) == 0) {
        redisContext *seed;
        split_hp(url + 16, host, sizeof(host), &port);
        seed = connect_hp(host, port);
        route_slots(r, seed, host);
        redisFree(seed);
        return;
    }
    if (strncmp(url, "redis://", 8) != 0)
        die("a raw connection needs redis:// or redis+cluster://, not %s", url);
    split_hp(url + 8, host, sizeof(host), &port);
    route_master(r, host, port); /* index 0; slot[] is all 0 */
}

/* The connection to the master serving key. */
redisContext *route_for(struct route *r, const char *key)
{
    return r->c[r->slot[route_slot(key)]];
}

/* Index of the master serving key (0 .. r->n - 1). */
size_t route_index(const struct route *r, const char *key)
{
    return r->slot[route_slot(key)];
}

/* Close every connection of r. */
void route_close(struct route *r)
{
    size_t i;

    for (i = 0; i < r->n; i++)
        redisFree(r->c[i]);
    r->n = 0;
}

/* The URL of the servers dlock_bench's own commands go to: -r when given
 * (a Sentinel's master), else the first -s. */
const char *raw_url(const struct conf *cf)
{
    return cf->raw_url ? cf->raw_url : cf->servers[0];
}

/* A fresh connection to the master that serves key (see raw_url()). */
redisContext *raw_connect_key(const struct conf *cf, const char *key)
{
    struct route r;
    redisContext *c;
    size_t k;

    route_open(&r, raw_url(cf));
    k = route_index(&r, key);
    c = connect_hp(r.host[k], r.port[k]);
    route_close(&r);
    return c;
}

/* Add one server's INFO cpu (used_cpu_sys + used_cpu_user, in µs) and
 * INFO commandstats calls (INFO itself excluded) to st. */
static void add_info(redisContext *c, struct rstats *st)
{
    redisReply *r;
    const char *p;

    r = cmd(c, 1, "INFO cpu");
    if ((p = strstr(r->str, "used_cpu_sys:")) != NULL)
        st->cpu_us += strtod(p + 13, NULL) * 1e6;
    if ((p = strstr(r->str, "used_cpu_user:")) != NULL)
        st->cpu_us += strtod(p + 14, NULL) * 1e6;
    freeReplyObject(r);
    r = cmd(c, 1, "INFO commandstats");
    for (p = r->str; (p = strstr(p, "cmdstat_")) != NULL; p++) {
        const char *q = strstr(p, ":calls=");
        if (q == NULL)
            break;
        if (strncmp(p, "cmdstat_info:", 13) != 0)
            st->calls += strtod(q + 7, NULL);
    }
    freeReplyObject(r);
}

/* Redis-side totals over every server: CPU (used_cpu_sys + used_cpu_user,
 * in µs) and commands executed (INFO commandstats calls, commands run by
 * scripts included, INFO itself excluded). Servers that are not plain
 * redis:// (TLS, unix) are skipped. A cluster counts every master (not
 * the replicas); a Sentinel deployment the -r master. */
struct rstats redis_stats(const struct conf *cf)
{
    struct rstats st = {0, 0};
    size_t i;

    if (cf->raw_url != NULL ||
        strncmp(cf->servers[0], "redis+cluster://", 16) == 0) {
        struct route r;
        route_open(&r, raw_url(cf));
        for (i = 0; i < r.n; i++)
            add_info(r.c[i], &st);
        route_close(&r);
        return st;
    }
    for (i = 0; i < cf->nservers; i++) {
        redisContext *c;

        if (strncmp(cf->servers[i], "redis://", 8) != 0)
            continue;
        c = raw_connect_url(cf->servers[i]);
        add_info(c, &st);
        redisFree(c);
    }
    return st;
}
