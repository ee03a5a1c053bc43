/*
 * node.c - a node set's servers and their connection pools: set up a node
 * from its URL, take a connection (pooled, or opened on demand; a node
 * whose connect just timed out is skipped for a moment with Redlock), give
 * it back, free the set. Who the nodes are is topology.c's business; what
 * runs on them, step.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "node.h"

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
    dlock__endpoint_clear(&n->ep);
}

/* See node.h. */
void dlock__nodeset_free(dlock__nodeset *ns)
{
    int i, j;
    if (ns->node != NULL) {
        for (i = 0; i < ns->n; i++) {
            dlock__node *n = &ns->node[i];
            /* A request given up on may still have to be resent
             * (NOSCRIPT): give it that chance, bounded. */
            for (j = 0; j < n->nidle; j++)
                if (dlock__conn_unsettled(n->idle[j]))
                    dlock__conn_settle(n->idle[j], dlock__now_ms() +
                                                       ns->connect_timeout_ms);
            dlock__node_clear(n);
        }
        free(ns->node);
        ns->node = NULL;
    }
    dlock__tls_ctx_free(ns->tls);
    ns->tls = NULL;
}

/* Pop an idle connection or open a new one. With several nodes, a node
 * whose last connect timed out is skipped for 500 ms so that Redlock does
 * not wait out a connect timeout to an unreachable server on every call. */
int dlock__node_get(dlock__nodeset *ns, int i, dlock__conn **out,
                    int64_t deadline_ms, char *err, size_t errlen)
{
    return dlock__node_take(ns, &ns->node[i], out, deadline_ms, err, errlen);
}

static int node_take_ex(dlock__nodeset *ns, dlock__node *n, dlock__conn **out,
                        int64_t deadline_ms, char *err, size_t errlen,
                        int *fresh);

/* See node.h. */
int dlock__node_get_ex(dlock__nodeset *ns, int i, dlock__conn **out,
                       int64_t deadline_ms, char *err, size_t errlen,
                       int *fresh)
{
    return node_take_ex(ns, &ns->node[i], out, deadline_ms, err, errlen, fresh);
}

/* See node.h. A cluster's nodes are skipped like Redlock's: the next
 * route may find another master. */
int dlock__node_take(dlock__nodeset *ns, dlock__node *n, dlock__conn **out,
                     int64_t deadline_ms, char *err, size_t errlen)
{
    int fresh;
    return node_take_ex(ns, n, out, deadline_ms, err, errlen, &fresh);
}

/* dlock__node_take, and *fresh = 1 when the connection was opened now. */
static int node_take_ex(dlock__nodeset *ns, dlock__node *n, dlock__conn **out,
                        int64_t deadline_ms, char *err, size_t errlen,
                        int *fresh)
{
    int64_t now, dl;
    int rc;

    *fresh = 0;
    pthread_mutex_lock(&n->mu);
    if (n->nidle > 0) {
        *out = n->idle[--n->nidle];
        pthread_mutex_unlock(&n->mu);
        return DLOCK_OK;
    }
    *fresh = 1;
    now = dlock__now_ms();
    if ((ns->n > 1 || ns->cluster != NULL) && now < n->down_until_ms) {
        pthread_mutex_unlock(&n->mu);
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "%s: down (connect timed out moments ago)",
                           n->ep.display);
    }
    pthread_mutex_unlock(&n->mu);

    dl = now + ns->connect_timeout_ms;
    if (deadline_ms >= 0 && deadline_ms < dl)
        dl = deadline_ms;
    if (dl <= now) /* the caller's time is up: not the node's fault */
        return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                           "%s: no time left to connect", n->ep.display);
    rc = dlock__conn_open(out, &n->ep, ns->tls, dl, err, errlen);
    if (rc == DLOCK_OK)
        atomic_fetch_add(&ns->stats->reconnects, 1);
    if (rc != DLOCK_OK) {
        /* Only a connect that timed out is worth skipping next time: a
         * refused one costs a round trip and must not hide a node that
         * has just come back. */
        if (rc == DLOCK_ETIMEDOUT) {
            pthread_mutex_lock(&n->mu);
            n->down_until_ms = dlock__now_ms() + 500;
            pthread_mutex_unlock(&n->mu);
        }
        *out = NULL;
    }
    return rc;
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
