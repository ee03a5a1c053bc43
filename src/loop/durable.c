/*
 * durable.c - the client's wait_replicas on a loop over one server
 * (dlock_options.wait_replicas): after a lock write of the loop is
 * answered (a grant, an extend, a renewal round, a downgrade, a fenced
 * set or read), WAIT wait_replicas wait_replicas_timeout_ms on the same
 * command connection counts the replicas that have every write sent on
 * it so far; fewer than asked make the write DLOCK_NOT_REPLICATED, as
 * the blocking API's. WAIT goes after the answer, not pipelined behind
 * the script: a NOSCRIPT answer sends a script again at the end of the
 * pipeline, which would put it after a WAIT already sent. Redis holds a
 * connection up while a WAIT waits, so one WAIT is out at a time: the
 * writes answered meanwhile share the next, sent when it is answered (a
 * WAIT per write made each wait for every one ahead: with the replicas
 * stopped, a whole WAIT timeout each). On several servers, Sentinel or
 * Cluster the engine's calls send their WAIT through its lane set,
 * which shares them the same way (engine/lanes.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "loop/loop_impl.h"

/* See loop_impl.h. */
int dloop__durable(const dlock_loop *l)
{
    return !l->engine && l->c->ns.wait_replicas > 0;
}

/* The requesters of one WAIT out (stubs, owned). */
typedef struct wgroup {
    lreq **w;
    int n;
} wgroup;

static void group_acked(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent);

/* Send one WAIT for the stubs waiting for it (l->wnext). DLOCK_OK or
 * DLOCK_ENOMEM (nothing sent, the stubs still wait). */
static int wait_send(dlock_loop *l)
{
    char n[24], t[24];
    const char *argv[3] = {"WAIT", n, t};
    size_t len[3] = {4, 0, 0};
    wgroup *g = malloc(sizeof *g);
    int rc;
    if (g == NULL)
        return DLOCK_ENOMEM;
    g->w = l->wnext;
    g->n = l->nwnext;
    len[1] = dlock__fmt_i64(n, l->c->ns.wait_replicas);
    len[2] = dlock__fmt_i64(t, l->c->ns.wait_timeout_ms);
    l->wait_out = 1; /* its own deadline counts the WAIT timeout too */
    rc = dloop__send_plain(l, 3, argv, len, group_acked, g, NULL);
    if (rc != DLOCK_OK) {
        l->wait_out = 0;
        free(g);
        return rc;
    }
    l->wnext = NULL;
    l->nwnext = l->capwnext = 0;
    return DLOCK_OK;
}

/* End the stubs w[0..n) with (rc, r, err, sent) and free them. */
static void stubs_end(dlock_loop *l, lreq **w, int n, int rc,
                      const redisReply *r, const char *err, int sent)
{
    int i;
    for (i = 0; i < n; i++) {
        if (w[i]->fn != NULL)
            w[i]->fn(l, w[i]->ctx, rc, r, err, sent);
        free(w[i]);
    }
    free(w);
}

/* A WAIT's answer: to each of its requesters still there; then the next
 * WAIT for those who asked meanwhile (on a failure they fail with it:
 * their writes went on the connection that failed). */
static void group_acked(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent)
{
    wgroup *g = ctx;
    lreq **w;
    int n;
    stubs_end(l, g->w, g->n, rc, r, err, sent);
    free(g);
    l->wait_out = 0;
    if (l->nwnext == 0)
        return;
    if (rc == DLOCK_OK && wait_send(l) == DLOCK_OK)
        return;
    w = l->wnext, n = l->nwnext;
    l->wnext = NULL;
    l->nwnext = l->capwnext = 0;
    stubs_end(l, w, n, rc == DLOCK_OK ? DLOCK_ENOMEM : rc, NULL,
              rc == DLOCK_OK ? "out of memory" : err, sent);
}

/* See loop_impl.h. */
int dloop__send_wait(dlock_loop *l, lreq_fn fn, void *ctx, lreq **out)
{
    lreq *st, **p;
    p = dlock__room(l->wnext, &l->capwnext, l->nwnext, sizeof *p, 16);
    if (p == NULL)
        return DLOCK_ENOMEM;
    l->wnext = p;
    st = calloc(1, sizeof *st);
    if (st == NULL)
        return DLOCK_ENOMEM;
    st->fn = fn;
    st->ctx = ctx;
    st->script = -1;
    l->wnext[l->nwnext++] = st;
    if (!l->wait_out && wait_send(l) != DLOCK_OK) {
        l->nwnext--;
        free(st);
        return DLOCK_ENOMEM;
    }
    if (out != NULL)
        *out = st;
    return DLOCK_OK;
}

/* See loop_impl.h. */
int dloop__acks_rc(dlock_loop *l, int rc, const redisReply *r, const char *err,
                   const char *what, char *msg, size_t len)
{
    long long acks;
    if (rc != DLOCK_OK) {
        snprintf(msg, len, "%s%sWAIT: %s", what, what[0] != '\0' ? ": " : "",
                 err);
        return rc;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        snprintf(msg, len, "%s%sWAIT: a malformed reply", what,
                 what[0] != '\0' ? ": " : "");
        return DLOCK_EPROTO;
    }
    acks = r->integer;
    if (acks >= l->c->ns.wait_replicas)
        return DLOCK_OK;
    snprintf(msg, len,
             "%s%s%lld of the %d replicas asked for acknowledged it within "
             "%" PRId64 " ms",
             what, what[0] != '\0' ? ": " : "", acks, l->c->ns.wait_replicas,
             l->c->ns.wait_timeout_ms);
    return DLOCK_NOT_REPLICATED;
}

/* WAIT's answer for an op: its then() with the outcome. */
static void op_acked(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                     const char *err, int sent)
{
    dlock_op *op = ctx;
    void (*then)(dlock_op *, int, const char *) = op->acked;
    char msg[LOOP_ERRLEN];
    (void)sent;
    op->req = NULL;
    op->acking = 0;
    op->acked = NULL;
    rc = dloop__acks_rc(l, rc, r, err, op->hold != NULL ? op->hold->k.name : "",
                        msg, sizeof msg);
    then(op, rc, msg);
}

/* See loop_impl.h. */
int dloop__op_acks(dlock_op *op,
                   void (*then)(dlock_op *op, int rc, const char *msg))
{
    int rc;
    op->acked = then;
    op->acking = 1;
    rc = dloop__send_wait(op->loop, op_acked, op, &op->req);
    if (rc != DLOCK_OK) {
        op->acking = 0;
        op->acked = NULL;
    }
    return rc;
}
