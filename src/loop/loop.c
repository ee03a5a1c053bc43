/*
 * loop.c - the dlock_loop object's ground (include/dlock_loop.h): the
 * state every file of src/loop/ shares (loop_impl.h), the pools of
 * blocks, the "process has work" signal (the eventfd), the completion
 * queue, new operations, and what a program reads of an operation or a
 * hold that is only stored (its name, token, owner; query.c: its status
 * and validity). It calls no other file of src/loop/: what it needs from
 * the ones above (an op's end) goes through the loop's hooks, which
 * dlock_loop_new (drive.c) sets.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loop/loop_impl.h"

void *dloop__pool_get(lpool *p)
{
    void *b = p->free;
    if (b == NULL)
        return malloc(p->size);
    memcpy(&p->free, b, sizeof(void *));
    p->n--;
    return b;
}

void dloop__pool_put(lpool *p, void *b)
{
    if (p->n >= LPOOL_MAX) {
        free(b);
        return;
    }
    memcpy(b, &p->free, sizeof(void *));
    p->free = b;
    p->n++;
}

void dloop__signal(dlock_loop *l)
{
    uint64_t one = 1;
    if (l->signalled)
        return;
    l->signalled = 1;
    if (write(l->evfd, &one, sizeof one) < 0) {
        /* a full counter is still readable */
    }
}

void dloop__complete(dlock_op *op, int status, const char *fmt, ...)
{
    dlock_loop *l = op->loop;
    va_list ap;
    if (op->state == ST_DONE)
        return;
    if (fmt != NULL) { /* first: the arguments may name the hold */
        va_start(ap, fmt);
        if (strcmp(fmt, "%s") == 0) { /* a success's "": no formatting */
            const char *m = va_arg(ap, const char *);
            size_t n = strnlen(m, sizeof op->err - 1);
            memcpy(op->err, m, n);
            op->err[n] = '\0';
        } else {
            vsnprintf(op->err, sizeof op->err, fmt, ap);
        }
        va_end(ap);
    }
    op->status = status;
    l->op_end(op); /* its event; detaches its request, subscription, sleep */
    op->state = ST_DONE;
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        l->ops = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    op->dnext = NULL;
    if (l->dqt != NULL)
        l->dqt->dnext = op;
    else
        l->dq = op;
    l->dqt = op;
    if (!l->in_process)
        dloop__signal(l);
}

int dloop__hold_op(dlock_op **op, dlock_op **out, dlock_loop *l, dlock_hold *h,
                   int type, int ok, dlock_op_cb cb, void *ud, const char *what)
{
    *op = NULL;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (h == NULL || h->loop != l || !h->held || h->gone || cb == NULL || !ok)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "%s: no hold of this loop, no callback, or "
                                "a bad argument",
                                what);
    *op = dloop__op_new(l, type, cb, ud);
    if (*op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = *op;
    (*op)->hold = h;
    return DLOCK_OK;
}

/* See loop_impl.h. */
int dloop__hold_lost_done(dlock_op *op)
{
    if (op->hold->status == DLOCK_OK)
        return 0;
    dloop__complete(op, op->hold->status, "%s: the lease had been lost",
                    op->hold->k.name);
    return 1;
}

dlock_op *dloop__op_new(dlock_loop *l, int type, dlock_op_cb cb, void *ud)
{
    /* A leader look carries two dlock_leader_info (2 KB) after it; every
     * other op is a pool block. */
    size_t extra = type == OP_LEADER ? 2 * sizeof(dlock_leader_info) : 0;
    dlock_op *op =
        extra > 0 ? malloc(sizeof *op + extra) : dloop__pool_get(&l->op_pool);
    if (op == NULL)
        return NULL;
    /* Zero everything but the message (its first byte is enough): a
     * quarter KB less to clear per op. */
    memset(op, 0, offsetof(dlock_op, err));
    op->err[0] = '\0';
    if (extra > 0) {
        op->leader = (dlock_leader_info *)(op + 1);
        op->known = op->leader + 1;
        memset(op->leader, 0, extra);
    } else {
        op->pooled = 1;
    }
    op->loop = l;
    op->type = type;
    op->cb = cb;
    op->ud = ud;
    op->deadline = op->wake_at = -1;
    if (type == OP_LOCK || type == OP_EXTEND) /* metrics: time in it */
        op->t0_us = dlock__now_us();
    op->next = l->ops;
    if (l->ops != NULL)
        l->ops->prev = op;
    l->ops = op;
    return op;
}

int dlock_loop_fd(const dlock_loop *l)
{
    return l != NULL ? l->epfd : -1;
}

const char *dlock_op_errmsg(const dlock_op *op)
{
    return op != NULL ? op->err : "";
}

const char *dlock_op_value(const dlock_op *op, size_t *len, uint64_t *fence)
{
    if (op == NULL ||
        (op->type != OP_FGET && op->type != OP_FREAD && !op->setrel)) {
        if (len != NULL)
            *len = 0;
        if (fence != NULL)
            *fence = 0;
        return NULL;
    }
    if (len != NULL)
        *len = op->gotlen;
    if (fence != NULL)
        *fence = op->fence;
    return op->has_got ? op->got : NULL;
}

const char *dlock_hold_name(const dlock_hold *h)
{
    return h != NULL ? h->k.name : "";
}

uint64_t dlock_hold_token(const dlock_hold *h)
{
    return h != NULL ? h->token : 0;
}

const char *dlock_hold_owner(const dlock_hold *h)
{
    return h != NULL ? h->owner : "";
}
