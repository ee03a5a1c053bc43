/*
 * op_words.c - a single-server loop's acquire (ops.c) read and worded by
 * hold's code, not a copy of it: the record and want its attempt asks
 * with (the kinds' table), a kind's refusal (kind.h: dlock__refusal), a
 * name whose key holds something else (kind.lua, dlock__kind_answer),
 * the lock-delay's message (withdraw.h), a grant too late (attempt.h).
 * Each message goes to the op's own (dlock__msgs_capture), never the
 * thread's. Sits on loop.c and lconn.c; ops.c on it.
 */
#include <string.h>

#include "hold/attempt.h"
#include "hold/kind.h"
#include "hold/withdraw.h"
#include "loop/loop_impl.h"

/* See loop_impl.h. */
void dloop__attempt_spec(const dlock_op *op, dlock__held *rec, dlock__want *w)
{
    const dlock_hold *h = op->hold;
    memset(w, 0, sizeof *w);
    w->kind = h->k.kind;
    w->lease_ms = h->lease_ms;
    w->limit = h->limit;
    w->ignore_mark = h->ignore_mark;
    w->token_now = !h->lazy; /* else kind.h may send the plain SET */
    memset(rec, 0, sizeof *rec);
    rec->k = h->k;
    memcpy(rec->owner, h->owner, sizeof rec->owner);
}

/* See loop_impl.h. */
int dloop__op_refused(dlock_op *op, const dlock__result *res)
{
    dlock__held rec;
    dlock__want w;
    char *prev;
    const char *other;
    long long limit;
    int rc;
    if (dlock__refused(res->reply, &limit, &other) == 0)
        return 0; /* the common case: no record built */
    dloop__attempt_spec(op, &rec, &w);
    prev = dlock__msgs_capture(op->err); /* the op's message, not the
                                          * thread's */
    rc = dlock__refusal(op->loop->c, &rec, &w, res);
    dlock__msgs_capture(prev);
    if (rc == DLOCK_OK)
        return 0;
    dloop__complete(op, rc, NULL);
    return 1;
}

/* kind.lua's answer for op's lock (its acquire met WRONGTYPE): complete
 * with the blocking API's words for what the name is (kind.h). */
static void kind_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                       const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock__result res;
    char *prev;
    (void)l;
    (void)err;
    (void)sent;
    op->req = NULL;
    res.status = rc;
    res.reply = (redisReply *)r; /* read only */
    res.sent = 1;
    res.pending = 0;
    prev = dlock__msgs_capture(op->err); /* the op's, not the thread's */
    rc = dlock__kind_answer(op->loop->c, op->hold->k.name, &res, 1);
    dlock__msgs_capture(prev);
    dloop__complete(op, rc, NULL);
}

/* See loop_impl.h. */
int dloop__op_wrongtype(dlock_op *op, int rc, const char *err)
{
    dlock__cmdbuf b;
    if (rc != DLOCK_ESERVER || op->hold->k.kind != DLOCK__KIND_LOCK ||
        strstr(err, "WRONGTYPE") == NULL)
        return 0;
    op->maybe = 0;
    dlock__kind_cmd(&b, &op->hold->k);
    return dloop__send_cmd(op->loop, &b.cmd, kind_reply, op, &op->req) ==
           DLOCK_OK;
}

/* See loop_impl.h. */
void dloop__delay_words(dlock_op *op, int64_t left_ms)
{
    dlock__held rec;
    dlock__want w;
    char *prev;
    dloop__attempt_spec(op, &rec, &w);
    prev = dlock__msgs_capture(op->err); /* the op's, not the thread's */
    (void)dlock__lock_delay_error(op->loop->c, &rec, left_ms);
    dlock__msgs_capture(prev);
}

/* See loop_impl.h. */
void dloop__too_late_words(dlock_op *op, int64_t took_ms)
{
    char *prev = dlock__msgs_capture(op->err); /* the op's */
    (void)dlock__too_late_error(op->loop->c, op->hold->k.name,
                                op->hold->lease_ms, took_ms);
    dlock__msgs_capture(prev);
}
