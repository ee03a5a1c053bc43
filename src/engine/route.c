/*
 * route.c - the engine's routing in a cluster (see call.c): what a
 * cluster's answer may ask (a redirection, a wait), and the node a
 * call goes to, found in the slot map, which is refreshed first by steps
 * when due (topo/cluster.h's dlock__refreshing, one per engine call,
 * the calls routing meanwhile waiting for it); then the lane to that
 * node, a connection from its pool, or its open started (one per node:
 * the other calls to it wait for its lane).
 */
#include <stdio.h>

#include "engine/machine.h"
#include "base/slot.h"

/* See machine.h. Cluster: the node call j goes to (*nd): the one an ASK named, else
 * its slot's master, the map refreshed first when due (by steps:
 * DLOCK__OPEN_AGAIN, the call waits IDLE, routing). Then a lane to it
 * (*out, *conn NULL), a connection from its pool (*conn), or its open
 * started (DLOCK__OPEN_AGAIN: OPENING; while another call opens one to
 * nd, this one waits IDLE). */
int dlock__call_cluster_conn(dlock__call *k, int j, dlock__node **nd,
                             dlock__conn **conn, int *out)
{
    ecall *c = &k->cl[j];
    dlock__result *r = &k->res[j];
    const dlock__cmd *cmd = c->cmd;
    int rc = DLOCK_OK, fresh, l;
    if (*nd == NULL) {
        if (k->refresh != NULL) {
            c->routing = 1;
            return DLOCK__OPEN_AGAIN;
        }
        if (c->routing) {
            rc = k->rrc; /* the refresh it waited for is over */
            if (rc != DLOCK_OK)
                snprintf(r->err, sizeof r->err, "%s", k->rerr);
        } else if (dlock__cluster_wants_refresh(k->ns)) {
            rc = dlock__cluster_refresh_start(&k->refresh, k->ns, k->deadline,
                                              r->err, sizeof r->err);
        }
        c->routing = rc == DLOCK__OPEN_AGAIN;
        if (rc == DLOCK__OPEN_AGAIN)
            return rc;
        if (rc != DLOCK_OK && !dlock__cluster_loaded(k->ns))
            return rc;
        rc = dlock__cluster_route_now(
            k->ns,
            cmd->nkeys > 0 ? dlock__key_slot(cmd->keys[0], cmd->keylens[0]) : 0,
            nd, r->err, sizeof r->err);
        if (rc != DLOCK_OK)
            return rc;
    }
    for (l = 0; l < k->nl; l++)
        if (k->ln[l].conn != NULL && k->ln[l].nd == *nd) {
            *out = l;
            return DLOCK_OK;
        }
    for (l = 0; l < k->m; l++)
        if (k->cl[l].state == C_OPENING && k->cl[l].open_nd == *nd)
            return DLOCK__OPEN_AGAIN; /* its lane comes */
    if (k->set != NULL &&
        (rc = dlock__lanes_find(k, j, *nd, &l)) != DLOCK__LANE_NONE)
        return rc; /* DLOCK_OK: the set's lane there (*conn NULL) */
    rc = dlock__node_opening_take(&c->open, k->ns, *nd, k->deadline, conn,
                                  &fresh, r->err, sizeof r->err);
    if (rc == DLOCK__OPEN_AGAIN) {
        c->state = C_OPENING;
        c->open_nd = *nd;
        if (k->set != NULL)
            dlock__lanes_opening(k, *nd, 1, DLOCK_OK, NULL);
    }
    return rc;
}

/* See machine.h. The map's refresh went one step (revents, 0: none); once over, the
 * calls that waited for it route with the map as it is (or fail with
 * its error when there is none). */
void dlock__call_refresh_step(dlock__call *k, short revents)
{
    int rc = dlock__cluster_refresh_step(k->refresh, revents, k->rerr,
                                         sizeof k->rerr);
    if (rc == DLOCK__OPEN_AGAIN)
        return;
    dlock__cluster_refresh_free(k->refresh);
    k->refresh = NULL;
    k->rrc = rc;
    k->changed = 1;
}

/* A failure worth waiting out in a cluster: the node may be gone and its
 * slots on their way to a replica. Not a bad password or TLS setup. */
static int cluster_transient(const dlock__call *k, int rc)
{
    return k->ns->cluster != NULL &&
           (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ESERVER);
}

/* See machine.h. */
void dlock__call_later(dlock__call *k, int j, int rc)
{
    ecall *c = &k->cl[j];
    int64_t d = c->tries < 4 ? 10LL << c->tries : 100;
    int64_t now = dlock__now_ms();
    c->tries++;
    c->ask = NULL;
    c->hops = 0; /* ASK, TRYAGAIN, ASK...: the deadline bounds those */
    dlock__call_end(k, j, rc);
    if (k->ns->cluster != NULL && now + d < k->deadline) {
        c->state = C_BACKOFF;
        c->retry_at = now + d;
    }
}

/* See machine.h. */
void dlock__call_failed(dlock__call *k, int j, int rc)
{
    if (cluster_transient(k, rc)) {
        dlock__cluster_stale(k->ns);
        dlock__call_later(k, j, rc);
    } else {
        dlock__call_end(k, j, rc);
    }
}

/* See machine.h. The call did not run where it was refused. */
int dlock__call_redirect(dlock__call *k, int l, int j, redisReply *rep)
{
    ecall *c = &k->cl[j];
    dlock__result *r = &k->res[j];
    dlock__node *to = NULL, *nd = k->ln[l].nd;
    int sl;
    dlock__redirect kind =
        dlock__cluster_redirect(k->ns, nd, rep->str, &to, &sl);
    if (kind == DLOCK__REDIR_NONE ||
        (kind != DLOCK__REDIR_RETRY && c->hops >= MAX_HOPS))
        return 0;
    snprintf(r->err, sizeof r->err, "%s: %s", dlock__node_name(nd), rep->str);
    freeReplyObject(rep);
    /* Only an earlier request whose connection failed might have run
     * (then an undo is still due). */
    r->sent = c->lost;
    if (kind == DLOCK__REDIR_RETRY) {
        snprintf(c->refused, sizeof c->refused, "%.120s", r->err);
        dlock__call_later(k, j, DLOCK_ESERVER);
        return 1;
    }
    c->hops++;
    c->ask = kind == DLOCK__REDIR_ASK ? to : NULL;
    c->state = C_IDLE;
    c->lane = -1;
    k->changed = 1;
    return 1;
}
