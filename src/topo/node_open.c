/*
 * node_open.c - a fixed node's new connection opened without blocking
 * (see node.h): the engine opens a node set's missing connections so,
 * all at once beside the nodes that are ready. The steps: the node
 * located when its topology says it may have moved (ns->locator:
 * Sentinel's asks and check, which leave the checked connection in the
 * pool), then the endpoint's connect, TLS and login (net.h's
 * dlock__opening), with INFO server replication queued behind the login
 * from the start (one round trip for AUTH, SELECT and INFO), then the
 * check of the server (dlock__node_checked). dlock__node_open, the
 * blocking open, waits for the same steps with poll().
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/node.h"

struct dlock__node_opening {
    dlock__nodeset *ns;
    dlock__node *nd;
    int i;       /* nd's index in the set; -1: a cluster's table node */
    int info;    /* INFO server replication asked behind the login */
    int counted; /* the open is counted (dlock__node_open_done) */
    void *loc;   /* the locate's steps, while it runs */
    int lrc;     /* how the locate went (DLOCK_OK: none, or found) */
    char lerr[DLOCK__ERRLEN];
    const dlock__endpoint *ep;
    dlock__opening *net; /* connect, TLS, login; NULL once done */
    dlock__conn *conn;   /* then: INFO's reply awaited on it */
    int64_t dl;          /* the open's deadline */
};

/* The open ends with rc: when the locate failed too, the message says
 * both (the sentinels' answer explains the rest); a failure a move
 * explains marks the node for locating again; counted (or its timeout
 * remembered). */
static int opened(dlock__node_opening *o, int rc, char *err, size_t errlen)
{
    dlock__nodeset *ns = o->ns;
    if (rc != DLOCK_OK && o->lrc != DLOCK_OK) {
        char both[2 * DLOCK__ERRLEN + 4];
        snprintf(both, sizeof both, "%s; %s", err != NULL ? err : "", o->lerr);
        dlock__fail(err, errlen, rc, "%.*s", DLOCK__ERRLEN - 1, both);
    }
    if (rc != DLOCK_OK && ns->locate != NULL &&
        (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ESERVER))
        atomic_store(&o->nd->stale, 1);
    if (o->counted)
        dlock__node_open_done(ns, o->nd, rc);
    return rc;
}

/* The INFO's reply, once there: the server is checked and the
 * connection handed over (*conn). */
static int info_step(dlock__node_opening *o, short revents, dlock__conn **conn,
                     char *err, size_t errlen)
{
    dlock__srvinfo id;
    redisReply *r = NULL;
    int rc, got = 0;
    memset(&id, 0, sizeof id);
    rc = dlock__conn_collect(o->conn, 1, &r, &got, revents, err, errlen);
    if (rc == 0)
        return DLOCK__OPEN_AGAIN;
    if (got == 1) {
        dlock__node_identify_read(r, &id);
        freeReplyObject(r);
        rc = DLOCK_OK;
    }
    if (o->i >= 0) {
        rc = dlock__node_checked(o->ns, o->i, o->ep, rc, &id, &o->conn, NULL, 0,
                                 err, errlen);
    } else if (rc == DLOCK_OK) {
        o->ns->table_check(o->ns, o->nd, &id);
    } else {
        dlock__conn_close(o->conn);
        o->conn = NULL;
    }
    *conn = o->conn;
    o->conn = NULL;
    return opened(o, rc, err, errlen);
}

/* The connection is made and logged in: INFO's reply is next (its
 * request is written now if the login left it queued). */
static int net_done(dlock__node_opening *o, dlock__conn **conn, char *err,
                    size_t errlen)
{
    o->conn = dlock__opening_take(o->net);
    dlock__opening_free(o->net);
    o->net = NULL;
    if (o->info)
        return info_step(o, POLLOUT, conn, err, errlen);
    *conn = o->conn; /* a cluster's node without a check */
    o->conn = NULL;
    return opened(o, DLOCK_OK, err, errlen);
}

/* Open a connection to the node's address now: connect, TLS, login and
 * INFO (queued behind the login). */
static int net_start(dlock__node_opening *o, dlock__conn **conn, char *err,
                     size_t errlen)
{
    int rc;
    o->ep = dlock__node_addr(o->nd);
    if (o->ep->host == NULL && o->ep->path == NULL)
        return opened(o,
                      dlock__fail(err, errlen,
                                  o->lrc != DLOCK_OK ? o->lrc : DLOCK_EIO, "%s",
                                  o->lerr[0] ? o->lerr : "no address known"),
                      NULL, 0);
    rc = dlock__opening_start(&o->net, o->ep, o->ns->tls, o->dl, err, errlen);
    if ((rc == DLOCK_OK || rc == DLOCK__OPEN_AGAIN) && o->info &&
        dlock__node_identify_ask(dlock__opening_conn(o->net)) != DLOCK_OK)
        rc = dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (rc == DLOCK_OK)
        return net_done(o, conn, err, errlen);
    return rc == DLOCK__OPEN_AGAIN ? rc : opened(o, rc, err, errlen);
}

/* The locate ended with lrc: the connection its check made, when it
 * left one in the pool, is taken; else the open goes on (when locating
 * fails the last known address is tried all the same: the sentinels
 * may be down while the master is fine). */
static int located(dlock__node_opening *o, int lrc, dlock__conn **conn,
                   char *err, size_t errlen)
{
    dlock__node *n = o->nd;
    o->ns->locator->free(o->loc);
    o->loc = NULL;
    o->lrc = lrc;
    if (lrc == DLOCK_OK) {
        pthread_mutex_lock(&n->mu);
        if (n->nidle > 0)
            *conn = n->idle[--n->nidle];
        pthread_mutex_unlock(&n->mu);
        if (*conn != NULL)
            return opened(o, DLOCK_OK, err, errlen);
    }
    return net_start(o, conn, err, errlen);
}

/* A new opening of node n (not from the pool; i its index in the set,
 * or -1) before dl: located first when its topology asks, then opened.
 * As dlock__node_opening_start. */
static int opening_new(dlock__node_opening **out, dlock__nodeset *ns,
                       dlock__node *n, int i, int64_t dl, int counted,
                       dlock__conn **conn, char *err, size_t errlen)
{
    dlock__node_opening *o = calloc(1, sizeof *o);
    int rc;
    *out = NULL;
    if (o == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    *o = (dlock__node_opening){.ns = ns,
                               .nd = n,
                               .i = i,
                               .info = i >= 0 || ns->table_check != NULL,
                               .counted = counted,
                               .dl = dl};
    if (i >= 0 && ns->locator != NULL &&
        (atomic_load(&n->stale) || dlock__node_addr(n)->host == NULL)) {
        rc = ns->locator->start(ns, i, dl, &o->loc, o->lerr, sizeof o->lerr);
        if (rc != DLOCK__OPEN_AGAIN)
            rc = located(o, rc, conn, err, errlen);
    } else {
        rc = net_start(o, conn, err, errlen);
    }
    if (rc != DLOCK__OPEN_AGAIN)
        dlock__node_opening_free(o);
    else
        *out = o;
    return rc;
}

/* nd's index in the set, or -1 for a cluster's table node. */
static int set_index(const dlock__nodeset *ns, const dlock__node *nd)
{
    if (ns->cluster == NULL && ns->node != NULL && nd >= ns->node &&
        nd < ns->node + ns->n)
        return (int)(nd - ns->node);
    return -1;
}

/* See node.h. */
int dlock__node_opening_take(dlock__node_opening **out, dlock__nodeset *ns,
                             dlock__node *n, int64_t deadline_ms,
                             dlock__conn **conn, int *fresh, char *err,
                             size_t errlen)
{
    int64_t dl;
    int rc;
    *out = NULL;
    *conn = NULL;
    *fresh = 0;
    pthread_mutex_lock(&n->mu);
    if (ns->table_check != NULL && atomic_load(&n->replica)) {
        /* Opened while it was a replica (a cluster seed): it may be a
         * master now, and only a new connection's check can tell whether
         * it was promoted (the lock-delay). */
        while (n->nidle > 0)
            dlock__conn_close(n->idle[--n->nidle]);
    }
    if (n->nidle > 0)
        *conn = n->idle[--n->nidle];
    pthread_mutex_unlock(&n->mu);
    if (*conn != NULL)
        return DLOCK_OK;
    *fresh = 1;
    rc = dlock__node_open_window(ns, n, deadline_ms, &dl, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    return opening_new(out, ns, n, set_index(ns, n), dl, 1, conn, err, errlen);
}

/* See node.h. */
int dlock__node_opening_start(dlock__node_opening **out, dlock__nodeset *ns,
                              int i, int64_t deadline_ms, dlock__conn **conn,
                              int *fresh, char *err, size_t errlen)
{
    return dlock__node_opening_take(out, ns, &ns->node[i], deadline_ms, conn,
                                    fresh, err, errlen);
}

/* See node.h. */
void dlock__node_opening_poll(const dlock__node_opening *o, int *fd,
                              short *events)
{
    int64_t wake;
    if (o->loc != NULL) {
        o->ns->locator->pollfd(o->loc, fd, events, &wake);
        return;
    }
    if (o->net != NULL) {
        dlock__opening_poll(o->net, fd, events);
        return;
    }
    *fd = dlock__conn_fd(o->conn);
    *events = dlock__conn_events(o->conn);
}

/* See node.h. */
int64_t dlock__node_opening_wake(const dlock__node_opening *o)
{
    int64_t wake = o->dl;
    int fd;
    short ev;
    if (o->loc != NULL)
        o->ns->locator->pollfd(o->loc, &fd, &ev, &wake);
    return wake;
}

/* See node.h. The open's deadline passed: it ends (a locate still
 * running is bounded by the same deadline and ends itself). */
int dlock__node_opening_step(dlock__node_opening *o, short revents,
                             dlock__conn **conn, char *err, size_t errlen)
{
    int rc;
    *conn = NULL;
    if (o->loc != NULL) {
        rc = o->ns->locator->step(o->loc, revents, o->lerr, sizeof o->lerr);
        return rc == DLOCK__OPEN_AGAIN ? rc : located(o, rc, conn, err, errlen);
    }
    if (o->net == NULL)
        rc = info_step(o, revents, conn, err, errlen);
    else if ((rc = dlock__opening_step(o->net, revents, err, errlen)) ==
             DLOCK_OK)
        rc = net_done(o, conn, err, errlen);
    else if (rc != DLOCK__OPEN_AGAIN)
        rc = opened(o, rc, err, errlen);
    if (rc == DLOCK__OPEN_AGAIN && dlock__now_ms() >= o->dl)
        rc = dlock__node_opening_timeout(o, err, errlen);
    return rc;
}

/* See node.h. */
int64_t dlock__node_opening_deadline(const dlock__node_opening *o)
{
    return o->dl;
}

/* See node.h. */
int dlock__node_opening_timeout(dlock__node_opening *o, char *err,
                                size_t errlen)
{
    dlock__srvinfo id;
    int rc;
    if (o->loc != NULL) {
        o->ns->locator->free(o->loc);
        o->loc = NULL;
        return opened(o,
                      dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                                  "%s: no time left to locate it",
                                  dlock__node_name(o->nd)),
                      err, errlen);
    }
    if (o->net != NULL)
        return opened(o, dlock__opening_timeout(o->net, err, errlen), err,
                      errlen);
    if (o->i < 0) {
        rc =
            dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                        "%s did not answer in time", dlock__conn_peer(o->conn));
        return opened(o, rc, err, errlen);
    }
    memset(&id, 0, sizeof id);
    rc = dlock__node_checked(o->ns, o->i, o->ep, DLOCK_ETIMEDOUT, &id, &o->conn,
                             NULL, 0, err, errlen);
    return opened(o, rc, err, errlen);
}

/* See node.h. */
void dlock__node_opening_free(dlock__node_opening *o)
{
    if (o == NULL)
        return;
    if (o->loc != NULL)
        o->ns->locator->free(o->loc);
    dlock__opening_free(o->net);
    dlock__conn_close(o->conn);
    free(o);
}

/* Wait for o's steps (rc: how the last went) until they end; the
 * status, *conn set on success. o is freed. */
static int drive(dlock__node_opening *o, int rc, dlock__conn **conn, char *err,
                 size_t errlen)
{
    while (rc == DLOCK__OPEN_AGAIN) {
        int fd;
        short ev, rev;
        dlock__node_opening_poll(o, &fd, &ev);
        rev = dlock__poll_until(fd, ev, dlock__node_opening_wake(o));
        rc = dlock__node_opening_step(o, rev, conn, err, errlen);
    }
    dlock__node_opening_free(o);
    return rc;
}

/* See node.h: the same steps as the engine's, waited for here. */
int dlock__node_open(dlock__nodeset *ns, int i, dlock__conn **out,
                     int64_t deadline_ms, char *err, size_t errlen)
{
    dlock__node_opening *o;
    int rc;
    *out = NULL;
    rc = opening_new(&o, ns, &ns->node[i], i, deadline_ms, 0, out, err, errlen);
    return drive(o, rc, out, err, errlen);
}

/* See node.h: the engine's steps, waited for here. */
int dlock__node_take_ex(dlock__nodeset *ns, dlock__node *nd, dlock__conn **out,
                        int64_t deadline_ms, char *err, size_t errlen,
                        int *fresh)
{
    dlock__node_opening *o;
    int rc = dlock__node_opening_take(&o, ns, nd, deadline_ms, out, fresh, err,
                                      errlen);
    return drive(o, rc, out, err, errlen);
}

/* Pop an idle connection or open a new one. With several nodes, a node
 * whose last connect timed out is skipped for 500 ms so that Redlock does
 * not wait out a connect timeout to an unreachable server on every call. */
int dlock__node_get(dlock__nodeset *ns, int i, dlock__conn **out,
                    int64_t deadline_ms, char *err, size_t errlen)
{
    return dlock__node_take(ns, &ns->node[i], out, deadline_ms, err, errlen);
}

/* See node.h. */
int dlock__node_get_ex(dlock__nodeset *ns, int i, dlock__conn **out,
                       int64_t deadline_ms, char *err, size_t errlen,
                       int *fresh)
{
    return dlock__node_take_ex(ns, &ns->node[i], out, deadline_ms, err, errlen,
                               fresh);
}

/* See node.h. A cluster's nodes are skipped like Redlock's: the next
 * route may find another master. */
int dlock__node_take(dlock__nodeset *ns, dlock__node *n, dlock__conn **out,
                     int64_t deadline_ms, char *err, size_t errlen)
{
    int fresh;
    return dlock__node_take_ex(ns, n, out, deadline_ms, err, errlen, &fresh);
}
