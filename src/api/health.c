/*
 * health.c - "is this lock safe here?": the deployment as the servers
 * describe it (dlock_client_topology) and the warnings that follow from
 * it for dlock_client_check (inspect.c calls dlock__health_warnings).
 *
 * For each node: INFO replication and persistence and a few CONFIG GETs
 * (min-replicas-to-write, appendfsync, maxmemory-policy) on one pooled
 * connection; an answer refused by an ACL is reported as unknown. Then
 * what the client itself has seen (an identity change, the lock-delay)
 * and, with Sentinel, what each sentinel says.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/cluster.h"
#include "io/conn.h"
#include "hold/core.h"
#include "api/health.h"
#include "topo/sentinel.h"

/* What one node said. */
typedef struct nodeinfo {
    int answered;
    char err[DLOCK__ERRLEN];
    char role[16];
    int replicas;       /* connected_slaves, -1 unknown */
    char lags[256];     /* "HOST:PORT lag N s, ..." */
    char minrep[16];    /* min-replicas-to-write, "" unknown */
    char aof[8];        /* aof_enabled 0/1 */
    char fsync[16];     /* appendfsync */
    char rdb_saves[16]; /* rdb_changes_since_last_save */
    char policy[32];    /* maxmemory-policy */
} nodeinfo;

/* Copy the value of "field:" from INFO text r into buf ("" if none). */
static void field(const redisReply *r, const char *name, char *buf, size_t len)
{
    const char *p, *e;
    size_t nl = strlen(name);
    buf[0] = '\0';
    if (r == NULL || r->type != REDIS_REPLY_STRING)
        return;
    for (p = r->str; p != NULL && *p != '\0'; p = e != NULL ? e + 1 : NULL) {
        e = strchr(p, '\n');
        if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
            size_t vl = (size_t)((e != NULL ? e : p + strlen(p)) - p) - nl - 1;
            if (vl > 0 && p[nl + vl] == '\r')
                vl--;
            snprintf(buf, len, "%.*s", (int)vl, p + nl + 1);
            return;
        }
    }
}

/* The value of a CONFIG GET reply, or "". */
static const char *cfg(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return "";
    return r->element[1]->str;
}

/* "slaveN:ip=H,port=P,state=S,offset=O,lag=L" lines into ni->lags. */
static void replica_lags(const redisReply *r, nodeinfo *ni)
{
    char name[16], v[200];
    int k;
    size_t off = 0;
    for (k = 0; k < 16; k++) {
        char ip[64] = "", port[16] = "", lag[16] = "";
        const char *p;
        snprintf(name, sizeof name, "slave%d", k);
        field(r, name, v, sizeof v);
        if (v[0] == '\0')
            break;
        if ((p = strstr(v, "ip=")) != NULL)
            sscanf(p + 3, "%63[^,]", ip);
        if ((p = strstr(v, "port=")) != NULL)
            sscanf(p + 5, "%15[^,]", port);
        if ((p = strstr(v, "lag=")) != NULL)
            sscanf(p + 4, "%15[^,]", lag);
        if (off < sizeof ni->lags)
            off += (size_t)snprintf(ni->lags + off, sizeof ni->lags - off,
                                    "%s%s:%s lag %s s", off ? ", " : "", ip,
                                    port, lag);
    }
}

/* Ask node i; fills *ni (ni->answered 0 with ni->err on failure). */
static void ask_node(dlock_client *c, dlock__node *nd, nodeinfo *ni)
{
    const char *cmds[6][3] = {{"INFO", "replication", NULL},
                              {"INFO", "persistence", NULL},
                              {"CONFIG", "GET", "min-replicas-to-write"},
                              {"CONFIG", "GET", "appendfsync"},
                              {"CONFIG", "GET", "maxmemory-policy"},
                              {"INFO", "server", NULL}};
    redisReply *r[6] = {NULL};
    dlock__conn *conn = NULL;
    int64_t dl = dlock__now_ms() + c->opts.command_timeout_ms;
    int k, rc, attempt;
    char n[16];

    memset(ni, 0, sizeof *ni);
    ni->replicas = -1;
    for (attempt = 0, rc = DLOCK_EIO; attempt < 2 && rc != DLOCK_OK;
         attempt++) {
        rc = dlock__node_take(&c->ns, nd, &conn, dl, ni->err, sizeof ni->err);
        for (k = 0; rc == DLOCK_OK && k < 6; k++)
            rc = dlock__conn_append_argv(conn, cmds[k][2] ? 3 : 2, cmds[k],
                                         NULL);
        if (rc == DLOCK_OK)
            rc = dlock__conn_roundtrip(conn, 6, r, dl, -1, ni->err,
                                       sizeof ni->err);
        if (conn != NULL)
            dlock__node_give(&c->ns, nd, conn, rc == DLOCK_OK);
        conn = NULL;
    }
    if (rc != DLOCK_OK)
        return;
    ni->answered = 1;
    field(r[0], "role", ni->role, sizeof ni->role);
    field(r[0], "connected_slaves", n, sizeof n);
    if (n[0] != '\0')
        ni->replicas = atoi(n);
    replica_lags(r[0], ni);
    field(r[1], "aof_enabled", ni->aof, sizeof ni->aof);
    field(r[1], "rdb_changes_since_last_save", ni->rdb_saves,
          sizeof ni->rdb_saves);
    snprintf(ni->minrep, sizeof ni->minrep, "%s", cfg(r[2]));
    snprintf(ni->fsync, sizeof ni->fsync, "%s", cfg(r[3]));
    snprintf(ni->policy, sizeof ni->policy, "%s", cfg(r[4]));
    for (k = 0; k < 6; k++)
        if (r[k] != NULL)
            freeReplyObject(r[k]);
}

/* A sink for lines: buf/len (NUL-terminated, as many whole lines as
 * fit), and how many were added / were warnings. */
typedef struct sink {
    char *buf;
    size_t len;
    int lines, warns;
    int warnings_only; /* dlock_client_check: only warnings */
} sink;

/* What a line is: a fact (the topology report), a warning (the check),
 * or both. */
enum { FACT, WARN, BOTH };

static void add(void *ctx, int warn, const char *line)
{
    sink *s = ctx;
    size_t used = strlen(s->buf), l = strlen(line);
    if (s->warnings_only ? warn == FACT : warn == WARN)
        return;
    s->lines++;
    s->warns += warn != 0;
    if (used + l + 2 > s->len)
        return;
    memcpy(s->buf + used, line, l);
    s->buf[used + l] = '\n';
    s->buf[used + l + 1] = '\0';
}

/* What the client has seen of node nd: identity changes, lock-delay. */
static void seen_lines(dlock__node *nd, sink *s)
{
    char line[512];
    int64_t now = dlock__now_ms(), changed, until;
    int changes;
    pthread_mutex_lock(&nd->mu);
    changed = nd->changed_at_ms;
    changes = nd->changes;
    pthread_mutex_unlock(&nd->mu);
    until = atomic_load(&nd->delay_until_ms);
    if (changes == 0)
        return;
    snprintf(line, sizeof line,
             "%s: failover or restart seen %" PRId64
             " s ago (run_id or replication id changed, %d time(s))%s",
             dlock__node_name(nd), (now - changed) / 1000, changes,
             until > now ? "; new grants refused during the lock-delay" : "");
    /* Recent (within the lock-delay, or a minute): a warning too. */
    add(s, until > now || now - changed < 60000 ? BOTH : FACT, line);
}

/* Describe node nd into s; warnings for what weakens the lock. */
static void node_lines(dlock_client *c, dlock__node *nd, sink *s)
{
    const char *host = dlock__node_name(nd);
    char line[768];
    nodeinfo ni;
    ask_node(c, nd, &ni);
    if (!ni.answered) {
        snprintf(line, sizeof line, "%s: topology not known: %s", host, ni.err);
        add(s, BOTH, line);
        seen_lines(nd, s);
        return;
    }
    snprintf(line, sizeof line,
             "%s: role %s; replicas %s%d%s%s%s; min-replicas-to-write %s; "
             "persistence %s%s%s; maxmemory-policy %s",
             host, ni.role[0] ? ni.role : "unknown (INFO refused)",
             ni.replicas < 0 ? "unknown" : "",
             ni.replicas < 0 ? 0 : ni.replicas, ni.lags[0] ? " (" : "", ni.lags,
             ni.lags[0] ? ")" : "", ni.minrep[0] ? ni.minrep : "unknown",
             strcmp(ni.aof, "1") == 0 ? "AOF appendfsync " : "RDB only",
             strcmp(ni.aof, "1") == 0 ? (ni.fsync[0] ? ni.fsync : "unknown")
                                      : "",
             ni.aof[0] == '\0' ? " (unknown)" : "",
             ni.policy[0] ? ni.policy : "unknown");
    add(s, FACT, line);
    if (ni.replicas > 0 && c->ns.wait_replicas == 0) {
        snprintf(line, sizeof line,
                 "%s: %d replica(s) and no wait_replicas: a failover can "
                 "promote a replica that never received a grant, and the "
                 "lock is then granted twice (the lock-delay protects only "
                 "clients that saw the old master)",
                 host, ni.replicas);
        add(s, WARN, line);
    }
    if (c->ns.wait_replicas > 0 && ni.replicas >= 0 &&
        ni.replicas < c->ns.wait_replicas) {
        snprintf(line, sizeof line,
                 "%s: wait_replicas is %d but %d replica(s) are connected: "
                 "every grant fails with NOT_REPLICATED",
                 host, c->ns.wait_replicas, ni.replicas);
        add(s, WARN, line);
    }
    seen_lines(nd, s);
}

/* The client's own durability settings. */
static void client_line(dlock_client *c, sink *s)
{
    char line[256], delay[48] = "off";
    if (c->ns.lock_delay_ms > 0)
        snprintf(delay, sizeof delay, "%" PRId64 " ms", c->ns.lock_delay_ms);
    snprintf(line, sizeof line, "client: %s; wait_replicas %d%s; lock-delay %s",
             c->ns.kind == DLOCK__TOPO_SENTINEL  ? "Sentinel"
             : c->ns.kind == DLOCK__TOPO_REDLOCK ? "Redlock"
             : c->ns.kind == DLOCK__TOPO_CLUSTER ? "Redis Cluster"
                                                 : "single server",
             c->ns.wait_replicas, c->ns.wait_replicas > 0 ? "" : " (no WAIT)",
             delay);
    add(s, FACT, line);
}

/* Every line into s. */
static void describe(dlock_client *c, sink *s)
{
    int i;
    if (!s->warnings_only)
        client_line(c, s);
    if (c->ns.kind == DLOCK__TOPO_SENTINEL)
        dlock__sentinel_report(
            &c->ns, dlock__now_ms() + c->opts.command_timeout_ms, add, s);
    /* A cluster's masters fail over by themselves (replication is
     * asynchronous): without WAIT or a lock-delay a grant can be lost
     * with its master and granted again by the promoted replica. */
    if (c->ns.kind == DLOCK__TOPO_CLUSTER && c->ns.wait_replicas == 0 &&
        c->ns.lock_delay_ms <= 0)
        add(s, WARN,
            "Redis Cluster without wait_replicas or a lock-delay: a "
            "master's failover can lose a granted lock and grant it again "
            "(set wait_replicas / --wait-replicas N, or lock_delay_ms / "
            "--lock-delay)");
    if (c->ns.cluster == NULL) {
        for (i = 0; i < c->ns.n; i++)
            node_lines(c, &c->ns.node[i], s);
        return;
    }
    /* A cluster's node set is one virtual node: its masters are those of
     * the slot map, read now. */
    {
        dlock__node *m[DLOCK_MAX_SERVERS];
        char err[DLOCK__ERRLEN] = "", line[DLOCK__ERRLEN + 64];
        int n;
        if (dlock__cluster_refresh(&c->ns,
                                   dlock__now_ms() + c->opts.command_timeout_ms,
                                   err, sizeof err) != DLOCK_OK) {
            snprintf(line, sizeof line, "cluster: slot map not read: %s", err);
            add(s, BOTH, line);
        }
        n = dlock__cluster_masters(&c->ns, m, DLOCK_MAX_SERVERS);
        for (i = 0; i < n; i++)
            node_lines(c, m[i], s);
    }
}

/* See dlock.h. */
int dlock_client_topology(dlock_client *c, char *buf, size_t len)
{
    sink s = {buf, len, 0, 0, 0};
    if (c == NULL)
        return DLOCK_EINVAL;
    if (buf == NULL || len == 0)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "topology: no buffer for the report");
    buf[0] = '\0';
    describe(c, &s);
    return s.lines;
}

/* See health.h. */
int dlock__health_warnings(dlock_client *c, char *buf, size_t len)
{
    sink s = {buf, len, 0, 0, 1};
    describe(c, &s);
    return s.warns;
}
