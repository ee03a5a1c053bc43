/*
 * node_open.c - a fixed node's new connection opened without blocking
 * (see node.h): the engine opens a Redlock's missing connections so, all
 * at once beside the nodes that are ready, where a thread per node used
 * to do it. The steps: the endpoint's connect, TLS and login (net.h's
 * dlock__opening), with INFO server replication queued behind the login
 * from the start (one round trip for AUTH, SELECT and INFO), then the
 * check of the server dlock__node_open makes (dlock__node_checked).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/node.h"

struct dlock__node_opening {
    dlock__nodeset *ns;
    int i;
    const dlock__endpoint *ep;
    dlock__opening *net; /* connect, TLS, login; NULL once done */
    dlock__conn *conn;   /* then: INFO's reply awaited on it */
    int64_t dl;          /* the open's deadline */
};

/* The open ends with rc: counted (or its timeout remembered). */
static int opened(dlock__node_opening *o, int rc)
{
    dlock__node_open_done(o->ns, &o->ns->node[o->i], rc);
    return rc;
}

/* The INFO's reply, once there: the server is checked and the
 * connection handed over (*conn). */
static int info_step(dlock__node_opening *o, short revents, dlock__conn **conn,
                     char *err, size_t errlen)
{
    dlock__srvinfo id;
    redisReply *r = NULL;
    char msg[DLOCK__ERRLEN];
    int rc = DLOCK_OK, got;
    memset(&id, 0, sizeof id);
    if (revents != 0)
        rc = dlock__conn_progress(o->conn, revents, msg, sizeof msg);
    /* The peer may have answered and then closed: a complete reply
     * counts. */
    got = dlock__conn_pop_reply(o->conn, &r, NULL, 0);
    if (got == 1) {
        dlock__node_identify_read(r, &id);
        freeReplyObject(r);
        rc = DLOCK_OK;
    } else if (rc == DLOCK_OK) {
        return DLOCK__OPEN_AGAIN;
    } else {
        dlock__fail(err, errlen, rc, "%s", msg);
    }
    rc = dlock__node_checked(o->ns, o->i, o->ep, rc, &id, &o->conn, NULL, 0,
                             err, errlen);
    *conn = o->conn;
    o->conn = NULL;
    return opened(o, rc);
}

/* The connection is made and logged in: INFO's reply is next (its
 * request is written now if the login left it queued). */
static int net_done(dlock__node_opening *o, dlock__conn **conn, char *err,
                    size_t errlen)
{
    char msg[DLOCK__ERRLEN];
    int rc;
    o->conn = dlock__opening_take(o->net);
    dlock__opening_free(o->net);
    o->net = NULL;
    rc = dlock__conn_progress(o->conn, POLLOUT, msg, sizeof msg);
    if (rc != DLOCK_OK) {
        dlock__fail(err, errlen, rc, "%s", msg);
        dlock__conn_close(o->conn);
        o->conn = NULL;
        return opened(o, rc);
    }
    return info_step(o, 0, conn, err, errlen);
}

/* See node.h. */
int dlock__node_opening_start(dlock__node_opening **out, dlock__nodeset *ns,
                              int i, int64_t deadline_ms, dlock__conn **conn,
                              int *fresh, char *err, size_t errlen)
{
    dlock__node *n = &ns->node[i];
    dlock__node_opening *o;
    int64_t dl;
    int rc;
    *out = NULL;
    *conn = NULL;
    *fresh = 0;
    pthread_mutex_lock(&n->mu);
    if (n->nidle > 0)
        *conn = n->idle[--n->nidle];
    pthread_mutex_unlock(&n->mu);
    if (*conn != NULL)
        return DLOCK_OK;
    *fresh = 1;
    rc = dlock__node_open_window(ns, n, deadline_ms, &dl, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    o = calloc(1, sizeof *o);
    if (o == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    *out = o;
    o->ns = ns;
    o->i = i;
    o->ep = dlock__node_addr(n);
    o->dl = dl;
    rc = dlock__opening_start(&o->net, o->ep, ns->tls, dl, err, errlen);
    if ((rc == DLOCK_OK || rc == DLOCK__OPEN_AGAIN) &&
        dlock__node_identify_ask(dlock__opening_conn(o->net)) != DLOCK_OK)
        rc = dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (rc == DLOCK_OK)
        rc = net_done(o, conn, err, errlen);
    else if (rc != DLOCK__OPEN_AGAIN)
        rc = opened(o, rc);
    if (rc != DLOCK__OPEN_AGAIN) {
        dlock__node_opening_free(o);
        *out = NULL;
    }
    return rc;
}

/* See node.h. */
void dlock__node_opening_poll(const dlock__node_opening *o, int *fd,
                              short *events)
{
    if (o->net != NULL) {
        dlock__opening_poll(o->net, fd, events);
        return;
    }
    *fd = dlock__conn_fd(o->conn);
    *events = dlock__conn_events(o->conn);
}

/* See node.h. */
int dlock__node_opening_step(dlock__node_opening *o, short revents,
                             dlock__conn **conn, char *err, size_t errlen)
{
    int rc;
    *conn = NULL;
    if (o->net == NULL)
        return info_step(o, revents, conn, err, errlen);
    rc = dlock__opening_step(o->net, revents, err, errlen);
    if (rc == DLOCK_OK)
        return net_done(o, conn, err, errlen);
    return rc == DLOCK__OPEN_AGAIN ? rc : opened(o, rc);
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
    if (o->net != NULL)
        return opened(o, dlock__opening_timeout(o->net, err, errlen));
    memset(&id, 0, sizeof id);
    rc = dlock__node_checked(o->ns, o->i, o->ep, DLOCK_ETIMEDOUT, &id, &o->conn,
                             NULL, 0, err, errlen);
    return opened(o, rc);
}

/* See node.h. */
void dlock__node_opening_free(dlock__node_opening *o)
{
    if (o == NULL)
        return;
    dlock__opening_free(o->net);
    dlock__conn_close(o->conn);
    free(o);
}
