/*
 * cluster.c - the Redis Cluster topology: the table of the cluster's
 * nodes, the slot map and its refresh, and what MOVED, ASK, TRYAGAIN and
 * CLUSTERDOWN mean for them (see cluster.h for the place of this file
 * between the node set and the engine; the seed URL is cluster_url.c's).
 *
 * State and its rules:
 *  - node[]: the cluster's nodes, each with its own connection pool. The
 *    table only grows (seeds first, then every master a map or a
 *    redirection names), so a node's address stays valid for the life of
 *    the client and an index into the table is a stable name for it. A
 *    node is set up completely under mu before n is raised past it.
 *  - owner[]: slot -> index of the master serving it (NO_OWNER: none
 *    known). Single bytes read and written atomically without a lock: a
 *    reader sees either the old or the new owner, and either is safe to
 *    try (a wrong one answers MOVED).
 *  - loaded / stale: the map was loaded once / something said it may be
 *    out of date (a node failed, CLUSTERDOWN, an unknown slot). A refresh
 *    (cluster_refresh.c, as steps) runs one at a time (busy, a flag); a
 *    caller with a usable map does not wait for another's refresh, and
 *    refreshes come at most every REFRESH_GAP_MS.
 *
 * The map comes from CLUSTER SHARDS (Redis 7), or CLUSTER SLOTS when the
 * server does not know SHARDS. A MOVED updates one slot at once; no full
 * refresh is needed for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/cluster_impl.h"

/* ---- the node table ----------------------------------------------------- */

/* Make ep for host:port with tmpl's kind, user and password. */
static int ep_make(dlock__endpoint *ep, const dlock__endpoint *tmpl,
                   const char *host, int port)
{
    size_t dlen = strlen(host) + 16;
    memset(ep, 0, sizeof *ep);
    ep->kind = tmpl->kind;
    ep->port = port;
    ep->host = strdup(host);
    ep->display = malloc(dlen);
    ep->user = tmpl->user != NULL ? strdup(tmpl->user) : NULL;
    ep->password = tmpl->password != NULL ? strdup(tmpl->password) : NULL;
    if (ep->host == NULL || ep->display == NULL ||
        (tmpl->user != NULL && ep->user == NULL) ||
        (tmpl->password != NULL && ep->password == NULL)) {
        dlock__endpoint_clear(ep);
        return DLOCK_ENOMEM;
    }
    snprintf(ep->display, dlen, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
             port);
    return DLOCK_OK;
}

/* The index of the node host:port, added to the table when new; -1 when
 * the table is full or out of memory. */
static int node_find_add(dlock__nodeset *ns, const char *host, int port)
{
    struct dlock__cluster *cl = ns->cluster;
    dlock__endpoint ep;
    int i, n;

    pthread_mutex_lock(&cl->mu);
    n = atomic_load(&cl->n);
    for (i = 0; i < n; i++)
        if (cl->node[i].ep.port == port &&
            strcmp(cl->node[i].ep.host, host) == 0) {
            pthread_mutex_unlock(&cl->mu);
            return i;
        }
    if (n >= DLOCK_MAX_SERVERS ||
        ep_make(&ep, &cl->tmpl, host, port) != DLOCK_OK) {
        pthread_mutex_unlock(&cl->mu);
        return -1;
    }
    if (dlock__node_init_ep(&cl->node[n], &ep, ns->pool_size) != DLOCK_OK) {
        dlock__node_clear(&cl->node[n]);
        pthread_mutex_unlock(&cl->mu);
        return -1;
    }
    atomic_store(&cl->n, n + 1);
    pthread_mutex_unlock(&cl->mu);
    return n;
}

/* See cluster.h. */
int dlock__cluster_fill(dlock__nodeset *ns, const dlock_options *o, char *err,
                        size_t errlen)
{
    dlock__endpoint eps[DLOCK_MAX_SERVERS];
    struct dlock__cluster *cl;
    int k, i, rc = DLOCK_OK;

    k = dlock__cluster_parse_url(o->servers[0], eps, DLOCK_MAX_SERVERS, err,
                                 errlen);
    if (k < 0)
        return k;
    for (i = 0; i < k && rc == DLOCK_OK; i++) {
        if (o->username != NULL) {
            free(eps[i].user);
            if ((eps[i].user = strdup(o->username)) == NULL)
                rc = DLOCK_ENOMEM;
        }
        if (o->password != NULL) {
            free(eps[i].password);
            if ((eps[i].password = strdup(o->password)) == NULL)
                rc = DLOCK_ENOMEM;
        }
    }
    ns->kind = DLOCK__TOPO_CLUSTER;
    ns->n = 1;
    ns->quorum = 1;
    cl = calloc(1, sizeof *cl);
    ns->node = calloc(1, sizeof *ns->node);
    if (rc != DLOCK_OK || cl == NULL || ns->node == NULL) {
        for (i = 0; i < k; i++)
            dlock__endpoint_clear(&eps[i]);
        free(cl);
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&cl->mu, NULL);
    for (i = 0; i < DLOCK__CLUSTER_SLOTS; i++)
        atomic_init(&cl->owner[i], NO_OWNER);
    ns->cluster = cl;
    /* The virtual node: the first seed's address, for messages and for
     * the TLS decision; commands never use its pool. */
    rc = ep_make(&cl->tmpl, &eps[0], eps[0].host, eps[0].port);
    if (rc == DLOCK_OK)
        rc = ep_make(&ns->node[0].ep, &eps[0], eps[0].host, eps[0].port);
    if (rc == DLOCK_OK)
        rc = dlock__node_init_ep(&ns->node[0], &ns->node[0].ep, 1);
    for (i = 0; i < k; i++) {
        if (rc == DLOCK_OK)
            rc = dlock__node_init_ep(&cl->node[i], &eps[i], ns->pool_size);
        if (rc == DLOCK_OK)
            atomic_store(&cl->n, i + 1);
        dlock__endpoint_clear(&eps[i]);
    }
    if (rc != DLOCK_OK)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}

/* See cluster.h. */
void dlock__cluster_free(dlock__nodeset *ns)
{
    struct dlock__cluster *cl = ns->cluster;
    int i, n;
    if (cl == NULL)
        return;
    n = atomic_load(&cl->n);
    for (i = 0; i < n; i++)
        dlock__node_clear(&cl->node[i]);
    dlock__endpoint_clear(&cl->tmpl);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
    ns->cluster = NULL;
}

/* ---- reading a map ------------------------------------------------------ */

/* The value after key name in a flattened map (RESP2 array of key,
 * value, ...), or NULL. */
static const redisReply *field(const redisReply *kv, const char *name)
{
    size_t i;
    if (kv == NULL || kv->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(kv->element[i]->str, name) == 0)
            return kv->element[i + 1];
    return NULL;
}

/* A string field's text, or NULL (also for "" and "?": unknown). */
static const char *field_str(const redisReply *kv, const char *name)
{
    const redisReply *v = field(kv, name);
    if (v == NULL || v->type != REDIS_REPLY_STRING || v->len == 0 ||
        strcmp(v->str, "?") == 0)
        return NULL;
    return v->str;
}

/* An integer field (or a number in a string), or -1. */
static long long field_int(const redisReply *kv, const char *name)
{
    const redisReply *v = field(kv, name);
    if (v == NULL)
        return -1;
    if (v->type == REDIS_REPLY_INTEGER)
        return v->integer;
    if (v->type == REDIS_REPLY_STRING)
        return strtoll(v->str, NULL, 10);
    return -1;
}

/* Give slots lo..hi to node idx in map; 0, or -1 for a bad range. */
static int map_range(unsigned char *map, long long lo, long long hi, int idx)
{
    long long s;
    if (lo < 0 || hi < lo || hi >= DLOCK__CLUSTER_SLOTS)
        return -1;
    for (s = lo; s <= hi; s++)
        map[s] = (unsigned char)idx;
    return 0;
}

/* The master of one shard of CLUSTER SHARDS: its index in the table (an
 * online master preferred), or -1. from: the node asked (its host when
 * the shard gives none). */
static int shard_master(dlock__nodeset *ns, const redisReply *nodes,
                        const dlock__node *from)
{
    int best = -1, pass;
    size_t i;
    for (pass = 0; pass < 2 && best < 0; pass++) {
        for (i = 0; i < nodes->elements && best < 0; i++) {
            const redisReply *nd = nodes->element[i];
            const char *role = field_str(nd, "role");
            const char *health = field_str(nd, "health");
            const char *host = field_str(nd, "endpoint");
            long long port = -1;
            if (role == NULL || strcmp(role, "master") != 0)
                continue;
            if (pass == 0 && (health == NULL || strcmp(health, "online") != 0))
                continue;
            if (host == NULL)
                host = field_str(nd, "ip");
            if (host == NULL)
                host = from->ep.host;
            if (from->ep.kind == DLOCK__EP_TLS)
                port = field_int(nd, "tls-port");
            if (port <= 0)
                port = field_int(nd, "port");
            if (port <= 0 || port > 65535)
                continue;
            best = node_find_add(ns, host, (int)port);
        }
    }
    return best;
}

/* See cluster_impl.h. */
int dlock__cluster_read_shards(dlock__nodeset *ns, const redisReply *r,
                               const dlock__node *from, unsigned char *map)
{
    size_t i, k;
    if (r->type != REDIS_REPLY_ARRAY)
        return DLOCK_EPROTO;
    for (i = 0; i < r->elements; i++) {
        const redisReply *slots = field(r->element[i], "slots");
        const redisReply *nodes = field(r->element[i], "nodes");
        int idx;
        if (slots == NULL || nodes == NULL ||
            slots->type != REDIS_REPLY_ARRAY ||
            nodes->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0)
            return DLOCK_EPROTO;
        if (slots->elements == 0)
            continue; /* a shard without slots (a new, empty master) */
        idx = shard_master(ns, nodes, from);
        if (idx < 0)
            continue; /* no master known: those slots stay unserved */
        for (k = 0; k < slots->elements; k += 2) {
            const redisReply *a = slots->element[k], *b = slots->element[k + 1];
            if (a->type != REDIS_REPLY_INTEGER ||
                b->type != REDIS_REPLY_INTEGER ||
                map_range(map, a->integer, b->integer, idx) != 0)
                return DLOCK_EPROTO;
        }
    }
    return DLOCK_OK;
}

/* See cluster_impl.h. */
int dlock__cluster_read_slots(dlock__nodeset *ns, const redisReply *r,
                              const dlock__node *from, unsigned char *map)
{
    size_t i;
    if (r->type != REDIS_REPLY_ARRAY)
        return DLOCK_EPROTO;
    for (i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *m;
        const char *host;
        int idx;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            return DLOCK_EPROTO;
        m = e->element[2];
        host = m->element[0]->str;
        if (host[0] == '\0' || strcmp(host, "?") == 0)
            host = from->ep.host;
        if (m->element[1]->integer <= 0 || m->element[1]->integer > 65535)
            return DLOCK_EPROTO;
        idx = node_find_add(ns, host, (int)m->element[1]->integer);
        if (idx < 0)
            continue;
        if (map_range(map, e->element[0]->integer, e->element[1]->integer,
                      idx) != 0)
            return DLOCK_EPROTO;
    }
    return DLOCK_OK;
}

/* See cluster.h. */
int dlock__cluster_loaded(const dlock__nodeset *ns)
{
    return atomic_load(&ns->cluster->loaded);
}

/* See cluster.h. */
int dlock__cluster_wants_refresh(const dlock__nodeset *ns)
{
    return !atomic_load(&ns->cluster->loaded) ||
           atomic_load(&ns->cluster->stale);
}

/* See cluster.h. */
void dlock__cluster_stale(dlock__nodeset *ns)
{
    if (ns->cluster != NULL)
        atomic_store(&ns->cluster->stale, 1);
}

/* See cluster.h. */
int dlock__cluster_route_now(dlock__nodeset *ns, uint16_t slot,
                             dlock__node **out, char *err, size_t errlen)
{
    struct dlock__cluster *cl = ns->cluster;
    int o = atomic_load(&cl->owner[slot]);
    if (o == NO_OWNER) {
        atomic_store(&cl->stale, 1);
        return dlock__fail(err, errlen, DLOCK_ESERVER,
                           "cluster: no master serves slot %u (the cluster "
                           "is down or the slot is unassigned)",
                           (unsigned)slot);
    }
    *out = &cl->node[o];
    return DLOCK_OK;
}

/* See cluster.h. */
dlock__redirect dlock__cluster_redirect(dlock__nodeset *ns,
                                        const dlock__node *from,
                                        const char *msg, dlock__node **to,
                                        int *slot_out)
{
    struct dlock__cluster *cl = ns->cluster;
    dlock__redirect kind;
    const char *p, *colon;
    char host[256];
    long slot, port;
    char *end;
    int idx;

    *slot_out = -1;
    if (strncmp(msg, "MOVED ", 6) == 0) {
        kind = DLOCK__REDIR_MOVED;
        p = msg + 6;
    } else if (strncmp(msg, "ASK ", 4) == 0) {
        kind = DLOCK__REDIR_ASK;
        p = msg + 4;
    } else if (strncmp(msg, "TRYAGAIN", 8) == 0) {
        return DLOCK__REDIR_RETRY;
    } else if (strncmp(msg, "CLUSTERDOWN", 11) == 0) {
        atomic_store(&cl->stale, 1);
        return DLOCK__REDIR_RETRY;
    } else {
        return DLOCK__REDIR_NONE;
    }
    slot = strtol(p, &end, 10);
    if (end == p || *end != ' ' || slot < 0 || slot >= DLOCK__CLUSTER_SLOTS)
        return DLOCK__REDIR_NONE;
    *slot_out = (int)slot;
    p = end + 1;
    colon = strrchr(p, ':');
    if (colon == NULL || (size_t)(colon - p) >= sizeof host)
        return DLOCK__REDIR_NONE;
    port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || port < 1 || port > 65535)
        return DLOCK__REDIR_NONE;
    if (colon == p)
        snprintf(host, sizeof host, "%s", from->ep.host);
    else
        snprintf(host, sizeof host, "%.*s", (int)(colon - p), p);
    idx = node_find_add(ns, host, (int)port);
    if (idx < 0)
        return DLOCK__REDIR_NONE;
    if (kind == DLOCK__REDIR_MOVED)
        atomic_store(&cl->owner[slot], (unsigned char)idx);
    *to = &cl->node[idx];
    return kind;
}

/* See cluster.h. */
int dlock__cluster_lookup(const dlock__nodeset *ns, uint16_t slot)
{
    int o;
    if (!atomic_load(&ns->cluster->loaded))
        return -1;
    o = atomic_load(&ns->cluster->owner[slot]);
    return o == NO_OWNER ? -1 : o;
}

/* See cluster.h. */
int dlock__cluster_nnodes(const dlock__nodeset *ns)
{
    return atomic_load(&ns->cluster->n);
}

/* See cluster.h. */
dlock__node *dlock__cluster_node(dlock__nodeset *ns, int i)
{
    return &ns->cluster->node[i];
}

/* See cluster.h. */
int dlock__cluster_masters(dlock__nodeset *ns, dlock__node **out, int max)
{
    uint64_t seen = 0;
    int i, n = 0;
    for (i = 0; i < DLOCK__CLUSTER_SLOTS; i++) {
        int o = dlock__cluster_lookup(ns, (uint16_t)i);
        if (o < 0 || (seen & (1ULL << o)))
            continue;
        seen |= 1ULL << o;
        if (n < max)
            out[n++] = &ns->cluster->node[o];
    }
    return n;
}

/* See cluster.h. */
int dlock__links_max(const dlock__nodeset *ns)
{
    return ns->cluster != NULL ? DLOCK_MAX_SERVERS : ns->n;
}

/* See cluster.h. */
int dlock__links_count(const dlock__nodeset *ns)
{
    return ns->cluster != NULL ? atomic_load(&ns->cluster->n) : ns->n;
}

/* See cluster.h. */
const dlock__endpoint *dlock__link_ep(dlock__nodeset *ns, int i)
{
    if (ns->cluster == NULL)
        return &ns->node[i].ep;
    return i < atomic_load(&ns->cluster->n) ? &ns->cluster->node[i].ep : NULL;
}
