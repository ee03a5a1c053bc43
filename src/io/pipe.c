/*
 * pipe.c - one pipelined connection shared by many requesters (pipe.h).
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "io/pipe.h"

/* See pipe.h. */
void dlock__pipe_init(dlock__pipe *p, dlock__conn *conn,
                      const dlock__pipe_ops *ops, void *ud)
{
    memset(p, 0, sizeof *p);
    p->conn = conn;
    p->ops = ops;
    p->ud = ud;
}

/* See pipe.h. */
int dlock__pipe_push(dlock__pipe *p, dlock__pentry e, int *pos)
{
    dlock__pentry *q;
    if (p->qhead > 0 && p->qhead == p->qlen)
        p->qhead = p->qlen = 0;
    q = dlock__room(p->q, &p->qcap, p->qlen, sizeof *q, 16);
    if (q == NULL)
        return DLOCK_ENOMEM;
    p->q = q;
    if (pos != NULL)
        *pos = p->qlen;
    e.seq = ++p->nseq;
    p->q[p->qlen++] = e;
    return DLOCK_OK;
}

/* See pipe.h. */
dlock__pentry *dlock__pipe_at(dlock__pipe *p, int pos)
{
    return pos >= p->qhead && pos < p->qlen ? &p->q[pos] : NULL;
}

/* See pipe.h. */
int dlock__pipe_idle(const dlock__pipe *p)
{
    return p->qhead >= p->qlen && p->npw == 0;
}

/* See pipe.h. */
int dlock__pipe_orphan_due(const dlock__pipe *p, int64_t now)
{
    const dlock__pentry *e = &p->q[p->qhead];
    int i;
    if (p->qhead >= p->qlen || e->who != NULL)
        return 0;
    for (i = 0; e->kind == DLOCK__PE_WAIT && i < p->nwo; i++)
        if (p->wo[i].who != NULL)
            return 0;
    return now >= e->due;
}

/* See pipe.h. */
void dlock__pipe_sourced(dlock__pipe *p, int s)
{
    p->src_at[s] = p->nseq + 1; /* the next entry's */
}

/* See pipe.h. */
int dlock__pipe_has_source(const dlock__pipe *p, int s)
{
    return p->src_at[s] != 0;
}

/* See pipe.h. */
int dlock__pipe_noscript(dlock__pipe *p, int s, int again)
{
    if (p->src_at[s] > p->taking && !again)
        return 1; /* written after the request answered now */
    dlock__pipe_sourced(p, s);
    return 0;
}

/* Write one WAIT for the requesters waiting for it. DLOCK_OK or
 * DLOCK_ENOMEM. */
static int wait_write(dlock__pipe *p)
{
    char n[24], t[24];
    const char *wv[3] = {"WAIT", n, t};
    int i, rc, live = 0;
    for (i = 0; i < p->npw; i++)
        live += p->pw[i].who != NULL;
    if (!live) { /* every one gone */
        p->npw = 0;
        return DLOCK_OK;
    }
    dlock__fmt_i64(n, p->wait_n);
    dlock__fmt_i64(t, p->wait_ms);
    rc = dlock__conn_append_argv(p->conn, 3, wv, NULL);
    if (rc == DLOCK_OK)
        rc = dlock__pipe_push(
            p, (dlock__pentry){.kind = DLOCK__PE_WAIT, .due = p->wait_due},
            NULL);
    if (rc != DLOCK_OK)
        return rc;
    if (p->ops->waited != NULL)
        p->ops->waited(p->ud);
    p->wo = p->pw; /* none out: wo was NULL */
    p->nwo = p->npw;
    p->pw = NULL;
    p->npw = p->cappw = 0;
    p->wait_out = 1;
    return DLOCK_OK;
}

/* See pipe.h. */
int dlock__pipe_wait(dlock__pipe *p, void *who, int a, int nrep, int64_t ms,
                     int64_t due)
{
    dlock__pwaiter *w;
    int i;
    for (i = 0; i < p->npw; i++)
        if (p->pw[i].who == who && p->pw[i].a == a)
            return DLOCK__PIPE_WAITING;
    w = dlock__room(p->pw, &p->cappw, p->npw, sizeof *w, 16);
    if (w == NULL)
        return DLOCK_ENOMEM;
    p->pw = w;
    p->pw[p->npw++] = (dlock__pwaiter){who, a};
    p->wait_n = nrep;
    p->wait_ms = ms;
    p->wait_due = due;
    return p->wait_out ? DLOCK_OK : wait_write(p);
}

/* who (a) leaves w[0..n). */
static void forget(dlock__pwaiter *w, int n, const void *who, int a)
{
    int i;
    for (i = 0; i < n; i++)
        if (w[i].who == who && w[i].a == a)
            w[i].who = NULL;
}

/* See pipe.h. */
void dlock__pipe_unwait(dlock__pipe *p, const void *who, int a)
{
    forget(p->wo, p->nwo, who, a);
    forget(p->pw, p->npw, who, a);
}

/* Write the packed request r on p, its answer dropped. */
static void resend(dlock__pipe *p, const char *r)
{
    const char *small[16], **argv = small, *src;
    size_t lsmall[16], *lens = lsmall;
    int argc, i;
    memcpy(&src, r, sizeof src);
    memcpy(&argc, r + sizeof src, sizeof(int));
    if (argc > 16) {
        argv = malloc((size_t)argc * sizeof *argv);
        lens = malloc((size_t)argc * sizeof *lens);
    }
    if (argv != NULL && lens != NULL) {
        for (r += sizeof src + sizeof(int), i = 0; i < argc; i++) {
            memcpy(&lens[i], r, sizeof(size_t));
            argv[i] = r + sizeof(size_t);
            r += sizeof(size_t) + lens[i];
        }
        if (src != NULL && argc >= 2) { /* EVALSHA sha: EVAL source */
            argv[0] = "EVAL";
            lens[0] = 4;
            argv[1] = src;
            lens[1] = strlen(src);
        }
        if (dlock__conn_append_argv(p->conn, argc, argv, lens) == DLOCK_OK)
            dlock__pipe_push(
                p, (dlock__pentry){.due = dlock__now_ms() + p->resend_ms},
                NULL);
    }
    if (argv != small)
        free(argv);
    if (lens != lsmall)
        free(lens);
}

/* See pipe.h. */
char *dlock__pipe_pack(const char *src, int argc, const char **argv,
                       const size_t *lens)
{
    size_t total = sizeof src + sizeof(int);
    char *r, *w;
    int i;
    for (i = 0; i < argc; i++)
        total += sizeof(size_t) + lens[i];
    r = malloc(total);
    if (r == NULL)
        return NULL;
    memcpy(r, &src, sizeof src);
    memcpy(r + sizeof src, &argc, sizeof(int));
    for (w = r + sizeof src + sizeof(int), i = 0; i < argc; i++) {
        memcpy(w, &lens[i], sizeof(size_t));
        memcpy(w + sizeof(size_t), argv[i], lens[i]);
        w += sizeof(size_t) + lens[i];
    }
    return r;
}

/* The shared WAIT answered rep (owned): each requester it answers that
 * is still there gets it (kept in wo meanwhile, so that one gone in an
 * earlier one's callback is skipped), then those that asked since get
 * the next WAIT. 0 when the pipe failed meanwhile. */
static int acked(dlock__pipe *p, redisReply *rep)
{
    char err[DLOCK__ERRLEN] = "out of memory";
    int i, rc;
    for (i = 0; p->wo != NULL && i < p->nwo; i++) {
        dlock__pwaiter t = p->wo[i];
        if (t.who == NULL)
            continue;
        p->wo[i].who = NULL;
        p->ops->acked(p->ud, &t, rep);
    }
    freeReplyObject(rep);
    if (p->conn == NULL)
        return 0;
    free(p->wo);
    p->wo = NULL;
    p->nwo = p->wait_out = 0;
    if (p->npw == 0)
        return 1;
    rc = wait_write(p);
    if (rc == DLOCK_OK)
        rc = dlock__conn_progress(p->conn, POLLOUT, err, sizeof err);
    if (rc != DLOCK_OK) {
        dlock__pipe_fail(p, rc, err);
        return 0;
    }
    return 1;
}

/* A dropped entry's reply rep (owned): one carrying a request is resent
 * with it when the reply is NOSCRIPT. */
static void dropped(dlock__pipe *p, dlock__pentry *e, redisReply *rep)
{
    if (e->resend != NULL && rep->type == REDIS_REPLY_ERROR &&
        strncmp(rep->str, "NOSCRIPT", 8) == 0)
        resend(p, e->resend);
    free(e->resend);
    freeReplyObject(rep);
}

/* See pipe.h. */
int dlock__pipe_collect(dlock__pipe *p, char *err, size_t errlen)
{
    while (p->conn != NULL && p->qhead < p->qlen) {
        redisReply *rep = NULL;
        dlock__pentry e;
        int got = dlock__conn_pop_reply(p->conn, &rep, err, errlen);
        if (got < 0)
            return got;
        if (got == 0)
            return DLOCK_OK;
        e = p->q[p->qhead++];
        if (e.kind == DLOCK__PE_WAIT) {
            if (!acked(p, rep))
                return DLOCK_OK;
        } else if (e.who == NULL) {
            dropped(p, &e, rep);
        } else {
            p->taking = e.seq;
            p->ops->take(p->ud, &e, rep);
        }
    }
    return DLOCK_OK;
}

/* Tell the requesters w[0..n) that the pipe failed. */
static void lose(dlock__pipe *p, const dlock__pwaiter *w, int n, int rc,
                 const char *err)
{
    int i;
    for (i = 0; i < n; i++)
        if (w[i].who != NULL)
            p->ops->lost(p->ud, w[i].who, w[i].a, rc, err);
}

/* See pipe.h. */
void dlock__pipe_fail(dlock__pipe *p, int rc, const char *err)
{
    dlock__pentry *q = p->q;
    dlock__pwaiter *pw = p->pw, *wo = p->wo;
    int i, n = p->qlen, h = p->qhead, npw = p->npw, nwo = p->nwo;
    int64_t grace = p->resend_ms;
    dlock__conn_close(p->conn);
    /* Blank first: the requesters told below see an empty pipe, and may
     * use it again. */
    dlock__pipe_init(p, NULL, p->ops, p->ud);
    p->resend_ms = grace;
    for (i = h; i < n; i++) {
        free(q[i].resend);
        if (q[i].kind != DLOCK__PE_WAIT)
            lose(p, &(dlock__pwaiter){q[i].who, q[i].a}, 1, rc, err);
    }
    lose(p, wo, nwo, rc, err);
    lose(p, pw, npw, rc, err);
    free(wo);
    free(pw);
    free(q);
}

/* See pipe.h. */
void dlock__pipe_close(dlock__pipe *p)
{
    int64_t grace = p->resend_ms;
    int i;
    for (i = p->qhead; i < p->qlen; i++)
        free(p->q[i].resend);
    dlock__conn_close(p->conn);
    free(p->q);
    free(p->wo);
    free(p->pw);
    dlock__pipe_init(p, NULL, p->ops, p->ud);
    p->resend_ms = grace;
}
