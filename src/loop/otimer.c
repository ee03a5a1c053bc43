/*
 * otimer.c - a loop's clock of waiting operations: a binary min-heap of
 * the ops that sleep until a time or wait for a message with a deadline
 * (waits.c's dloop__timed_set), keyed by that time. process pops only
 * the ops that are due (waits.c: dloop__ops_time) and the timeout reads
 * the top, instead of walking every waiting op on each process and each
 * timeout: with 10,000 waiting acquisitions (dlock.aio's semaphore bench)
 * each walk took ~0.5-0.9 ms and a handoff needs a few passes, so the
 * walks capped the handoffs near 170 a second.
 *
 * Each entry carries its time (a comparison reads the array, not the
 * ops); an op knows its entry (op->tidx, 1-based, 0: none), so moving or
 * removing it is O(log n). The heap grows by doubling; when it cannot,
 * the caller keeps the op on the loop's list instead (waits.c), walked as
 * before.
 */
#include <stdlib.h>

#include "loop/loop_impl.h"

/* Entry e at i (its op told where). */
static void put(dlock_loop *l, size_t i, otimer_ent e)
{
    l->otm[i] = e;
    e.op->tidx = i + 1;
}

static void sift_up(dlock_loop *l, size_t i)
{
    otimer_ent e = l->otm[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (l->otm[p].t <= e.t)
            break;
        put(l, i, l->otm[p]);
        i = p;
    }
    put(l, i, e);
}

static void sift_down(dlock_loop *l, size_t i)
{
    otimer_ent e = l->otm[i];
    size_t n = l->notm;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && l->otm[c + 1].t < l->otm[c].t)
            c++;
        if (e.t <= l->otm[c].t)
            break;
        put(l, i, l->otm[c]);
        i = c;
    }
    put(l, i, e);
}

/* See loop_impl.h. */
int dloop__otimer_set(dlock_loop *l, dlock_op *op, int64_t t)
{
    size_t i;
    otimer_ent e;
    if (op->tidx != 0) {
        i = op->tidx - 1;
        l->otm[i].t = t;
        sift_up(l, i);
        sift_down(l, op->tidx - 1);
        return DLOCK_OK;
    }
    if (l->notm == l->capotm) {
        size_t cap = l->capotm > 0 ? l->capotm * 2 : 64;
        otimer_ent *n = realloc(l->otm, cap * sizeof *n);
        if (n == NULL)
            return DLOCK_ENOMEM;
        l->otm = n;
        l->capotm = cap;
    }
    e.t = t;
    e.op = op;
    l->otm[l->notm++] = e;
    op->tidx = l->notm;
    sift_up(l, l->notm - 1);
    return DLOCK_OK;
}

/* See loop_impl.h. */
void dloop__otimer_del(dlock_loop *l, dlock_op *op)
{
    size_t i;
    otimer_ent last;
    if (op->tidx == 0)
        return;
    i = op->tidx - 1;
    op->tidx = 0;
    last = l->otm[--l->notm];
    if (i == l->notm)
        return; /* it was the last entry */
    put(l, i, last);
    sift_up(l, i);
    sift_down(l, last.op->tidx - 1);
}

/* See loop_impl.h. */
dlock_op *dloop__otimer_pop(dlock_loop *l, int64_t now)
{
    dlock_op *op;
    if (l->notm == 0 || l->otm[0].t > now)
        return NULL;
    op = l->otm[0].op;
    dloop__otimer_del(l, op);
    return op;
}

/* See loop_impl.h. */
int64_t dloop__otimer_min(const dlock_loop *l)
{
    return l->notm > 0 ? l->otm[0].t : -1;
}
