/*
 * lheap.c - a loop's clock of holds: a binary min-heap of the holds the
 * loop renews, keyed by the next time one needs the loop (its renewal,
 * or the end of its validity while a renewal is out). process pops only
 * the holds that are due (holds.c: dloop__holds_time) instead of walking
 * every hold each time the earliest one comes due: at 100,000 holds a
 * walk per due renewal was O(holds) per process.
 *
 * A hold leaves the heap when it is freed (dloop__hold_unref) and when it
 * is popped; one released or lost meanwhile stays in it until then and is
 * dropped at its pop (dloop__holds_time checks it).
 */
#include <stdlib.h>

#include "loop_impl.h"

/* The time h next needs the loop, or -1 when never (not renewed by the
 * loop, lost, released). */
static int64_t due_of(const dlock_hold *h)
{
    if (!h->renew || h->status != DLOCK_OK || h->gone)
        return -1;
    if (h->renewing || h->renew_at < 0 || h->valid_until < h->renew_at)
        return h->valid_until;
    return h->renew_at;
}

static void put(dlock_loop *l, size_t i, dlock_hold *h)
{
    l->heap[i] = h;
    h->hidx = i + 1;
}

/* Move the hold at i up to its place. */
static void sift_up(dlock_loop *l, size_t i)
{
    dlock_hold *h = l->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (l->heap[p]->due <= h->due)
            break;
        put(l, i, l->heap[p]);
        i = p;
    }
    put(l, i, h);
}

/* Move the hold at i down to its place. */
static void sift_down(dlock_loop *l, size_t i)
{
    dlock_hold *h = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && l->heap[c + 1]->due < l->heap[c]->due)
            c++;
        if (h->due <= l->heap[c]->due)
            break;
        put(l, i, l->heap[c]);
        i = c;
    }
    put(l, i, h);
}

/* The loop's next renewal time: the heap's top, or -1. */
static void set_min(dlock_loop *l)
{
    l->renew_min = l->nheap > 0 ? l->heap[0]->due : -1;
}

int dloop__heap_reserve(dlock_loop *l, size_t n)
{
    dlock_hold **nh;
    size_t cap;
    if (n <= l->capheap)
        return DLOCK_OK;
    cap = l->capheap > 0 ? l->capheap : 64;
    while (cap < n)
        cap *= 2;
    nh = realloc(l->heap, cap * sizeof *nh);
    if (nh == NULL)
        return DLOCK_ENOMEM;
    l->heap = nh;
    l->capheap = cap;
    return DLOCK_OK;
}

void dloop__hold_unsched(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    size_t i;
    if (h->hidx == 0)
        return;
    i = h->hidx - 1;
    h->hidx = 0;
    l->nheap--;
    if (i < l->nheap) {
        dlock_hold *m = l->heap[l->nheap]; /* the last fills the hole */
        put(l, i, m);
        sift_up(l, i);
        sift_down(l, m->hidx - 1);
    }
    set_min(l);
}

void dloop__hold_sched(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    int64_t due = due_of(h);
    if (due < 0) {
        dloop__hold_unsched(h);
        return;
    }
    h->due = due;
    if (h->hidx == 0) {
        /* Room was reserved when the hold was made (dloop__hold_new). */
        put(l, l->nheap++, h);
        sift_up(l, h->hidx - 1);
    } else {
        sift_up(l, h->hidx - 1);
        sift_down(l, h->hidx - 1);
    }
    set_min(l);
}

dlock_hold *dloop__heap_pop_due(dlock_loop *l, int64_t now)
{
    dlock_hold *h;
    if (l->nheap == 0 || l->heap[0]->due > now)
        return NULL;
    h = l->heap[0];
    dloop__hold_unsched(h);
    return h;
}
