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
 * stopped, a whole WAIT timeout each). That sharing is io/pipe.c's, the
 * command connection's pipe; on several servers, Sentinel or Cluster the
 * engine's calls send their WAIT through its lane set, whose lanes are
 * pipes too (engine/lanes.c).
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

/* See loop_impl.h. The WAIT's sharing is the command connection's pipe
 * (io/pipe.h): each requester is a stub (an lreq with fn and ctx only)
 * that it answers. */
void dloop__send_wait(dlock_loop *l, lreq_fn fn, void *ctx, lreq **out)
{
    lreq *st = NULL;
    int rc = DLOCK_EIO;
    if (out != NULL)
        *out = NULL;
    if (l->cmd.p.conn == NULL) { /* the connection its writes went on */
        fn(l, ctx, rc, NULL, "the connection closed before it", 0);
        return;
    }
    st = calloc(1, sizeof *st);
    if (st != NULL) {
        st->fn = fn;
        st->ctx = ctx;
        st->script = -1;
        rc = dlock__pipe_wait(&l->cmd.p, st, 1, l->c->ns.wait_replicas,
                              l->c->ns.wait_timeout_ms,
                              dlock__now_ms() + l->c->opts.command_timeout_ms +
                                  l->c->ns.wait_timeout_ms);
    }
    if (st == NULL || rc == DLOCK_ENOMEM) {
        /* A WAIT may be written without its place in the pipe: the
         * connection is out of step, so it fails (as a request that
         * could not be queued fails it: lconn.c). */
        if (st != NULL)
            dlock__pipe_unwait(&l->cmd.p, st, 1);
        free(st);
        dloop__cmd_fail(l, DLOCK_ENOMEM, "out of memory");
        fn(l, ctx, DLOCK_ENOMEM, NULL, "out of memory", 0);
        return;
    }
    dloop__conns_update(l);
    if (out != NULL)
        *out = st;
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
void dloop__op_acks(dlock_op *op,
                    void (*then)(dlock_op *op, int rc, const char *msg))
{
    op->acked = then;
    op->acking = 1;
    dloop__send_wait(op->loop, op_acked, op, &op->req);
}
