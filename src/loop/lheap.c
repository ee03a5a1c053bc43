/*
 * lheap.c - a loop's clock of holds: a binary min-heap of the holds the
 * loop renews, keyed by the next time one needs the loop (its renewal,
 * or the end of its validity while a renewal is out). process pops only
 * the holds that are due (holds.c: dloop__holds_time) instead of walking
 * every hold each time the earliest one comes due: at 100,000 holds a
 * walk per due renewal was O(holds) per process.
 *
 * The entries carry their time (a comparison reads the array, not the
 * holds), and removal is lazy: a hold released, lost or rescheduled only
 * empties its entry (O(1), no sifting: at 10,000 requests in flight a
 * sift per release was the loop's most expensive function), and the pop
 * drops empty entries as they come up. New times are nearly always the
 * latest (now + a third of the lease), so an insert seldom moves.
 */
#include <stdlib.h>

#include "loop/loop_impl.h"

/* The time h next needs the loop, or -1 when never (not renewed by the
 * loop, lost, released). */
static int64_t due_of(const dlock_hold *h)
{
    if (!h->renew || h->status != DLOCK_OK || h->gone)
        return -1;
    if (h->renewing || h->extending || h->renew_at < 0 ||
        h->valid_until < h->renew_at)
        return h->valid_until;
    return h->renew_at;
}

/* Entry e at i (its hold, if any, told where). */
static void put(dlock_loop *l, size_t i, lheap_ent e)
{
    l->heap[i] = e;
    if (e.h != NULL)
        e.h->hidx = i + 1;
}

static void sift_up(dlock_loop *l, size_t i)
{
    lheap_ent e = l->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (l->heap[p].due <= e.due)
            break;
        put(l, i, l->heap[p]);
        i = p;
    }
    put(l, i, e);
}

static void sift_down(dlock_loop *l, size_t i)
{
    lheap_ent e = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && l->heap[c + 1].due < l->heap[c].due)
            c++;
        if (e.due <= l->heap[c].due)
            break;
        put(l, i, l->heap[c]);
        i = c;
    }
    put(l, i, e);
}

/* The loop's next renewal time: the top's (an empty top only wakes the
 * loop early once), or -1. */
static void set_min(dlock_loop *l)
{
    l->renew_min = l->nheap > 0 ? l->heap[0].due : -1;
}

/* Drop the empty entries and rebuild the heap. */
static void compact(dlock_loop *l)
{
    size_t i, n = 0;
    for (i = 0; i < l->nheap; i++)
        if (l->heap[i].h != NULL)
            l->heap[n++] = l->heap[i];
    l->nheap = n;
    l->nstale = 0;
    for (i = n / 2; i-- > 0;)
        sift_down(l, i);
    for (i = 0; i < n; i++)
        l->heap[i].h->hidx = i + 1;
}

static int grow(dlock_loop *l, size_t n)
{
    lheap_ent *nh;
    size_t cap = l->capheap > 0 ? l->capheap : 64;
    while (cap < n)
        cap *= 2;
    nh = realloc(l->heap, cap * sizeof *nh);
    if (nh == NULL)
        return DLOCK_ENOMEM;
    l->heap = nh;
    l->capheap = cap;
    return DLOCK_OK;
}

int dloop__heap_reserve(dlock_loop *l, size_t n)
{
    return n <= l->capheap ? DLOCK_OK : grow(l, n);
}

void dloop__hold_unsched(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    if (h->hidx == 0)
        return;
    l->heap[h->hidx - 1].h = NULL;
    h->hidx = 0;
    l->nstale++;
}

void dloop__hold_sched(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    int64_t due = due_of(h);
    lheap_ent e;
    if (h->hidx != 0 && l->heap[h->hidx - 1].due == due)
        return; /* already there */
    dloop__hold_unsched(h);
    if (due >= 0) {
        /* Full: more room, else (out of memory) the empty entries go;
         * there is one at least, since every hold has room reserved
         * (dloop__hold_new) and h's own entry was emptied or never was. */
        if (l->nheap == l->capheap && grow(l, l->nheap + 1) != DLOCK_OK)
            compact(l);
        e.due = due;
        e.h = h;
        l->heap[l->nheap++] = e;
        sift_up(l, l->nheap - 1);
    }
    set_min(l);
}

dlock_hold *dloop__heap_pop_due(dlock_loop *l, int64_t now)
{
    dlock_hold *h = NULL;
    while (h == NULL && l->nheap > 0 && l->heap[0].due <= now) {
        h = l->heap[0].h;
        if (h == NULL)
            l->nstale--;
        else
            h->hidx = 0;
        l->heap[0] = l->heap[--l->nheap];
        if (l->nheap > 0)
            sift_down(l, 0);
    }
    if (l->nstale > 64 && l->nstale > l->nheap / 2)
        compact(l); /* mostly empty: bound the heap by the live holds */
    set_min(l);
    return h;
}
