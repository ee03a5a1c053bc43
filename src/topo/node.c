/*
 * node.c - a node set's servers and their connection pools: set up a node
 * from its URL, take a connection (pooled, or opened on demand; a node
 * whose connect just timed out is skipped for a moment with Redlock), give
 * it back, free the set. Who the nodes are is topology.c's business (and
 * sentinel_locate.c's, which moves a node's address through
 * dlock__node_adopt_conn);
 * what runs on them, the engine's
 * (src/engine/).
 *
 * Every new connection asks its server INFO server replication: a replica
 * or a sentinel is refused (a lock must never be taken on a replica,
 * which would not even be refused when replica-read-only is off), and
 * the server's run_id and master_replid are remembered. When they change
 * (a failover promoted a replica, or the server restarted, perhaps
 * without its data) and the client's grants were not covered by WAIT, the
 * node's lock-delay starts: new grants on it are refused until every
 * lease the old server may have granted has run out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/net.h"
#include "topo/node.h"

/* An address replaced by another, kept until the set is freed: a thread
 * may still be reading it. */
struct dlock__retired {
    struct dlock__retired *next;
    dlock__endpoint *ep;
};

/* See node.h. */
uint64_t dlock__nodes_all(const dlock__nodeset *ns)
{
    return ns->n >= 64 ? UINT64_MAX : (1ULL << ns->n) - 1;
}

/* See node.h. The options' user and password win over the URL's. */
int dlock__node_init(dlock__node *nd, const char *url, const char *user,
                     const char *password, int pool_size, char *err,
                     size_t errlen)
{
    int rc = dlock__url_parse(&nd->ep, url, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    if (user != NULL) {
        free(nd->ep.user);
        nd->ep.user = strdup(user);
        if (nd->ep.user == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    if (password != NULL) {
        free(nd->ep.password);
        nd->ep.password = strdup(password);
        if (nd->ep.password == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    if (dlock__node_init_ep(nd, &nd->ep, pool_size) != DLOCK_OK)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}

/* See node.h. */
int dlock__node_init_ep(dlock__node *nd, dlock__endpoint *ep, int pool_size)
{
    if (ep != &nd->ep) {
        nd->ep = *ep;
        memset(ep, 0, sizeof *ep);
    }
    nd->idle = calloc((size_t)pool_size, sizeof *nd->idle);
    if (nd->idle == NULL)
        return DLOCK_ENOMEM;
    pthread_mutex_init(&nd->mu, NULL);
    atomic_store(&nd->addr, &nd->ep);
    return DLOCK_OK;
}

/* See node.h. */
void dlock__node_clear(dlock__node *n)
{
    int j;
    for (j = 0; j < n->nidle; j++)
        dlock__conn_close(n->idle[j]);
    free(n->idle);
    if (n->idle != NULL)
        pthread_mutex_destroy(&n->mu);
    n->idle = NULL;
    n->nidle = 0;
    while (n->retired != NULL) {
        struct dlock__retired *r = n->retired;
        n->retired = r->next;
        dlock__endpoint_clear(r->ep);
        free(r->ep);
        free(r);
    }
    {
        dlock__endpoint *a = atomic_load(&n->addr);
        if (a != NULL && a != &n->ep) {
            dlock__endpoint_clear(a);
            free(a);
        }
        atomic_store(&n->addr, NULL);
    }
    dlock__endpoint_clear(&n->ep);
}

/* See node.h. */
void dlock__nodeset_free(dlock__nodeset *ns)
{
    int i, j;
    /* The topology's thread (Sentinel's watch) uses the nodes: stop it
     * first. */
    if (ns->topo_free != NULL)
        ns->topo_free(ns);
    ns->topo_free = NULL;
    if (ns->node != NULL) {
        for (i = 0; i < ns->n; i++) {
            dlock__node *n = &ns->node[i];
            /* A request given up on may still have to be resent
             * (NOSCRIPT): give it that chance, bounded. */
            for (j = 0; j < n->nidle; j++)
                if (dlock__conn_unsettled(n->idle[j]))
                    dlock__conn_settle(n->idle[j], dlock__now_ms() +
                                                       ns->connect_timeout_ms);
            /* Sentinel's node has its mutex before its pool. */
            if (ns->node[i].idle == NULL && ns->kind == DLOCK__TOPO_SENTINEL)
                pthread_mutex_destroy(&ns->node[i].mu);
            dlock__node_clear(&ns->node[i]);
        }
        free(ns->node);
        ns->node = NULL;
    }
    dlock__tls_ctx_free(ns->tls);
    ns->tls = NULL;
}

/* See node.h. */
int dlock__node_open_window(dlock__nodeset *ns, dlock__node *n,
                            int64_t deadline_ms, int64_t *dl, char *err,
                            size_t errlen)
{
    int64_t now = dlock__now_ms(), down;
    pthread_mutex_lock(&n->mu);
    down = n->down_until_ms;
    pthread_mutex_unlock(&n->mu);
    if ((ns->n > 1 || ns->cluster != NULL) && now < down)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "%s: down (connect timed out moments ago)",
                           dlock__node_name(n));
    *dl = now + ns->connect_timeout_ms;
    if (deadline_ms >= 0 && deadline_ms < *dl)
        *dl = deadline_ms;
    if (*dl <= now) /* the caller's time is up: not the node's fault */
        return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                           "%s: no time left to connect", dlock__node_name(n));
    return DLOCK_OK;
}

/* See node.h. */
void dlock__node_open_done(dlock__nodeset *ns, dlock__node *n, int rc)
{
    if (rc == DLOCK_OK)
        atomic_fetch_add(&ns->stats->reconnects, 1);
    /* Only a connect that timed out is worth skipping next time: a
     * refused one costs a round trip and must not hide a node that has
     * just come back. */
    if (rc == DLOCK_ETIMEDOUT) {
        pthread_mutex_lock(&n->mu);
        n->down_until_ms = dlock__now_ms() + 500;
        pthread_mutex_unlock(&n->mu);
    }
}

/* See node.h. Non-blocking reads and writes only, under the pool's
 * mutex. */
void dlock__nodes_settle(dlock__nodeset *ns)
{
    int i, j;
    for (i = 0; i < ns->n; i++) {
        dlock__node *n = &ns->node[i];
        pthread_mutex_lock(&n->mu);
        for (j = 0; j < n->nidle; j++)
            if (dlock__conn_unsettled(n->idle[j]))
                dlock__conn_settle(n->idle[j], 0);
        pthread_mutex_unlock(&n->mu);
    }
}

/* Return a connection to the pool if it is healthy (ok) and there is
 * room; close it otherwise. */
void dlock__node_put(dlock__nodeset *ns, int i, dlock__conn *conn, int ok)
{
    dlock__node_give(ns, &ns->node[i], conn, ok);
}

/* See node.h. */
void dlock__node_give(dlock__nodeset *ns, dlock__node *n, dlock__conn *conn,
                      int ok)
{
    if (conn == NULL)
        return;
    /* A connection to an address the node has left (a failover moved
     * the master) is not pooled. */
    if (ok && strcmp(dlock__conn_peer(conn), dlock__node_name(n)) != 0)
        ok = 0;
    if (ok) {
        pthread_mutex_lock(&n->mu);
        if (n->nidle < ns->pool_size) {
            n->idle[n->nidle++] = conn;
            conn = NULL;
        }
        pthread_mutex_unlock(&n->mu);
    }
    /* The pool is full: what can be settled without waiting is (a
     * NOSCRIPT already answered gets its resend written before the close;
     * the server reads it before it notices the close). */
    if (conn != NULL && ok && dlock__conn_unsettled(conn))
        dlock__conn_settle(conn, 0);
    dlock__conn_close(conn);
}

/* ---- addresses, identity and the lock-delay ---------------------------- */

/* See node.h. */
const dlock__endpoint *dlock__node_addr(const dlock__node *nd)
{
    return atomic_load(&((dlock__node *)nd)->addr);
}

/* See node.h. */
const char *dlock__node_name(const dlock__node *nd)
{
    const dlock__endpoint *ep = dlock__node_addr(nd);
    return ep != NULL && ep->display != NULL ? ep->display : "?";
}

/* See node.h. */
int dlock__node_refuses_locks(const dlock__nodeset *ns, dlock__node *nd,
                              char *err, size_t len)
{
    char of[80];
    if (ns->locate != NULL || ns->cluster != NULL || !atomic_load(&nd->replica))
        return 0;
    pthread_mutex_lock(&nd->mu);
    snprintf(of, sizeof of, "%s", nd->master_of);
    pthread_mutex_unlock(&nd->mu);
    snprintf(err, len,
             "%s is a replica%s%s%s, not a master: locks are taken on "
             "masters only",
             dlock__node_name(nd), of[0] ? " (of " : "", of, of[0] ? ")" : "");
    return 1;
}

/* Copy the value of "field:" from INFO text (len bytes at s) into buf;
 * "" when absent. */
static void info_field(const char *s, size_t len, const char *field, char *buf,
                       size_t buflen)
{
    size_t fl = strlen(field);
    const char *p = s, *end = s + len;
    buf[0] = '\0';
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl != NULL ? nl : end;
        if ((size_t)(le - p) > fl && memcmp(p, field, fl) == 0 &&
            p[fl] == ':') {
            size_t vl = (size_t)(le - p) - fl - 1;
            if (vl > 0 && p[fl + 1 + vl - 1] == '\r')
                vl--;
            if (vl >= buflen)
                vl = buflen - 1;
            memcpy(buf, p + fl + 1, vl);
            buf[vl] = '\0';
            return;
        }
        p = le + 1;
    }
}

/* See node.h. */
int dlock__node_identify(dlock__conn *c, dlock__srvinfo *id,
                         int64_t deadline_ms, char *err, size_t errlen)
{
    redisReply *r = NULL;
    int rc = dlock__node_identify_ask(c);
    memset(id, 0, sizeof *id);
    if (rc == DLOCK_OK)
        rc = dlock__conn_roundtrip(c, 1, &r, deadline_ms, -1, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    dlock__node_identify_read(r, id);
    freeReplyObject(r);
    return DLOCK_OK;
}

/* See node.h. */
int dlock__node_identify_ask(dlock__conn *c)
{
    const char *argv[3] = {"INFO", "server", "replication"};
    return dlock__conn_append_argv(c, 3, argv, NULL);
}

/* See node.h. */
void dlock__node_identify_read(const redisReply *r, dlock__srvinfo *id)
{
    char mode[32], role[32], host[64], port[16];
    memset(id, 0, sizeof *id);
    if (r->type != REDIS_REPLY_STRING)
        return;
    info_field(r->str, r->len, "redis_mode", mode, sizeof mode);
    info_field(r->str, r->len, "role", role, sizeof role);
    info_field(r->str, r->len, "run_id", id->run_id, sizeof id->run_id);
    info_field(r->str, r->len, "master_replid", id->replid, sizeof id->replid);
    info_field(r->str, r->len, "master_replid2", id->replid2,
               sizeof id->replid2);
    info_field(r->str, r->len, "master_host", host, sizeof host);
    info_field(r->str, r->len, "master_port", port, sizeof port);
    if (strcmp(mode, "sentinel") == 0)
        id->role = DLOCK__ROLE_SENTINEL;
    else if (strcmp(role, "master") == 0)
        id->role = DLOCK__ROLE_MASTER;
    else if (strcmp(role, "slave") == 0 || strcmp(role, "replica") == 0)
        id->role = DLOCK__ROLE_REPLICA;
    if (host[0] != '\0')
        snprintf(id->master, sizeof id->master,
                 strchr(host, ':') != NULL ? "[%s]:%s" : "%s:%s", host, port);
}

/* The lock-delay this set applies after an identity change: the option,
 * raised to the longest lease taken. 0: off. */
static int64_t delay_for(dlock__nodeset *ns)
{
    int64_t d = ns->lock_delay_ms, l = atomic_load(&ns->longest_lease_ms);
    if (d <= 0)
        return 0;
    return l > d ? l : d;
}

/* See node.h. */
void dlock__node_note(dlock__nodeset *ns, dlock__node *n,
                      const dlock__srvinfo *id, int promoted)
{
    int64_t d;
    if (id->role != DLOCK__ROLE_MASTER || id->run_id[0] == '\0')
        return;
    pthread_mutex_lock(&n->mu);
    if (n->run_id[0] != '\0' ? strcmp(n->run_id, id->run_id) != 0 ||
                                   strcmp(n->replid, id->replid) != 0
                             : promoted) {
        n->changes++;
        n->changed_at_ms = dlock__now_ms();
        d = ns->wait_replicas > 0 ? 0 : delay_for(ns);
        if (d > 0 && n->changed_at_ms + d > atomic_load(&n->delay_until_ms))
            atomic_store(&n->delay_until_ms, n->changed_at_ms + d);
    }
    memcpy(n->run_id, id->run_id, sizeof n->run_id);
    memcpy(n->replid, id->replid, sizeof n->replid);
    pthread_mutex_unlock(&n->mu);
}

/* See node.h. */
int dlock__node_checked(dlock__nodeset *ns, int i, const dlock__endpoint *ep,
                        int rc, const dlock__srvinfo *idp, dlock__conn **out,
                        char *master_of, size_t mlen, char *err, size_t errlen)
{
    dlock__srvinfo id = *idp;
    if (rc == DLOCK_ETIMEDOUT)
        dlock__fail(err, errlen, rc, "%s: no answer in time", ep->display);
    if (rc == DLOCK_OK && id.role == DLOCK__ROLE_REPLICA && master_of != NULL)
        snprintf(master_of, mlen, "%s", id.master);
    if (rc == DLOCK_OK && ns->locate == NULL) {
        /* A fixed server: a replica is remembered, not refused here, so
         * that inspecting and checking it work; lock writes are refused
         * in the engine (DLOCK_EREFUSED: no retry turns it into a master). */
        dlock__node *n = &ns->node[i];
        pthread_mutex_lock(&n->mu);
        snprintf(n->master_of, sizeof n->master_of, "%s", id.master);
        pthread_mutex_unlock(&n->mu);
        atomic_store(&n->replica, id.role == DLOCK__ROLE_REPLICA);
    }
    if (rc == DLOCK_OK && id.role == DLOCK__ROLE_REPLICA && ns->locate != NULL)
        rc = dlock__fail(err, errlen, DLOCK_ESERVER,
                         "%s is a replica%s%s%s, not a master: locks are "
                         "taken on masters only",
                         ep->display, id.master[0] ? " (of " : "", id.master,
                         id.master[0] ? ")" : "");
    else if (rc == DLOCK_OK && id.role == DLOCK__ROLE_SENTINEL)
        rc = dlock__fail(err, errlen, DLOCK_ESERVER,
                         "%s is a Redis Sentinel, not a data node: use "
                         "redis+sentinel://%s/MASTERNAME",
                         ep->display, ep->display);
    if (rc != DLOCK_OK) {
        dlock__conn_close(*out);
        *out = NULL;
        return rc;
    }
    dlock__node_note(ns, &ns->node[i], &id, 0);
    return DLOCK_OK;
}

/* Close every idle connection of n (its address changed). Caller holds
 * n->mu. */
static void flush_pool(dlock__node *n)
{
    while (n->nidle > 0)
        dlock__conn_close(n->idle[--n->nidle]);
}

/* See node.h. */
int dlock__node_adopt_same(dlock__nodeset *ns, int i, dlock__endpoint *ep)
{
    dlock__node *n = &ns->node[i];
    dlock__endpoint *cur = atomic_load(&n->addr);
    if (cur->host == NULL || strcmp(cur->display, ep->display) != 0)
        return 0;
    /* Same address: nothing to move. Drop the copy. */
    dlock__endpoint_clear(ep);
    free(ep);
    atomic_store(&n->stale, 0);
    return 1;
}

/* See node.h. */
int dlock__node_adopt_conn(dlock__nodeset *ns, int i, dlock__endpoint *ep,
                           dlock__conn *conn, char *err, size_t errlen)
{
    dlock__node *n = &ns->node[i];
    dlock__endpoint *cur;
    struct dlock__retired *r = malloc(sizeof *r);
    if (r == NULL) {
        dlock__conn_close(conn);
        dlock__endpoint_clear(ep);
        free(ep);
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&n->mu);
    cur = atomic_load(&n->addr);
    if (cur != &n->ep) {
        r->ep = cur;
        r->next = n->retired;
        n->retired = r;
        r = NULL;
    }
    atomic_store(&n->addr, ep);
    atomic_store(&n->stale, 0);
    flush_pool(n);
    n->down_until_ms = 0;
    pthread_mutex_unlock(&n->mu);
    free(r);
    atomic_fetch_add(&ns->stats->reconnects, 1);
    dlock__node_put(ns, i, conn, 1);
    return DLOCK_OK;
}

/* See node.h. */
void dlock__node_suspect(dlock__nodeset *ns, int i)
{
    if (ns->locate != NULL)
        atomic_store(&ns->node[i].stale, 1);
}

/* See node.h. */
uint64_t dlock__nodes_delayed(dlock__nodeset *ns, int64_t *left_ms)
{
    uint64_t m = 0;
    int64_t now = dlock__now_ms(), left = 0;
    int i;
    for (i = 0; i < ns->n; i++) {
        int64_t u = atomic_load(&ns->node[i].delay_until_ms);
        if (u > now) {
            m |= 1ULL << i;
            if (u - now > left)
                left = u - now;
        }
    }
    if (left_ms != NULL)
        *left_ms = left;
    return m;
}

/* See node.h. */
void dlock__nodes_note_lease(dlock__nodeset *ns, int64_t lease_ms)
{
    int64_t cur = atomic_load(&ns->longest_lease_ms);
    while (lease_ms > cur &&
           !atomic_compare_exchange_weak(&ns->longest_lease_ms, &cur, lease_ms))
        ;
}
