/*
 * durable.c - the client's wait_replicas on a loop over one server
 * (dlock_options.wait_replicas): after a lock write of the loop is
 * answered (a grant, an extend, a renewal round, a downgrade, a fenced
 * set or read), WAIT wait_replicas wait_replicas_timeout_ms on the same
 * command connection counts the replicas that have every write sent on
 * it so far; fewer than asked make the write DLOCK_NOT_REPLICATED, as
 * the blocking API's. WAIT goes after the answer, not pipelined behind
 * the script: a NOSCRIPT answer sends a script again at the end of the
 * pipeline, which would put it after a WAIT already sent. On several
 * servers, Sentinel or Cluster the engine's calls send their own WAIT.
 */
#include <inttypes.h>
#include <stdio.h>

#include "loop/loop_impl.h"

/* See loop_impl.h. */
int dloop__durable(const dlock_loop *l)
{
    return !l->engine && l->c->ns.wait_replicas > 0;
}

/* See loop_impl.h. */
int dloop__send_wait(dlock_loop *l, lreq_fn fn, void *ctx, lreq **out)
{
    char n[24], t[24];
    const char *argv[3] = {"WAIT", n, t};
    size_t len[3] = {4, 0, 0};
    len[1] = dlock__fmt_i64(n, l->c->ns.wait_replicas);
    len[2] = dlock__fmt_i64(t, l->c->ns.wait_timeout_ms);
    return dloop__send_plain(l, 3, argv, len, fn, ctx, out);
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
