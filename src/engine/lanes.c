/*
 * lanes.c - the lane set (lanes.h): per node one pipelined connection
 * that the calls of one driver share. A call's lane on a set is a view
 * (call.c's lane with sh set): its expected replies are also queued on
 * the set's lane, tagged with the call and the call's lane, in the order
 * written; the set reads and hands each reply to its call (k->take). A view
 * detached with replies still expected leaves them marked dropped (read
 * and freed when they come; a script sent by SHA that comes back
 * NOSCRIPT is resent with its source when it was given up on with its
 * EVAL form). A set lane that fails is closed and every call on it is
 * lost (call.c retries it once, on a new lane). A node's address that
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

/* Free the EVAL forms still kept by sl's dropped replies; empty its
 * queue. */
static void q_clear(slane *sl)
{
    int i;
    for (i = sl->qhead; i < sl->qlen; i++)
        free(sl->q[i].eval);
    sl->qhead = sl->qlen = 0;
    free(sl->wo);
    sl->wo = NULL;
    sl->nwo = sl->npw = sl->wait_out = 0;
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
        q_clear(&s->ln[i]);
        dlock__conn_close(s->ln[i].conn);
        free(s->ln[i].q);
        free(s->ln[i].pw);
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
        n += s->ln[i].conn != NULL;
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
        if (sl->conn == NULL || sl->retired || sl->nd != nd)
            continue;
        if ((atomic_load(&nd->stale) && sl->qhead >= sl->qlen) ||
            strcmp(dlock__conn_peer(sl->conn), dlock__node_name(nd)) != 0) {
            sl->retired = 1;
            if (sl->qhead >= sl->qlen) { /* nothing to drain */
                dlock__conn_close(sl->conn);
                sl->conn = NULL;
            }
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

/* Whether sl is quiet (see the top of this file): its oldest entry
 * dropped (the set's WAIT: every lane it answers gone) past its time. */
static int quiet(const slane *sl)
{
    const sentry *e = &sl->q[sl->qhead];
    int i;
    if (sl->qhead >= sl->qlen || e->k != NULL)
        return 0;
    for (i = 0; e->kind == E_SWAIT && i < sl->nwo; i++)
        if (sl->wo[i].k != NULL)
            return 0;
    return dlock__now_ms() >= e->quiet_at;
}

/* See machine.h. */
int dlock__lanes_find(dlock__call *k, int j, dlock__node *nd, int *sh)
{
    ecall *c = &k->cl[j];
    snode *sn = node_of(k->set, nd);
    *sh = live_lane(k->set, nd);
    if (*sh >= 0 && quiet(&k->set->ln[*sh])) {
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
    for (i = 0; i < s->nl && s->ln[i].conn != NULL; i++)
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
    s->ln[i].nd = nd;
    s->ln[i].conn = conn;
    s->ln[i].retired = 0;
    s->ln[i].qhead = s->ln[i].qlen = 0;
    s->ln[i].npw = s->ln[i].nwo = s->ln[i].wait_out = 0;
    s->kicked = s->all = 1; /* the calls waiting for a lane to nd go on */
    *took = 1;
    return i;
}

/* Expect one more reply e on sl. DLOCK_OK or DLOCK_ENOMEM. */
static int q_add(slane *sl, sentry e)
{
    sentry *q;
    if (sl->qhead > 0 && sl->qhead == sl->qlen)
        sl->qhead = sl->qlen = 0;
    q = dlock__room(sl->q, &sl->qcap, sl->qlen, sizeof *q, 16);
    if (q == NULL)
        return DLOCK_ENOMEM;
    sl->q = q;
    sl->q[sl->qlen++] = e;
    return DLOCK_OK;
}

/* See machine.h. */
int dlock__lanes_push(dlock__call *k, int l, int kind, int j, int *pos)
{
    slane *sl = &k->set->ln[k->ln[l].sh];
    int rc = q_add(sl, (sentry){k, l, kind, j, NULL, quiet_at(k->deadline)});
    *pos = sl->qlen - 1;
    return rc;
}

/* Call j's request in its EVAL form, packed in one allocation: the
 * script's source (NULL: a plain command, or one sent with its source),
 * argc, then each argument's length and bytes of its form by SHA (the
 * source is put in its place when resent); NULL out of memory. */
static char *eval_pack(const dlock__call *k, int j)
{
    const dlock__cmd *cmd = k->cl[j].cmd;
    const char *src =
        cmd->raw || k->cl[j].full ? NULL : k->scripts[cmd->script].src;
    dlock__callv v;
    char *p = NULL, *w;
    size_t total = sizeof src + sizeof(int);
    int i;
    if (dlock__callv_build(&v, k->scripts, cmd, k->cl[j].full) == DLOCK_OK) {
        for (i = 0; i < v.argc; i++)
            total += sizeof(size_t) + v.lens[i];
        p = malloc(total);
    }
    if (p != NULL) {
        memcpy(p, &src, sizeof src);
        memcpy(p + sizeof src, &v.argc, sizeof(int));
        for (w = p + sizeof src + sizeof(int), i = 0; i < v.argc; i++) {
            memcpy(w, &v.lens[i], sizeof(size_t));
            memcpy(w + sizeof(size_t), v.argv[i], v.lens[i]);
            w += sizeof(size_t) + v.lens[i];
        }
    }
    dlock__callv_free(&v);
    return p;
}

/* Write the packed request p on sl, its answer dropped. */
static void eval_resend(slane *sl, const char *p)
{
    const char *small[16], **argv = small, *src;
    size_t lsmall[16], *lens = lsmall;
    int argc, i;
    memcpy(&src, p, sizeof src);
    memcpy(&argc, p + sizeof src, sizeof(int));
    if (argc > 16) {
        argv = malloc((size_t)argc * sizeof *argv);
        lens = malloc((size_t)argc * sizeof *lens);
    }
    if (argv != NULL && lens != NULL) {
        for (p += sizeof src + sizeof(int), i = 0; i < argc; i++) {
            memcpy(&lens[i], p, sizeof(size_t));
            argv[i] = p + sizeof(size_t);
            p += sizeof(size_t) + lens[i];
        }
        if (src != NULL && argc >= 2) { /* EVALSHA sha: EVAL source */
            argv[0] = "EVAL";
            lens[0] = 4;
            argv[1] = src;
            lens[1] = strlen(src);
        }
        if (dlock__conn_append_argv(sl->conn, argc, argv, lens) == DLOCK_OK)
            q_add(sl, (sentry){NULL, -1, E_SCRIPT, -1, NULL, quiet_at(0)});
    }
    if (argv != small)
        free(argv);
    if (lens != lsmall)
        free(lens);
}

/* Lane l of k waits no more in w[0..n). */
static void forget(swaiter *w, int n, const dlock__call *k, int l)
{
    int i;
    for (i = 0; i < n; i++)
        if (w[i].k == k && w[i].lane == l)
            w[i].k = NULL;
}

/* The entries of k's lane l on its set lane become dropped, with EVAL
 * forms as dlock__lanes_abandon says (keep: -2 none): those its own
 * queue still expects, at the places they were put (a place read or
 * emptied since is not its entry any more). */
static void drop(dlock__call *k, int l, int keep)
{
    slane *sl = &k->set->ln[k->ln[l].sh];
    const lane *ln = &k->ln[l];
    int i;
    forget(sl->wo, sl->nwo, k, l);
    forget(sl->pw, sl->npw, k, l);
    for (i = ln->qhead; i < ln->qlen; i++) {
        int at = ln->q[i].spos;
        sentry *e = at >= sl->qhead && at < sl->qlen ? &sl->q[at] : NULL;
        ecall *c;
        if (e == NULL || e->k != k || e->lane != l)
            continue;
        c = e->kind == E_SCRIPT ? &k->cl[e->call] : NULL;
        if (c != NULL && !c->full &&
            (e->call == keep || (keep == -1 && c->cmd->give_back)))
            e->eval = eval_pack(k, e->call);
        e->k = NULL;
    }
}

/* See machine.h. */
void dlock__lanes_detach(dlock__call *k, int l)
{
    if ((k->ln[l].qhead < k->ln[l].qlen || k->ln[l].wpend > 0) &&
        k->set->ln[k->ln[l].sh].conn != NULL)
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

/* The lanes w[0..n) still on set lane sh, which failed (rc, err), are
 * lost. */
static void lose(dlock__lanes *s, int sh, const swaiter *w, int n, int rc,
                 const char *err)
{
    int i;
    for (i = 0; i < n; i++) {
        dlock__call *k = w[i].k;
        if (k != NULL && k->ln[w[i].lane].conn != NULL &&
            k->ln[w[i].lane].sh == sh) {
            note(s, k);
            k->lost(k, w[i].lane, rc, err);
        }
    }
}

/* See machine.h. */
void dlock__lanes_fail(dlock__lanes *s, int sh, int rc, const char *err)
{
    slane *sl = &s->ln[sh];
    sentry *q = sl->q;
    int i, n = sl->qlen, h = sl->qhead;
    swaiter *pw = sl->pw, *wo = sl->wo;
    int npw = sl->npw, nwo = sl->nwo;
    dlock__conn_close(sl->conn);
    sl->conn = NULL;
    sl->q = NULL; /* the calls below see an empty lane */
    sl->qhead = sl->qlen = sl->qcap = 0;
    sl->pw = sl->wo = NULL;
    sl->npw = sl->cappw = sl->nwo = sl->wait_out = 0;
    s->kicked = 1;
    for (i = h; i < n; i++) {
        free(q[i].eval);
        lose(s, sh, &(swaiter){q[i].k, q[i].lane}, 1, rc, err);
    }
    lose(s, sh, wo, nwo, rc, err);
    lose(s, sh, pw, npw, rc, err);
    free(wo);
    free(pw);
    free(q);
}

/* A dropped reply rep (owned) of e: a give-back answered NOSCRIPT is
 * resent with its source. */
static void on_dropped(slane *sl, sentry *e, redisReply *rep)
{
    if (e->eval != NULL && rep->type == REDIS_REPLY_ERROR &&
        strncmp(rep->str, "NOSCRIPT", 8) == 0)
        eval_resend(sl, e->eval);
    free(e->eval);
    freeReplyObject(rep);
}

/* Write one WAIT on set lane sh for the lanes waiting for it (its
 * arguments those of their calls). DLOCK_OK or DLOCK_ENOMEM. */
static int wait_write(dlock__lanes *s, int sh)
{
    slane *sl = &s->ln[sh];
    const dlock__call *k = NULL;
    char n[24], t[24];
    const char *wv[3] = {"WAIT", n, t};
    int i, rc;
    for (i = 0; i < sl->npw && k == NULL; i++)
        k = sl->pw[i].k;
    if (k == NULL) { /* every one gone */
        sl->npw = 0;
        return DLOCK_OK;
    }
    dlock__fmt_i64(n, k->wcmd->wait_replicas);
    dlock__fmt_i64(t, k->wcmd->wait_timeout_ms);
    rc = dlock__conn_append_argv(sl->conn, 3, wv, NULL);
    if (rc == DLOCK_OK)
        rc = q_add(
            sl, (sentry){NULL, -1, E_SWAIT, -1, NULL, quiet_at(k->deadline)});
    if (rc != DLOCK_OK)
        return rc;
    atomic_fetch_add(&k->ns->stats->requests, 1);
    sl->wo = sl->pw; /* none out: wo was NULL */
    sl->nwo = sl->npw;
    sl->pw = NULL;
    sl->npw = sl->cappw = 0;
    sl->wait_out = 1;
    return DLOCK_OK;
}

/* See machine.h. */
int dlock__lanes_wait(dlock__call *k, int l)
{
    slane *sl = &k->set->ln[k->ln[l].sh];
    swaiter *p;
    int i;
    for (i = 0; i < sl->npw; i++)
        if (sl->pw[i].k == k && sl->pw[i].lane == l)
            return DLOCK_OK; /* its writes go before the next one too */
    p = dlock__room(sl->pw, &sl->cappw, sl->npw, sizeof *p, 16);
    if (p == NULL)
        return DLOCK_ENOMEM;
    sl->pw = p;
    sl->pw[sl->npw++] = (swaiter){k, l};
    k->ln[l].wpend++;
    return sl->wait_out ? DLOCK_OK : wait_write(k->set, k->ln[l].sh);
}

/* The set's WAIT on set lane sh answered rep (owned): each lane it
 * answers that is still there gets its answer (kept in wo meanwhile, so
 * that a lane released by an earlier one's callback is forgotten there),
 * then the lanes that asked since get the next WAIT. 0 when the set lane
 * failed meanwhile. */
static int acked(dlock__lanes *s, int sh, redisReply *rep)
{
    char err[DLOCK__ERRLEN] = "out of memory";
    int i, rc;
    for (i = 0; s->ln[sh].wo != NULL && i < s->ln[sh].nwo; i++) {
        swaiter t = s->ln[sh].wo[i];
        redisReply *r;
        if (t.k == NULL)
            continue;
        s->ln[sh].wo[i].k = NULL;
        r = calloc(1, sizeof *r); /* as hiredis's: freeReplyObject frees */
        if (r != NULL) {
            r->type = rep->type == REDIS_REPLY_INTEGER ? REDIS_REPLY_INTEGER
                                                       : REDIS_REPLY_NIL;
            r->integer = rep->integer; /* NIL: no count of replicas */
        }
        note(s, t.k);
        if (r != NULL)
            t.k->acked(t.k, t.lane, r);
        else
            t.k->lost(t.k, t.lane, DLOCK_ENOMEM, "out of memory");
    }
    freeReplyObject(rep);
    if (s->ln[sh].conn == NULL)
        return 0;
    free(s->ln[sh].wo);
    s->ln[sh].wo = NULL;
    s->ln[sh].nwo = s->ln[sh].wait_out = 0;
    if (s->ln[sh].npw == 0)
        return 1;
    rc = wait_write(s, sh);
    if (rc == DLOCK_OK)
        rc = dlock__conn_progress(s->ln[sh].conn, POLLOUT, err, sizeof err);
    if (rc != DLOCK_OK) {
        dlock__lanes_fail(s, sh, rc, err);
        return 0;
    }
    return 1;
}

/* See machine.h. */
void dlock__lanes_collect(dlock__lanes *s, int sh)
{
    while (s->ln[sh].conn != NULL && s->ln[sh].qhead < s->ln[sh].qlen) {
        char err[DLOCK__ERRLEN];
        redisReply *rep = NULL;
        slane *sl = &s->ln[sh];
        sentry e;
        int got = dlock__conn_pop_reply(sl->conn, &rep, err, sizeof err);
        if (got < 0) {
            dlock__lanes_fail(s, sh, got, err);
            return;
        }
        if (got == 0)
            return;
        e = sl->q[sl->qhead++];
        if (e.kind == E_SWAIT) {
            if (!acked(s, sh, rep))
                return;
            continue;
        }
        if (e.k == NULL) {
            on_dropped(sl, &e, rep);
            continue;
        }
        note(s, e.k);
        e.k->take(e.k, e.lane, rep);
    }
    if (s->ln[sh].conn != NULL && s->ln[sh].retired &&
        s->ln[sh].qhead >= s->ln[sh].qlen) {
        dlock__conn_close(s->ln[sh].conn); /* drained */
        s->ln[sh].conn = NULL;
    }
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
        if (s->ln[i].conn == NULL)
            continue;
        if (n < max)
            pfd[n] =
                (struct pollfd){.fd = dlock__conn_fd(s->ln[i].conn),
                                .events = dlock__conn_events(s->ln[i].conn)};
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
        if (pfd[i].revents == 0 || s->ln[sh].conn == NULL)
            continue;
        rc = dlock__conn_progress(s->ln[sh].conn, pfd[i].revents, err,
                                  sizeof err);
        if (rc != DLOCK_OK)
            dlock__lanes_fail(s, sh, rc, err);
    }
    s->npidx = 0;
    for (i = 0; i < s->nl; i++)
        if (s->ln[i].conn != NULL)
            dlock__lanes_collect(s, i);
}

/* See lanes.h. */
void dlock__lanes_flush(dlock__lanes *s)
{
    int i;
    for (i = 0; s != NULL && i < s->nl; i++) {
        char err[DLOCK__ERRLEN];
        int rc;
        if (s->ln[i].conn == NULL ||
            !(dlock__conn_events(s->ln[i].conn) & POLLOUT))
            continue;
        rc = dlock__conn_progress(s->ln[i].conn, POLLOUT, err, sizeof err);
        if (rc != DLOCK_OK)
            dlock__lanes_fail(s, i, rc, err);
    }
}
