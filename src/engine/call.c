/*
 * call.c - the engine (see call.h): every script call of the library
 * runs here, whether one script on the nodes of a Redlock or a renewal
 * round over many slots of a cluster.
 *
 * A call j (one command for one target) is IDLE (to send), OPENING (its
 * new connection is being opened, node_open.c), SENT (written on a lane),
 * BACKOFF (a cluster asked to wait) or DONE (res[j] final). A lane is
 * one connection to one node with the replies it expects, in order:
 * INFO server's (a Redlock node being identified, ident.c), ASKING's +OK
 * (after an ASK), a call's script reply, WAIT's. The calls of a fixed
 * node set have a lane each (node i's); in a cluster the calls routed to
 * one master share its lane, pipelined, and each batch written on a lane
 * is followed by one WAIT, which counts the replicas that have all of it.
 *
 * What a reply may ask for is handled once: NOSCRIPT sends the source on
 * the same lane; MOVED and ASK move the call to another lane (at most
 * MAX_HOPS in a row); TRYAGAIN, CLUSTERDOWN and a cluster node that
 * fails put it in BACKOFF (10 ms doubling to 100 ms, the map refreshed);
 * a connection that fails under a call is retried once on a fresh one
 * (every script of ours is idempotent). Only the thread that drives a
 * call touches it; connections come from the nodes' pools and go back,
 * or, for a call started on a lane set (an event loop's: lanes.c), its
 * lanes are views of the set's one connection per node, shared with the
 * loop's other calls (no pins there: that connection keeps the order).
 * The sending side (a call's lane, its write, a lane's WAIT and
 * failure) is send.c's; here the replies, the opens, start and process.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/machine.h"
#include "topo/cluster.h"
#include "topo/ident.h"
#include "engine/script.h"

/* Call j answered rep (owned; acks: WAIT's answer, or -1). */
static void call_ok(dlock__call *k, int j, redisReply *rep, long long acks)
{
    k->res[j].reply = rep;
    k->res[j].acks = acks;
    dlock__call_end(k, j, DLOCK_OK);
}

/* Call j's script reply rep (owned) on lane l. */
static void on_script(dlock__call *k, int l, int j, redisReply *rep)
{
    ecall *c = &k->cl[j];
    dlock__node *nd = k->ln[l].nd;
    uint64_t bit = 1ULL << c->cmd->script;
    int failover;
    if (rep->type == REDIS_REPLY_ERROR && !c->full &&
        strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        /* A script it ran before is gone: its cache was flushed (or it
         * restarted), so no script of ours is known there any more. (A
         * script it never ran proves nothing about the others.) */
        dlock__pipe *p = dlock__lanes_pipe(k, l);
        if (atomic_load(&nd->scripts_ok) & bit)
            atomic_store(&nd->scripts_ok, 0);
        freeReplyObject(rep);
        /* On a set lane the one rule of a pipe: by SHA behind a source
         * already on it; else (its own lane) with the source. */
        if (p != NULL && dlock__pipe_noscript(p, c->cmd->script, c->shagain))
            c->shagain = 1;
        else
            c->full = 1;
        if (dlock__call_write(k, j, l) != DLOCK_OK)
            dlock__lane_fail(k, l, DLOCK_ENOMEM, "out of memory");
        return;
    }
    if (rep->type != REDIS_REPLY_ERROR) {
        if (!c->cmd->raw)
            atomic_fetch_or(&nd->scripts_ok, bit);
        if (k->wait)
            c->first = rep; /* final with WAIT's answer */
        else
            call_ok(k, j, rep, -1);
        return;
    }
    if (k->ns->cluster != NULL && dlock__call_redirect(k, l, j, rep))
        return;
    dlock__call_end(k, j,
                    dlock__reply_error(k->ns, nd, rep->str, k->res[j].err,
                                       sizeof k->res[j].err, &failover));
    if (failover && c->node >= 0)
        dlock__node_suspect(k->ns, c->node); /* a failover may explain it */
    freeReplyObject(rep);
}

/* WAIT's answer on lane l: the calls whose script answered before it are
 * done, with the replicas that acknowledged. */
static void on_wait(dlock__call *k, int l, redisReply *rep)
{
    long long acks = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    int j;
    freeReplyObject(rep);
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        if (c->state == C_SENT && c->lane == l && c->first != NULL) {
            call_ok(k, j, c->first, acks);
            c->first = NULL;
        }
    }
}

/* Take rep (owned), the next reply lane l expects; l is released once it
 * expects nothing more. */
static void call_take(dlock__call *k, int l, redisReply *rep)
{
    lane *ln = &k->ln[l];
    expect e = ln->q[ln->qhead++];
    if (e.kind == E_INFO)
        dlock__ident_learn(k->ns, ln->node, rep);
    if (e.kind == E_WAIT)
        on_wait(k, l, rep);
    else if (e.kind == E_SCRIPT)
        on_script(k, l, e.call, rep);
    else
        freeReplyObject(rep);
    if (k->ln[l].conn != NULL && k->ln[l].qhead >= k->ln[l].qlen &&
        k->ln[l].wpend == 0)
        dlock__lane_release(k, l, 1);
}

/* The set's WAIT that lane l waited for answered rep (owned): as a
 * WAIT of its own would have. */
static void call_acked(dlock__call *k, int l, redisReply *rep)
{
    k->ln[l].wpend--;
    on_wait(k, l, rep);
    if (k->ln[l].conn != NULL && k->ln[l].qhead >= k->ln[l].qlen &&
        k->ln[l].wpend == 0)
        dlock__lane_release(k, l, 1);
}

/* Take lane l's replies as they arrive, in the order expected. A lane
 * with nothing more to come goes back to its pool. On a set, the set's
 * lane is read: its replies go to every call that expects them. */
static void lane_collect(dlock__call *k, int l)
{
    if (k->ln[l].sh >= 0) {
        dlock__lanes_collect(k->set, k->ln[l].sh);
        return;
    }
    while (k->ln[l].conn != NULL && k->ln[l].qhead < k->ln[l].qlen) {
        char err[DLOCK__ERRLEN];
        redisReply *rep = NULL;
        int got = dlock__conn_pop_reply(k->ln[l].conn, &rep, err, sizeof err);
        if (got < 0) {
            dlock__lane_fail(k, l, got, err);
            return;
        }
        if (got == 0)
            return;
        call_take(k, l, rep);
    }
    if (k->ln[l].conn != NULL && k->ln[l].qhead >= k->ln[l].qlen)
        dlock__lane_release(k, l, 1);
}

/* Call j's open went one step (revents, 0: none); once done, the call
 * goes with that connection, or ends with the open's error. The open's
 * own deadline (the connect timeout) ends it as dlock__node_get_ex would
 * have. */
static void open_step(dlock__call *k, int j, short revents)
{
    ecall *c = &k->cl[j];
    dlock__result *r = &k->res[j];
    dlock__conn *conn = NULL;
    int rc = dlock__node_opening_step(c->open, revents, &conn, r->err,
                                      sizeof r->err);
    if (rc == DLOCK__OPEN_AGAIN)
        return;
    dlock__node_opening_free(c->open);
    c->open = NULL;
    c->state = C_IDLE;
    k->changed = 1;
    if (k->set != NULL) /* the calls waiting for it go on */
        dlock__lanes_opening(k, k->fixed ? &k->ns->node[j] : c->open_nd, -1, rc,
                             r->err);
    if (rc != DLOCK_OK && k->fixed) {
        dlock__call_end(k, j, rc);
    } else if (rc != DLOCK_OK) {
        dlock__call_failed(k, j, rc);
    } else if (k->fixed) {
        c->pre = conn;
        c->pre_fresh = 1;
    } else if (dlock__lane_new(k, c->open_nd, -1, conn, 1) < 0) {
        snprintf(r->err, sizeof r->err, "out of memory");
        dlock__call_end(k, j, DLOCK_ENOMEM);
    }
}

/* Send what is due, read what has come, until nothing changes. */
static void advance(dlock__call *k)
{
    int j, l;
    do {
        int64_t now = dlock__now_ms();
        k->changed = 0;
        for (j = 0; j < k->m; j++) {
            if (k->cl[j].state == C_BACKOFF && now >= k->cl[j].retry_at)
                k->cl[j].state = C_IDLE;
            if (k->cl[j].state == C_IDLE)
                dlock__call_send(k, j);
        }
        for (l = 0; l < k->nl; l++)
            dlock__lane_flush(k, l);
        /* Data may already sit in the reader (TLS buffers, or a reply
         * read together with the write). */
        for (l = 0; l < k->nl; l++)
            if (k->ln[l].conn != NULL)
                lane_collect(k, l);
        for (l = 0; l < k->nl; l++)
            dlock__lane_flush(k, l);
    } while (k->changed);
}

/* 1 while a call is not done, or a lane still expects a reply (WAIT's
 * after a call that ended with an error or moved on): read, it lets the
 * connection go back to its pool. */
static int busy(const dlock__call *k)
{
    int j;
    for (j = 0; j < k->m; j++)
        if (k->cl[j].state != C_DONE)
            return 1;
    for (j = 0; j < k->nl; j++)
        if (k->ln[j].conn != NULL)
            return 1;
    return 0;
}

/* A fixed set's missing connections start opening at once, so that a
 * node that does not answer holds up no other (a cluster's open as
 * they go). */
static void opens_start(dlock__call *k, uint64_t nodes)
{
    int j;
    if (k->ns->cluster != NULL)
        return;
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        int rc, sh;
        if (!(nodes & (1ULL << j)) ||
            (k->set != NULL &&
             dlock__lanes_find(k, j, &k->ns->node[j], &sh) != DLOCK__LANE_NONE))
            continue; /* a lane of the set there, or one coming */
        rc = dlock__node_opening_start(&c->open, k->ns, j, k->deadline, &c->pre,
                                       &c->pre_fresh, k->res[j].err,
                                       sizeof k->res[j].err);
        if (rc == DLOCK__OPEN_AGAIN && k->set != NULL)
            dlock__lanes_opening(k, &k->ns->node[j], 1, DLOCK_OK, NULL);
        if (rc == DLOCK__OPEN_AGAIN)
            c->state = C_OPENING;
        else if (rc != DLOCK_OK)
            dlock__call_end(k, j, rc);
    }
}

/* The calls' initial states. */
static void calls_init(dlock__call *k, const dlock__cmd *cmds)
{
    uint64_t pinned = 0;
    int j;
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        c->cmd = k->fixed ? &cmds[0] : &cmds[j];
        c->node = k->fixed ? j : -1;
        c->full = c->cmd->eval;
        c->lane = -1;
        c->state = j >= 64 || (k->mask & (1ULL << j)) ? C_IDLE : C_DONE;
        if (k->fixed && cmds[0].pins != NULL && cmds[0].pins[j] != NULL)
            pinned |= 1ULL << j;
    }
    if (k->fixed)
        opens_start(k, k->mask & ~pinned);
}

/* A call with room for n calls, blank as calloc's: one of set's spares
 * (its lanes free, their queues' room kept), else a new one; or NULL out
 * of memory. */
static dlock__call *call_alloc(struct dlock__lanes *set, int n)
{
    dlock__call *k = set != NULL ? set->spare : NULL;
    ecall *cl = NULL;
    lane *ln = NULL;
    int *pidx = NULL, nl = 0, pcap = 0, cap = 0;
    if (k != NULL) {
        set->spare = k->next_spare;
        set->nspare--;
        cl = k->cl;
        cap = k->capcl;
        ln = k->ln;
        nl = k->nl;
        pidx = k->pidx;
        pcap = k->pcap;
    } else if ((k = malloc(sizeof *k)) == NULL) {
        return NULL;
    }
    if (cap < n) {
        ecall *p = realloc(cl, (size_t)n * sizeof *p);
        if (p == NULL) {
            *k = (dlock__call){.cl = cl, .ln = ln, .nl = nl, .pidx = pidx};
            dlock__call_drop(k);
            return NULL;
        }
        cl = p;
        cap = n;
    }
    if (n > 0)
        memset(cl, 0, (size_t)n * sizeof *cl);
    *k = (dlock__call){
        .cl = cl, .capcl = cap, .ln = ln, .nl = nl, .pidx = pidx, .pcap = pcap};
    return k;
}

/* See call.h. */
int dlock__call_start(dlock__call **out, dlock__nodeset *ns,
                      const dlock__script *scripts, const dlock__cmd *cmds,
                      int m, uint64_t mask, int64_t deadline_ms,
                      dlock__result *res)
{
    int fixed = ns->cluster == NULL, j;
    int n = fixed ? ns->n : m;
    void *tag;
    struct dlock__lanes *set = dlock__lanes_current(&tag);
    dlock__call *k = call_alloc(set, n);
    *out = NULL;
    dlock__results_reset(res, n);
    if (k == NULL) {
        for (j = 0; j < n; j++) {
            res[j].status = DLOCK_ENOMEM;
            snprintf(res[j].err, sizeof res[j].err, "out of memory");
        }
        return DLOCK_ENOMEM;
    }
    k->ns = ns;
    k->take = call_take;
    k->lost = dlock__lane_lost;
    k->acked = call_acked;
    k->scripts = scripts;
    k->wcmd = cmds;
    k->res = res;
    k->m = n;
    k->mask = mask;
    k->fixed = fixed;
    k->deadline = deadline_ms;
    k->set = set;
    k->tag = tag;
    *out = k;
    if (n == 0 || (fixed && m < 1)) {
        dlock__call_finish(k);
        return DLOCK_OK;
    }
    k->wait = cmds[0].wait_replicas > 0;
    /* On a set, another call's WAIT may be out ahead of this one's
     * writes (dlock__lanes_wait): up to one more WAIT timeout. */
    if (k->wait)
        k->deadline += cmds[0].wait_timeout_ms * (k->set != NULL ? 2 : 1);
    if (fixed && dlock__call_same_server(k)) {
        for (j = 0; j < n; j++)
            k->cl[j].state = C_DONE;
        dlock__call_finish(k);
        return DLOCK_OK;
    }
    calls_init(k, cmds);
    advance(k);
    if (!busy(k))
        dlock__call_finish(k);
    return DLOCK_OK;
}

/* See call.h. */
int dlock__call_process(dlock__call *k, const struct pollfd *pfd, int n)
{
    int i;
    if (k->done)
        return 1;
    for (i = 0; i < n && i < k->npidx; i++) {
        char err[DLOCK__ERRLEN];
        int l = k->pidx[i], rc;
        if (l == -1 - k->m && k->refresh != NULL)
            dlock__call_refresh_step(k, pfd[i].revents);
        else if (l < 0 && l > -1 - k->m && k->cl[-1 - l].state == C_OPENING)
            open_step(k, -1 - l, pfd[i].revents);
        if (pfd[i].revents == 0 || l < 0 || k->ln[l].conn == NULL)
            continue;
        rc = dlock__conn_progress(k->ln[l].conn, pfd[i].revents, err,
                                  sizeof err);
        if (rc != DLOCK_OK)
            dlock__lane_fail(k, l, rc, err);
    }
    k->npidx = 0;
    /* An open whose clock is due steps without its descriptor: a
     * locate's wait, or the open's own deadline before the call's (its
     * message: one server's or Sentinel's open says why it failed as the
     * blocking open did; a Redlock node still connecting at the call's
     * deadline is "no answer in time (connecting)", abandon.c). */
    for (i = 0; i < k->m; i++) {
        int64_t wake;
        if (k->cl[i].state != C_OPENING)
            continue;
        wake = dlock__node_opening_wake(k->cl[i].open);
        if (dlock__now_ms() >= wake &&
            (wake < k->deadline || k->ns->n == 1 || !k->fixed))
            open_step(k, i, 0);
    }
    if (k->refresh != NULL) {
        int fd;
        short ev;
        int64_t wake;
        dlock__cluster_refresh_poll(k->refresh, &fd, &ev, &wake);
        if (dlock__now_ms() >= wake)
            dlock__call_refresh_step(k, 0);
    }
    advance(k);
    if (busy(k) && !dlock__call_enough(k)) {
        if (dlock__now_ms() < k->deadline)
            return 0;
        dlock__call_expire(k);
    }
    dlock__call_finish(k);
    return 1;
}
