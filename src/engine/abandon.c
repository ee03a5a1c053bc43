/*
 * abandon.c - how the engine's calls end (see machine.h): what is given
 * up on (the nodes still out once the outcome is certain, the calls
 * still out at the deadline, the connections still being opened, a
 * cancel), a step over a node set in which two entries are one server,
 * and the final results. A request given up on stays in order on its
 * connection (dlock__conn_abandon), so that what goes next to that node
 * (an undo of this very request, say) reaches Redis after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/machine.h"
#include "topo/cluster.h"
#include "topo/ident.h"
#include "engine/script.h"

/* Finished calls a lane set keeps for reuse, at most. */
#define MAX_SPARE 256

/* Give up on call j's request in flight on conn, keeping its EVAL form
 * for a NOSCRIPT answer (dlock__conn_abandon_eval): a give-back answered
 * NOSCRIPT late must still be done. */
static void give_up_eval(dlock__call *k, int j, dlock__conn *conn)
{
    dlock__callv v;
    if (dlock__callv_build(&v, k->scripts, k->cl[j].cmd, 1) == DLOCK_OK)
        dlock__conn_abandon_eval(conn, v.argc, v.argv, v.lens);
    else
        dlock__conn_abandon(conn);
    dlock__callv_free(&v);
}

/* Give up on fixed-set call j (SENT, nothing after it on its lane but
 * INFO's answer before it): its connection goes to cmd->pins
 * (pin_out), or back to the pool carrying the request's EVAL form. */
static void abandon_call(dlock__call *k, int j)
{
    ecall *c = &k->cl[j];
    lane *ln = &k->ln[c->lane];
    dlock__conn *conn = ln->conn;
    int i;
    if (ln->sh >= 0) { /* its reply dropped when it comes: no pin */
        snprintf(k->res[j].err, sizeof k->res[j].err, "%s: not waited for",
                 dlock__node_name(ln->nd));
        dlock__lanes_abandon(k, c->lane, j);
        k->res[j].pending = 1;
        dlock__call_end(k, j, DLOCK_ETIMEDOUT);
        return;
    }
    for (i = ln->qhead; i < ln->qlen; i++)
        if (ln->q[i].kind == E_INFO) /* INFO's answer is unread too */
            dlock__conn_abandon(conn);
    if (c->cmd->pin_out) {
        dlock__conn_abandon(conn);
        c->cmd->pins[j] = conn;
    } else if (c->full) {
        dlock__node_give(k->ns, ln->nd, conn,
                         dlock__conn_abandon(conn) <= MAX_STALE);
    } else {
        /* Kept whatever it carries: it must be able to resend. */
        give_up_eval(k, j, conn);
        dlock__node_give(k->ns, ln->nd, conn, 1);
    }
    ln->conn = NULL;
    ln->qhead = ln->qlen = 0;
    ln->dirty = 0;
    snprintf(k->res[j].err, sizeof k->res[j].err, "%s: not waited for",
             dlock__node_name(ln->nd));
    k->res[j].pending = 1;
    dlock__call_end(k, j, DLOCK_ETIMEDOUT);
}

/*
 * See machine.h. A node where a NOSCRIPT is possible is waited for all
 * the same when its request went by SHA: one that answered this script
 * before, reached over a connection opened for this call (it may have
 * restarted); not one that went by SHA behind a source of the script on
 * its set lane (c->behind: it finds the script as surely as a node known
 * to have it does); an acquire given up on would then simply not happen
 * there, a release would lie in the pool until its resend. A node not
 * known to have this script cached (it never ran it, or answered
 * NOSCRIPT to a script it had run since it last ran this one) is sent
 * the source, over a pooled connection or one opened for this call
 * alike (call.c's call_write), and a request sent with its source is
 * never waited for: a node stopped without closing cost every such call
 * its whole step before. A node still connecting is asked all the same
 * once it opens, with the script's source, so that its answer need not
 * be waited for (a Redlock lock must reach every server it can): the
 * step ends once none is left connecting (on a lane set, a call waiting
 * for the lane another call opens counts as connecting). No early
 * return for a lock write with wait_replicas: a grant counts only once
 * WAIT (read last on its connection) answered.
 */
int dlock__call_enough(dlock__call *k)
{
    const dlock__cmd *cmd = k->wcmd;
    uint64_t waiting = 0, still = 0;
    int j;
    if (!k->fixed || cmd->enough == NULL || k->wait)
        return 0;
    for (j = 0; j < k->m; j++)
        if (k->cl[j].state == C_SENT || k->cl[j].state == C_OPENING ||
            (k->cl[j].state == C_IDLE && k->cl[j].waiting))
            waiting |= 1ULL << j;
    if (!cmd->enough(k->res, waiting, k->ns->n, cmd->enough_ud))
        return 0;
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        if (c->state == C_OPENING || (c->state == C_IDLE && c->waiting)) {
            c->full = 1; /* a set's lane coming: the same */
            still |= 1ULL << j;
        }
        if (c->state != C_SENT)
            continue;
        if (!c->full && !c->behind &&
            (c->fresh || c->retried ||
             !(atomic_load(&k->ln[c->lane].nd->scripts_ok) &
               (1ULL << cmd->script)))) {
            still |= 1ULL << j;
            continue;
        }
        abandon_call(k, j);
    }
    return still == 0;
}

/* Lane l of a one-node set carries a call whose command pins (pin_out):
 * its connection goes to cmd->pins, whatever it still carries, so that
 * the hold's next request to that node (the give-back of this acquire)
 * is read after it. Another pooled connection could be read first, and
 * a late acquire would then queue or take the lock for a waiter that
 * has gone (F6 in docs/reliability.md). Not with Redlock: its nodes that
 * do not answer go back to the pool as before (a failing attempt waits
 * for every node, and a connection stuck behind a cut-off node would
 * hold up the hold's next attempts); its early return pins (abandon_call).
 * 1 when pinned. */
static int lane_pin(dlock__call *k, int l)
{
    lane *ln = &k->ln[l];
    int j;
    if (!k->fixed || k->ns->n != 1 || ln->sh >= 0)
        return 0; /* on a set: its lane keeps the order */
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        if (c->state != C_SENT || c->lane != l || !c->cmd->pin_out ||
            c->cmd->pins == NULL || c->cmd->pins[c->node] != NULL)
            continue;
        c->cmd->pins[c->node] = ln->conn;
        ln->conn = NULL;
        ln->qhead = ln->qlen = 0;
        ln->dirty = 0;
        return 1;
    }
    return 0;
}

/* The deadline passed with lane l's replies still out: keep the
 * connection, its answers marked unwanted, so that what goes next to the
 * node reaches Redis after them (a new connection could be read first
 * when a stalled server wakes): pinned to the hold (lane_pin), else in
 * the pool; one with several unanswered requests is closed instead (the
 * node looks dead) unless pinned. Its calls end. */
static void lane_expire(dlock__call *k, int l)
{
    lane *ln = &k->ln[l];
    int i, j, unread = 0, gave_eval = 0, infos = 0;
    for (i = ln->qhead; i < ln->qlen && ln->sh < 0; i++) {
        const expect *e = &ln->q[i];
        if (e->kind == E_SCRIPT && k->cl[e->call].cmd->give_back &&
            !k->cl[e->call].full) {
            give_up_eval(k, e->call, ln->conn);
            gave_eval = 1;
            continue;
        }
        infos += e->kind == E_INFO;
        unread = dlock__conn_abandon(ln->conn);
    }
    if (ln->sh >= 0) /* on a set: dropped, the give-backs kept */
        dlock__lanes_abandon(k, l, -1);
    else if (!lane_pin(k, l))
        dlock__lane_release(
            k, l, gave_eval || unread <= MAX_STALE + infos + (k->wait ? 2 : 0));
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        if (c->state != C_SENT || c->lane != l)
            continue;
        /* A master that stopped answering may be failed over. */
        if (c->node >= 0)
            dlock__node_suspect(k->ns, c->node);
        snprintf(k->res[j].err, sizeof k->res[j].err, "%s: no answer in time",
                 dlock__node_name(ln->nd));
        dlock__call_end(k, j, DLOCK_ETIMEDOUT);
        dlock__cluster_stale(k->ns);
    }
}

/* See machine.h. */
void dlock__call_expire(dlock__call *k)
{
    int j, l;
    for (l = 0; l < k->nl; l++)
        if (k->ln[l].conn != NULL)
            lane_expire(k, l);
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        dlock__result *r = &k->res[j];
        if (c->state == C_IDLE && r->err[0] == '\0') {
            snprintf(r->err, sizeof r->err, "%s: no time left to send it",
                     dlock__node_name(k->ns->node));
            r->status = DLOCK_ETIMEDOUT;
        }
        if (c->state == C_BACKOFF || c->state == C_IDLE)
            dlock__call_end(k, j, r->status); /* its last error stands */
    }
    dlock__call_unopened(k, DLOCK_ETIMEDOUT, "no answer in time (connecting)");
}

/* See machine.h. Nothing was sent to them; their opens are closed. */
void dlock__call_unopened(dlock__call *k, int rc, const char *why)
{
    int j;
    for (j = 0; j < k->m; j++) {
        if (k->cl[j].state != C_OPENING)
            continue;
        dlock__node_opening_free(k->cl[j].open);
        k->cl[j].open = NULL;
        if (k->set != NULL) /* no verdict on the node: another may open */
            dlock__lanes_opening(k,
                                 k->fixed ? &k->ns->node[j] : k->cl[j].open_nd,
                                 -1, DLOCK_OK, NULL);
        snprintf(
            k->res[j].err, sizeof k->res[j].err, "%s: %s",
            dlock__node_name(k->fixed ? &k->ns->node[j] : k->cl[j].open_nd),
            why);
        dlock__call_end(k, j, rc);
    }
}

/* See machine.h. */
int dlock__call_same_server(dlock__call *k)
{
    char msg[DLOCK__ERRLEN];
    int i;
    if (!k->fixed || k->wcmd->eval ||
        !dlock__ident_refused(k->ns, msg, sizeof msg))
        return 0;
    for (i = 0; i < k->ns->n; i++) {
        dlock__result *r = &k->res[i];
        if (!(k->mask & (1ULL << i)))
            continue;
        if (r->reply != NULL)
            freeReplyObject(r->reply);
        r->reply = NULL;
        r->status = DLOCK_EINVAL;
        snprintf(r->err, sizeof r->err, "%s", msg);
    }
    return 1;
}

/* See machine.h. The end: connections opened and not used go to their
 * pools (opens not finished are closed), a cluster that kept refusing
 * says so, one server counted twice refuses everything; the results are
 * final. */
void dlock__call_finish(dlock__call *k)
{
    int j, l;
    /* Only when the step is cancelled (poll failed) with nodes still
     * connecting. */
    dlock__call_unopened(k, DLOCK_ETIMEDOUT, "not waited for (connecting)");
    dlock__cluster_refresh_free(k->refresh); /* cut short */
    k->refresh = NULL;
    for (l = 0; l < k->nl; l++)
        if (k->ln[l].conn != NULL) /* cancelled: given up on */
            dlock__lane_release(k, l, 0);
    k->nok = 0;
    for (j = 0; j < k->m; j++) {
        dlock__result *r = &k->res[j];
        if (k->cl[j].first != NULL)
            freeReplyObject(k->cl[j].first);
        k->cl[j].first = NULL;
        if (k->set != NULL && k->cl[j].open != NULL) /* cancelled */
            dlock__lanes_opening(k,
                                 k->fixed ? &k->ns->node[j] : k->cl[j].open_nd,
                                 -1, DLOCK_OK, NULL);
        dlock__node_opening_free(k->cl[j].open);
        k->cl[j].open = NULL;
        if (k->cl[j].pre != NULL)
            dlock__node_give(k->ns, &k->ns->node[j], k->cl[j].pre, 1);
        k->cl[j].pre = NULL;
        if ((r->status == DLOCK_EIO || r->status == DLOCK_ETIMEDOUT) &&
            k->cl[j].refused[0] != '\0') {
            /* The cluster kept refusing until time ran out: say so rather
             * than name the last connect or wait that the deadline cut. */
            r->status = DLOCK_ESERVER;
            snprintf(r->err, sizeof r->err, "%s", k->cl[j].refused);
        }
        if (r->status != DLOCK_OK && r->reply != NULL) {
            freeReplyObject(r->reply);
            r->reply = NULL;
        }
    }
    /* Found during this call: the nodes have run it, but one server must
     * not count twice. */
    if (!dlock__call_same_server(k))
        for (j = 0; j < k->m; j++)
            k->nok += (j >= 64 || (k->mask & (1ULL << j))) &&
                      k->res[j].status == DLOCK_OK;
    k->done = 1;
}

/* See call.h. */
int dlock__call_done(const dlock__call *k)
{
    return k->done;
}

/* See call.h. */
void dlock__call_cancel(dlock__call *k, int rc, const char *why)
{
    int j;
    if (k->done)
        return;
    for (j = 0; j < k->m; j++) {
        if (k->cl[j].state == C_DONE)
            continue;
        snprintf(k->res[j].err, sizeof k->res[j].err, "%s", why);
        dlock__call_end(k, j, rc);
    }
    dlock__call_finish(k);
}

/* See call.h. */
dlock__result *dlock__call_results(const dlock__call *k, int *nok)
{
    if (nok != NULL)
        *nok = k->nok;
    return k->res;
}

/* See call.h. */
void dlock__call_free(dlock__call *k)
{
    if (k == NULL)
        return;
    if (!k->done)
        dlock__call_cancel(k, DLOCK_CANCELED, "canceled");
    /* Finished, k holds nothing (its lanes released, opens freed): on a
     * set, kept with its arrays for the next call (call.c). */
    if (k->set != NULL && k->set->nspare < MAX_SPARE) {
        k->next_spare = k->set->spare;
        k->set->spare = k;
        k->set->nspare++;
        return;
    }
    dlock__call_drop(k);
}
