/*
 * send.c - the engine's sending side (call.c is the rest): the lane a
 * call goes on (a fixed node's, its slot's master's or the node an ASK
 * named; on a lane set a view of the set's lane; a replica refused for a
 * lock write), a call written there (ASKING first when asked, the
 * script by SHA or with its source, the rule in call_write), the lane's
 * WAIT after its batch, and a lane that fails (its calls lost: retried
 * once on a fresh connection, then failed).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/machine.h"
#include "engine/script.h"
#include "topo/cluster.h"
#include "topo/ident.h"

/* Call j's connection failed under it (rc; lost: the request may have
 * run): once on a fresh connection while time remains, then as a
 * failure to send. */
static void call_lost(dlock__call *k, int j, int rc, int lost)
{
    ecall *c = &k->cl[j];
    if (c->first != NULL)
        freeReplyObject(c->first);
    c->first = NULL;
    c->lane = -1;
    if (lost) {
        c->lost = 1;
        /* A dropped connection is what a failover looks like. */
        if (c->node >= 0)
            dlock__node_suspect(k->ns, c->node);
    }
    if (!c->retried && rc != DLOCK_ENOMEM && dlock__now_ms() < k->deadline) {
        c->retried = 1;
        c->state = C_IDLE;
        k->changed = 1;
        return;
    }
    dlock__call_failed(k, j, rc);
}

/* Expect one more reply on lane l of k (kind; E_ASKING, E_SCRIPT: call
 * j's), on its set's lane too when it is a view of one. DLOCK_OK or
 * DLOCK_ENOMEM. */
static int q_push(dlock__call *k, int l, int kind, int call)
{
    lane *ln = &k->ln[l];
    expect *q;
    int pos = -1;
    if (ln->qhead > 0 && ln->qhead == ln->qlen)
        ln->qhead = ln->qlen = 0;
    q = dlock__room(ln->q, &ln->qcap, ln->qlen, sizeof *q, 8);
    if (q == NULL)
        return DLOCK_ENOMEM;
    ln->q = q;
    if (ln->sh >= 0 && dlock__lanes_push(k, l, kind, call, &pos) != DLOCK_OK)
        return DLOCK_ENOMEM;
    ln->q[ln->qlen++] = (expect){kind, call, pos};
    return DLOCK_OK;
}

/* Lane l's connection failed (rc, err): l is released (closed, or
 * detached from its set's lane) and every call on it not answered yet (a
 * script reply without its WAIT counts as not answered) is lost. */
void dlock__lane_lost(dlock__call *k, int l, int rc, const char *err)
{
    int j;
    dlock__lane_release(k, l, 0);
    for (j = 0; j < k->m; j++) {
        if (k->cl[j].state != C_SENT || k->cl[j].lane != l)
            continue;
        snprintf(k->res[j].err, sizeof k->res[j].err, "%s", err);
        call_lost(k, j, rc, k->res[j].sent);
    }
}

/* Lane l's connection failed (rc, err): every call on it not answered
 * yet is lost; on a set, every call on the set's lane. */
void dlock__lane_fail(dlock__call *k, int l, int rc, const char *err)
{
    if (k->ln[l].sh >= 0)
        dlock__lanes_fail(k->set, k->ln[l].sh, rc, err);
    else
        dlock__lane_lost(k, l, rc, err);
}

/* A free lane for conn to nd (node: fixed set index or -1), with the INFO
 * that identifies a Redlock node queued first when wanted. On a set: a
 * view of the set's lane to nd (conn, when not NULL, becomes it or goes
 * to the pool). Returns its index, or -1 out of memory (conn then given
 * back). */
int dlock__lane_new(dlock__call *k, dlock__node *nd, int node,
                    dlock__conn *conn, int fresh)
{
    int l, sh = -1, took = 1;
    for (l = 0; l < k->nl && k->ln[l].conn != NULL; l++)
        ;
    if (l == k->nl) {
        lane *ln = realloc(k->ln, (size_t)(k->nl + 1) * sizeof *ln);
        if (ln == NULL) {
            dlock__node_give(k->ns, nd, conn, 1);
            return -1;
        }
        k->ln = ln;
        memset(&k->ln[k->nl++], 0, sizeof *ln);
    }
    if (k->set != NULL && (sh = dlock__lanes_install(k, nd, conn, &took)) < 0)
        return -1;
    /* Blank but for its queue's room (a free lane of this call, or of a
     * call the set kept for reuse: nothing of its last use stays). */
    k->ln[l] = (lane){.nd = nd,
                      .node = node,
                      .sh = sh,
                      .conn = sh >= 0 ? dlock__lanes_conn(k->set, sh) : conn,
                      .fresh = fresh && took,
                      .q = k->ln[l].q,
                      .qcap = k->ln[l].qcap};
    /* A node not yet identified is asked who it is on the way (a Redlock
     * must not count one server twice; ident.c): on a set, once per
     * connection. */
    if (node >= 0 && took && dlock__ident_wanted(k->ns, node) &&
        (dlock__ident_ask(k->ln[l].conn) != DLOCK_OK ||
         q_push(k, l, E_INFO, -1) != DLOCK_OK)) {
        dlock__lane_fail(k, l, DLOCK_ENOMEM, "out of memory");
        return -1;
    }
    return l;
}

/* A fixed set's connection for call j: the hold's own (a pin: its
 * earlier request, given up on, goes first), the one opened (or taken)
 * for it before, or one from the pool; else its open starts
 * (DLOCK__OPEN_AGAIN: the call is OPENING; node_open.c's steps, a
 * Sentinel's locate first when the master may have moved). */
static int fixed_conn(dlock__call *k, int j, dlock__conn **conn, int *fresh)
{
    ecall *c = &k->cl[j];
    dlock__conn **pins = c->cmd->pins;
    int rc;
    *fresh = 1;
    if (k->set == NULL && pins != NULL && pins[c->node] != NULL &&
        !c->retried) {
        *conn = pins[c->node];
        pins[c->node] = NULL;
        *fresh = 0;
        return DLOCK_OK;
    }
    if (c->pre != NULL) {
        *conn = c->pre;
        *fresh = c->pre_fresh;
        c->pre = NULL;
        return DLOCK_OK;
    }
    rc = dlock__node_opening_start(&c->open, k->ns, c->node, k->deadline, conn,
                                   fresh, k->res[j].err, sizeof k->res[j].err);
    if (rc == DLOCK__OPEN_AGAIN)
        c->state = C_OPENING;
    if (rc == DLOCK__OPEN_AGAIN && k->set != NULL)
        dlock__lanes_opening(k, &k->ns->node[c->node], 1, DLOCK_OK, NULL);
    return rc;
}

/* A lock write to a fixed server that is a replica: refused (a lock
 * written there would not be seen by the master's clients and vanish at
 * the next resync). 1 when refused (conn given back, res[j].err set). */
static int replica_refused(dlock__call *k, int j, dlock__node *nd,
                           dlock__conn *conn)
{
    if (!k->cl[j].cmd->lock_write ||
        !dlock__node_refuses_locks(k->ns, nd, k->res[j].err,
                                   sizeof k->res[j].err))
        return 0;
    dlock__node_give(k->ns, nd, conn, 1);
    return 1;
}

/* On a set, a fixed set's call j to nd: a view of the
 * set's lane there (*out), or what dlock__lanes_find says (DLOCK__LANE_NONE:
 * j opens it). One opened for j (pre) goes there first. */
static int set_lane(dlock__call *k, int j, dlock__node *nd, int *out)
{
    int sh, rc;
    if (k->cl[j].pre != NULL)
        return DLOCK__LANE_NONE;
    rc = dlock__lanes_find(k, j, nd, &sh);
    if (rc != DLOCK_OK)
        return rc;
    if (replica_refused(k, j, nd, NULL))
        return DLOCK_EREFUSED;
    *out = dlock__lane_new(k, nd, k->cl[j].node, NULL, 0);
    if (*out >= 0)
        return DLOCK_OK;
    snprintf(k->res[j].err, sizeof k->res[j].err, "out of memory");
    return DLOCK_ENOMEM;
}

/* The lane call j goes on: node j's (fixed set), or its slot's master's
 * (or the node an ASK named), shared with the other calls going there. */
static int lane_for(dlock__call *k, int j, int *out)
{
    ecall *c = &k->cl[j];
    dlock__result *r = &k->res[j];
    dlock__node *nd = c->ask;
    dlock__conn *conn = NULL;
    int fresh = 1, rc = DLOCK_OK;
    if (k->fixed) {
        nd = &k->ns->node[c->node];
        if (k->set != NULL &&
            (rc = set_lane(k, j, nd, out)) != DLOCK__LANE_NONE)
            return rc;
        rc = fixed_conn(k, j, &conn, &fresh);
        if (rc == DLOCK__OPEN_AGAIN)
            return rc;
        if (rc == DLOCK_OK && replica_refused(k, j, nd, conn))
            return DLOCK_EREFUSED;
    } else {
        rc = dlock__call_cluster_conn(k, j, &nd, &conn, out);
        if (rc == DLOCK_OK && conn == NULL && *out >= 0)
            return DLOCK_OK; /* a lane to nd already (else the set's) */
    }
    if (rc != DLOCK_OK)
        return rc;
    *out = dlock__lane_new(k, nd, k->fixed ? c->node : -1, conn, fresh);
    if (*out < 0) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return DLOCK_ENOMEM;
    }
    return DLOCK_OK;
}

/* Write call j on lane l (ASKING first after an ASK), by SHA or with the
 * source. DLOCK_OK, or DLOCK_ENOMEM (the lane is then to be failed). */
int dlock__call_write(dlock__call *k, int j, int l)
{
    static const char *const asking[1] = {"ASKING"};
    ecall *c = &k->cl[j];
    lane *ln = &k->ln[l];
    dlock__pipe *p = dlock__lanes_pipe(k, l);
    dlock__callv v;
    int rc = DLOCK_OK;
    c->state = C_SENT;
    c->lane = l;
    c->fresh = ln->fresh;
    ln->dirty = 1;
    if (c->ask != NULL) {
        atomic_fetch_add(&k->ns->stats->requests, 1);
        rc = dlock__conn_append_argv(ln->conn, 1, (const char **)asking, NULL);
        if (rc == DLOCK_OK)
            rc = q_push(k, l, E_ASKING, j);
    }
    /* Where a NOSCRIPT is possible (a script this node never answered
     * this client, and no source of it ahead on this set lane) and the
     * call may end at a majority (dlock__call_enough), the source goes at
     * once, over a pooled connection or one opened for this call alike:
     * the node need not then be waited for. (One opened for this call to
     * a node that did answer the script is sent it by SHA and waited for:
     * the node may have restarted, and its NOSCRIPT tells: abandon.c.) */
    c->behind = 0;
    if (!c->full && !c->cmd->raw && c->cmd->enough != NULL &&
        !(atomic_load(&ln->nd->scripts_ok) & (1ULL << c->cmd->script))) {
        /* Behind a source on its set lane, by SHA, it finds the script
         * as a node known to have it would (unless flushed meanwhile):
         * not waited for either. */
        if (p != NULL && dlock__pipe_has_source(p, c->cmd->script))
            c->behind = 1;
        else
            c->full = 1;
    }
    if (c->full && !c->cmd->raw && p != NULL)
        dlock__pipe_sourced(p, c->cmd->script);
    if (rc == DLOCK_OK)
        rc = dlock__callv_build(&v, k->scripts, c->cmd, c->full);
    if (rc == DLOCK_OK) {
        atomic_fetch_add(&k->ns->stats->requests, 1);
        rc = dlock__conn_append_argv(ln->conn, v.argc, v.argv, v.lens);
    }
    dlock__callv_free(&v);
    return rc == DLOCK_OK ? q_push(k, l, E_SCRIPT, j) : rc;
}

/* Send the IDLE call j: find its lane and write it there (pushed out by
 * lane_flush). */
void dlock__call_send(dlock__call *k, int j)
{
    int l = -1, rc = lane_for(k, j, &l);
    if (rc == DLOCK__OPEN_AGAIN)
        return; /* OPENING: sent once open */
    if (rc != DLOCK_OK) {
        dlock__call_failed(k, j, rc);
        return;
    }
    if (dlock__call_write(k, j, l) != DLOCK_OK)
        dlock__lane_fail(k, l, DLOCK_ENOMEM, "out of memory");
}

/* Push out what was written on lane l, WAIT last when the calls write
 * locks for replicas: it counts the replicas that have every write
 * before it on this connection. */
void dlock__lane_flush(dlock__call *k, int l)
{
    lane *ln = &k->ln[l];
    char err[DLOCK__ERRLEN] = "out of memory";
    int rc = DLOCK_OK, j;
    if (ln->conn == NULL || !ln->dirty)
        return;
    ln->dirty = 0;
    if (k->wait && ln->sh >= 0) {
        rc = dlock__lanes_wait(k, l); /* one WAIT for the set's calls */
    } else if (k->wait) {
        char n[24], t[24];
        const char *wv[3] = {"WAIT", n, t};
        dlock__fmt_i64(n, k->wcmd->wait_replicas);
        dlock__fmt_i64(t, k->wcmd->wait_timeout_ms);
        atomic_fetch_add(&k->ns->stats->requests, 1);
        rc = dlock__conn_append_argv(ln->conn, 3, wv, NULL);
        if (rc == DLOCK_OK)
            rc = q_push(k, l, E_WAIT, -1);
    }
    /* A set's lane is written by its driver (dlock__lanes_flush: the
     * requests of many calls in one write). */
    if (rc == DLOCK_OK && ln->sh < 0)
        rc = dlock__conn_progress(ln->conn, POLLOUT, err, sizeof err);
    if (rc != DLOCK_OK) {
        dlock__lane_fail(k, l, rc, err);
        return;
    }
    for (j = 0; j < k->m; j++)
        if (k->cl[j].state == C_SENT && k->cl[j].lane == l)
            k->res[j].sent = 1;
}
