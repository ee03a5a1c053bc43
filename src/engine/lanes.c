/*
 * lanes.c - the lane set (lanes.h): per node one pipelined connection
 * that the calls of one driver share. A set's lane is an io/pipe.h
 * pipe; a call's lane on a set is a view of it (call.c's lane with sh
 * set): its expected replies are also entries of the pipe, tagged with
 * the call and the call's lane, in the order written; the set reads and
 * hands each reply to its call (k->take). A view detached with replies
 * still expected leaves them dropped (read and freed when they come; a
 * script sent by SHA that comes back NOSCRIPT is resent with its source
 * when it was given up on with its EVAL form). A set lane that fails is
 * closed and every call on it is lost (call.c retries it once, on a new
 * lane). A node's address that
 * moved (Sentinel, a master suspected) retires its lane: drained, then
 * closed, and the next call opens a new one (locating the master).
 * A lane whose oldest unanswered request was given up on and is still
 * unanswered at twice its call's time (a server stopped, a partition)
 * is quiet: calls to its node fail at once, nothing more is written on
 * it, until its answers come (or the kernel fails the connection). It
 * is not closed and replaced: what it carries (a give-back, a cancelled
 * extend) must reach Redis before anything the hold sends next.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "engine/lanes.h"
#include "engine/machine.h"
#include "engine/script.h"

/* The least time a request is given, for its lane's quiet test. */
#define QUIET_MIN_MS 500

static _Thread_local dlock__lanes_ctx current;

/* See lanes.h. */
int dlock__lanes_new(dlock__lanes **out, dlock__nodeset *ns)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return DLOCK_ENOMEM;
    (*out)->ns = ns;
    return DLOCK_OK;
}

/* See machine.h. Here, as the set frees its spare calls (abandon.c's
 * dlock__call_free keeps them). */
void dlock__call_drop(dlock__call *k)
{
    int l;
    for (l = 0; l < k->nl; l++)
        free(k->ln[l].q);
    free(k->ln);
    free(k->pidx);
    free(k->cl);
    free(k);
}

/* See lanes.h. */
void dlock__lanes_free(dlock__lanes *s)
{
    int i;
    if (s == NULL)
        return;
    while (s->spare != NULL) {
        dlock__call *k = s->spare;
        s->spare = k->next_spare;
        dlock__call_drop(k);
    }
    for (i = 0; i < s->nl; i++) {
        if (s->ln[i].sp != NULL)
            dlock__pipe_close(&s->ln[i].sp->p);
        free(s->ln[i].sp);
    }
    free(s->ln);
    free(s->sn);
    free(s->tags);
    free(s->pidx);
    free(s);
}

/* See lanes.h. */
dlock__lanes_ctx dlock__lanes_enter(dlock__lanes *s, void *tag)
{
    dlock__lanes_ctx prev = current;
    current = (dlock__lanes_ctx){s, tag};
    return prev;
}

/* See lanes.h. */
void dlock__lanes_leave(dlock__lanes_ctx prev)
{
    current = prev;
}

/* See machine.h. */
dlock__lanes *dlock__lanes_current(void **tag)
{
    *tag = current.tag;
    return current.s;
}

/* Note that k got something (its tag, for dlock__lanes_take). */
static void note(dlock__lanes *s, const dlock__call *k)
{
    s->kicked = 1;
    if (k->tag == NULL) {
        s->all = 1; /* no name for its driver: every call goes */
        return;
    }
    if (s->ntags > 0 && s->tags[s->ntags - 1] == k->tag)
        return; /* the same driver again */
    if (s->ntags == s->captags) {
        int cap = s->captags ? 2 * s->captags : 64;
        void **p = realloc(s->tags, (size_t)cap * sizeof *p);
        if (p == NULL) {
            s->all = 1; /* every call goes: none is missed */
            return;
        }
        s->tags = p;
        s->captags = cap;
    }
    s->tags[s->ntags++] = k->tag;
}

/* See lanes.h. */
int dlock__lanes_take(dlock__lanes *s, void (*fn)(void *tag, void *ud),
                      void *ud)
{
    int i, all = s->all;
    for (i = 0; i < s->ntags; i++)
        if (s->tags[i] != NULL)
            fn(s->tags[i], ud);
    s->ntags = 0;
    s->all = 0;
    return all;
}

/* See lanes.h. */
void dlock__lanes_untag(dlock__lanes *s, void *tag)
{
    int i;
    for (i = 0; i < s->ntags; i++)
        if (s->tags[i] == tag)
            s->tags[i] = NULL;
}

/* See lanes.h. */
int dlock__lanes_kicked(dlock__lanes *s)
{
    int k = s->kicked;
    s->kicked = 0;
    return k;
}

/* See lanes.h. */
int dlock__lanes_open(const dlock__lanes *s)
{
    int i, n = 0;
    for (i = 0; i < s->nl; i++)
        n += dlock__lanes_conn(s, i) != NULL;
    return n;
}

/* What the set knows of nd's opens (added when new); NULL out of
 * memory. */
static snode *node_of(dlock__lanes *s, dlock__node *nd)
{
    snode *p;
    int i;
    for (i = 0; i < s->nsn; i++)
        if (s->sn[i].nd == nd)
            return &s->sn[i];
    p = realloc(s->sn, (size_t)(s->nsn + 1) * sizeof *p);
    if (p == NULL)
        return NULL;
    s->sn = p;
    memset(&p[s->nsn], 0, sizeof *p);
    p[s->nsn].nd = nd;
    return &p[s->nsn++];
}

/* The set's live lane to nd, or -1. One whose node's address moved is
 * retired first, and so is one of a node suspected to have moved (a
 * Sentinel master that failed a request: its next open locates it) with
 * no reply to come: one still carrying requests keeps them in order with
 * what follows (a request given up on must reach Redis before what goes
 * next, say an extend cancelled and the renewal after it). */
static int live_lane(dlock__lanes *s, dlock__node *nd)
{
    int i;
    for (i = 0; i < s->nl; i++) {
        slane *sl = &s->ln[i];
        dlock__pipe *p = sl->sp != NULL ? &sl->sp->p : NULL;
        if (p == NULL || p->conn == NULL || sl->retired || sl->nd != nd)
            continue;
        if ((atomic_load(&nd->stale) && dlock__pipe_idle(p)) ||
            strcmp(dlock__conn_peer(p->conn), dlock__node_name(nd)) != 0) {
            sl->retired = 1;
            if (dlock__pipe_idle(p)) /* nothing to drain */
                dlock__pipe_close(p);
            continue;
        }
        return i;
    }
    return -1;
}

/* When a request sent now for a call due at deadline, unanswered then
 * and given up on, says its node has gone quiet. */
static int64_t quiet_at(int64_t deadline)
{
    int64_t now = dlock__now_ms(), span = deadline - now;
    return now + 2 * (span > QUIET_MIN_MS ? span : QUIET_MIN_MS);
}

/* See machine.h. */
int dlock__lanes_find(dlock__call *k, int j, dlock__node *nd, int *sh)
{
    ecall *c = &k->cl[j];
    snode *sn = node_of(k->set, nd);
    *sh = live_lane(k->set, nd);
    if (*sh >= 0 &&
        dlock__pipe_orphan_due(&k->set->ln[*sh].sp->p, dlock__now_ms())) {
        c->waiting = 0;
        snprintf(k->res[j].err, sizeof k->res[j].err,
                 "%s: no answer in time (its earlier requests are still "
                 "unanswered)",
                 dlock__node_name(nd));
        *sh = -1;
        return DLOCK_ETIMEDOUT;
    }
    if (*sh >= 0 || sn == NULL) {
        c->waiting = 0;
        return *sh >= 0 ? DLOCK_OK : DLOCK__LANE_NONE;
    }
    if (c->waiting && sn->gen != c->wgen) {
        /* The open it waited for failed: so does it, as that one did. */
        c->waiting = 0;
        snprintf(k->res[j].err, sizeof k->res[j].err, "%s", sn->err);
        return sn->rc;
    }
    if (sn->opening > 0) {
        if (!c->waiting)
            c->wgen = sn->gen;
        c->waiting = 1;
        return DLOCK__OPEN_AGAIN;
    }
    c->waiting = 0;
    return DLOCK__LANE_NONE;
}

/* See machine.h. */
void dlock__lanes_opening(dlock__call *k, dlock__node *nd, int delta, int rc,
                          const char *err)
{
    snode *sn = node_of(k->set, nd);
    if (sn == NULL)
        return;
    sn->opening += delta;
    if (delta < 0 && rc != DLOCK_OK) {
        sn->gen++;
        sn->rc = rc;
        snprintf(sn->err, sizeof sn->err, "%s", err);
    }
    if (delta < 0) /* the calls waiting for it go on */
        k->set->kicked = k->set->all = 1;
}

/* The pipe's words to the set (pipe.h: dlock__pipe_ops; ud: the set
 * lane's spipe). */

/* A reply to call who's lane a. */
static void set_take(void *ud, const dlock__pentry *e, redisReply *rep)
{
    dlock__call *k = e->who;
    note(((spipe *)ud)->s, k);
    k->take(k, e->a, rep);
}

/* The shared WAIT answered lane a of call who: its own copy (freed by
 * freeReplyObject, as hiredis's), its count or NIL (no count). */
static void set_acked(void *ud, const dlock__pwaiter *w, const redisReply *rep)
{
    dlock__call *k = w->who;
    redisReply *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->type = rep->type == REDIS_REPLY_INTEGER ? REDIS_REPLY_INTEGER
                                                   : REDIS_REPLY_NIL;
        r->integer = rep->integer;
    }
    note(((spipe *)ud)->s, k);
    if (r != NULL)
        k->acked(k, w->a, r);
    else
        k->lost(k, w->a, DLOCK_ENOMEM, "out of memory");
}

/* The set lane failed: lane a of call who, when still on it, is lost. */
static void set_lost(void *ud, void *who, int a, int rc, const char *err)
{
    spipe *sp = ud;
    dlock__call *k = who;
    if (k->ln[a].conn != NULL && k->ln[a].sh == sp->sh) {
        note(sp->s, k);
        k->lost(k, a, rc, err);
    }
}

/* A shared WAIT written: one more request. */
static void set_waited(void *ud)
{
    atomic_fetch_add(&((spipe *)ud)->s->ns->stats->requests, 1);
}

static const dlock__pipe_ops set_ops = {set_take, set_acked, set_lost,
                                        set_waited};

/* See machine.h. */
int dlock__lanes_install(dlock__call *k, dlock__node *nd, dlock__conn *conn,
                         int *took)
{
    dlock__lanes *s = k->set;
    int i = live_lane(s, nd);
    *took = 0;
    if (i >= 0) {
        dlock__node_give(k->ns, nd, conn, 1);
        return i;
    }
    for (i = 0; i < s->nl && dlock__lanes_conn(s, i) != NULL; i++)
        ;
    if (i == s->nl) {
        slane *p = realloc(s->ln, (size_t)(s->nl + 1) * sizeof *p);
        if (p == NULL) {
            dlock__node_give(k->ns, nd, conn, 1);
            return -1;
        }
        s->ln = p;
        memset(&p[s->nl++], 0, sizeof *p);
    }
    if (s->ln[i].sp == NULL &&
        (s->ln[i].sp = calloc(1, sizeof *s->ln[i].sp)) == NULL) {
        dlock__node_give(k->ns, nd, conn, 1);
        return -1;
    }
    s->ln[i].nd = nd;
    s->ln[i].retired = 0;
    s->ln[i].sp->s = s;
    s->ln[i].sp->sh = i;
    dlock__pipe_init(&s->ln[i].sp->p, conn, &set_ops, s->ln[i].sp);
    s->ln[i].sp->p.resend_ms = 2 * QUIET_MIN_MS;
    s->kicked = s->all = 1; /* the calls waiting for a lane to nd go on */
    *took = 1;
    return i;
}

/* See machine.h. */
int dlock__lanes_push(dlock__call *k, int l, int kind, int j, int *pos)
{
    return dlock__pipe_push(&k->set->ln[k->ln[l].sh].sp->p,
                            (dlock__pentry){.who = k,
                                            .a = l,
                                            .b = j,
                                            .kind = kind,
                                            .due = quiet_at(k->deadline)},
                            pos);
}

/* Call j's request in its EVAL form, packed (dlock__pipe_pack); NULL out
 * of memory. */
static char *eval_pack(const dlock__call *k, int j)
{
    const dlock__cmd *cmd = k->cl[j].cmd;
    const char *src =
        cmd->raw || k->cl[j].full ? NULL : k->scripts[cmd->script].src;
    dlock__callv v;
    char *p = NULL;
    if (dlock__callv_build(&v, k->scripts, cmd, k->cl[j].full) == DLOCK_OK)
        p = dlock__pipe_pack(src, v.argc, v.argv, v.lens);
    dlock__callv_free(&v);
    return p;
}

/* The entries of k's lane l on its set lane become dropped, with EVAL
 * forms as dlock__lanes_abandon says (keep: -2 none): those its own
 * queue still expects, at the places they were put (a place read or
 * emptied since is not its entry any more). */
static void drop(dlock__call *k, int l, int keep)
{
    dlock__pipe *p = &k->set->ln[k->ln[l].sh].sp->p;
    const lane *ln = &k->ln[l];
    int i;
    dlock__pipe_unwait(p, k, l);
    for (i = ln->qhead; i < ln->qlen; i++) {
        dlock__pentry *e = dlock__pipe_at(p, ln->q[i].spos);
        ecall *c;
        if (e == NULL || e->who != k || e->a != l)
            continue;
        c = e->kind == E_SCRIPT ? &k->cl[e->b] : NULL;
        if (c != NULL && !c->full &&
            (e->b == keep || (keep == -1 && c->cmd->give_back)))
            e->resend = eval_pack(k, e->b);
        e->who = NULL;
    }
}

/* See machine.h. */
void dlock__lanes_detach(dlock__call *k, int l)
{
    if ((k->ln[l].qhead < k->ln[l].qlen || k->ln[l].wpend > 0) &&
        dlock__lanes_conn(k->set, k->ln[l].sh) != NULL)
        drop(k, l, -2);
    k->ln[l].qhead = k->ln[l].qlen = 0;
    k->ln[l].dirty = k->ln[l].wpend = 0; /* its WAITs forgotten by drop */
}

/* See machine.h. */
void dlock__lanes_abandon(dlock__call *k, int l, int j)
{
    drop(k, l, j);
    dlock__lane_release(k, l, 1);
}

/* See machine.h. */
dlock__pipe *dlock__lanes_pipe(dlock__call *k, int l)
{
    return k->ln[l].sh >= 0 ? &k->set->ln[k->ln[l].sh].sp->p : NULL;
}

/* See machine.h. */
dlock__conn *dlock__lanes_conn(const dlock__lanes *s, int sh)
{
    return s->ln[sh].sp != NULL ? s->ln[sh].sp->p.conn : NULL;
}

/* See machine.h. */
void dlock__lanes_fail(dlock__lanes *s, int sh, int rc, const char *err)
{
    s->kicked = 1;
    dlock__pipe_fail(&s->ln[sh].sp->p, rc, err);
}

/* See machine.h. */
int dlock__lanes_wait(dlock__call *k, int l)
{
    int rc = dlock__pipe_wait(&k->set->ln[k->ln[l].sh].sp->p, k, l,
                              k->wcmd->wait_replicas, k->wcmd->wait_timeout_ms,
                              quiet_at(k->deadline));
    if (rc == DLOCK__PIPE_WAITING)
        return DLOCK_OK; /* its writes go before the next one too */
    if (rc != DLOCK_ENOMEM)
        k->ln[l].wpend++;
    return rc;
}

/* See machine.h. */
void dlock__lanes_collect(dlock__lanes *s, int sh)
{
    char err[DLOCK__ERRLEN];
    int rc = dlock__pipe_collect(&s->ln[sh].sp->p, err, sizeof err);
    dlock__pipe *p = &s->ln[sh].sp->p;
    if (rc != DLOCK_OK) {
        dlock__lanes_fail(s, sh, rc, err);
        return;
    }
    if (p->conn != NULL && s->ln[sh].retired && dlock__pipe_idle(p))
        dlock__pipe_close(p); /* drained */
}

/* See lanes.h. */
int dlock__lanes_pollfds(dlock__lanes *s, struct pollfd *pfd, int max)
{
    int i, n = 0;
    if (s->pcap < s->nl) {
        int *p = realloc(s->pidx, (size_t)s->nl * sizeof *p);
        if (p == NULL)
            return 0; /* the calls' deadlines still end them */
        s->pidx = p;
        s->pcap = s->nl;
    }
    for (i = 0; i < s->nl; i++) {
        dlock__conn *conn = dlock__lanes_conn(s, i);
        if (conn == NULL)
            continue;
        if (n < max)
            pfd[n] = (struct pollfd){.fd = dlock__conn_fd(conn),
                                     .events = dlock__conn_events(conn)};
        s->pidx[n++] = i;
    }
    s->npidx = n;
    return n;
}

/* See lanes.h. */
void dlock__lanes_process(dlock__lanes *s, const struct pollfd *pfd, int n)
{
    int i;
    for (i = 0; i < n && i < s->npidx; i++) {
        char err[DLOCK__ERRLEN];
        int sh = s->pidx[i], rc;
        dlock__conn *conn = dlock__lanes_conn(s, sh);
        if (pfd[i].revents == 0 || conn == NULL)
            continue;
        rc = dlock__conn_progress(conn, pfd[i].revents, err, sizeof err);
        if (rc != DLOCK_OK)
            dlock__lanes_fail(s, sh, rc, err);
    }
    s->npidx = 0;
    for (i = 0; i < s->nl; i++)
        if (dlock__lanes_conn(s, i) != NULL)
            dlock__lanes_collect(s, i);
}

/* See lanes.h. */
void dlock__lanes_flush(dlock__lanes *s)
{
    int i;
    for (i = 0; s != NULL && i < s->nl; i++) {
        char err[DLOCK__ERRLEN];
        dlock__conn *conn = dlock__lanes_conn(s, i);
        int rc;
        if (conn == NULL || !(dlock__conn_events(conn) & POLLOUT))
            continue;
        rc = dlock__conn_progress(conn, POLLOUT, err, sizeof err);
        if (rc != DLOCK_OK)
            dlock__lanes_fail(s, i, rc, err);
    }
}
