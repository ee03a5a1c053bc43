/*
 * lhold.c - a loop's holds (include/dlock_loop.h's dlock_hold): made
 * (keys, a fresh owner id, room on the holds' clock), the table of names
 * the loop holds or is acquiring (a second acquire of one is BUSY, never
 * re-entered), a lease renewed or lost (and why), and freed once nothing
 * refers to one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/loop_impl.h"

/* NAME's hash (all its bits: a hold keeps it, the table masks it). */
static size_t name_hash(const char *s, size_t n)
{
    size_t h = 5381, i;
    for (i = 0; i < n; i++)
        h = h * 33 + (unsigned char)s[i];
    return h;
}

dlock_hold *dloop__name_find(dlock_loop *l, const char *name)
{
    size_t n = strlen(name), hv = name_hash(name, n);
    dlock_hold *h = l->names[hv & (l->nbuckets - 1)];
    /* The hash first: a chain's other holds are not read past it. */
    while (h != NULL && (h->nhash != hv || h->k.namelen != n ||
                         memcmp(h->k.name, name, n) != 0))
        h = h->tnext;
    return h;
}

void dloop__name_drop(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    dlock_hold **p = &l->names[h->nhash & (l->nbuckets - 1)];
    while (*p != NULL && *p != h)
        p = &(*p)->tnext;
    if (*p == h) {
        *p = h->tnext;
        l->nnames--;
    }
    h->tnext = NULL;
}

/* Double the name table (100,000 holds keep short chains); when out of
 * memory the chains grow longer instead. */
static void names_grow(dlock_loop *l)
{
    size_t old = l->nbuckets, i;
    dlock_hold **tab = calloc(old * 2, sizeof *tab), **prev = l->names;
    if (tab == NULL)
        return;
    l->names = tab;
    l->nbuckets = old * 2;
    for (i = 0; i < old; i++)
        while (prev[i] != NULL) {
            dlock_hold *h = prev[i];
            size_t b = h->nhash & (l->nbuckets - 1);
            prev[i] = h->tnext;
            h->tnext = tab[b];
            tab[b] = h;
        }
    free(prev);
}

/* A new hold of kind (DLOCK__KIND_*) for NAME (keys, a fresh owner id);
 * an exclusive lock's goes in the name table (a permit's does not: one
 * loop may hold several permits of one semaphore, each its own owner). */
dlock_hold *dloop__hold_new(dlock_loop *l, const char *name, int kind)
{
    const dlock_client *c = l->c;
    size_t nlen = strlen(name), ks = dlock__keys_size(c, name);
    dlock_hold *h;
    size_t b;
    if (dloop__heap_reserve(l, l->nholds + 1) != DLOCK_OK)
        return NULL;
    h = ks <= HOLD_KEYS ? dloop__pool_get(&l->hold_pool)
                        : malloc(sizeof *h + ks);
    if (h == NULL)
        return NULL;
    l->nholds++;
    memset(h, 0, sizeof *h);
    h->pooled = ks <= HOLD_KEYS;
    h->loop = l;
    dlock__keys_fill(&h->k, (char *)(h + 1), c, name);
    /* "<client id>:0:<hold number>": thread 0, no thread owns it. */
    memcpy(h->owner, c->idhex, 32);
    memcpy(h->owner + 32, ":0:", 3);
    dlock__fmt_u64(h->owner + 35, atomic_fetch_add(&l->c->hold_seq, 1) + 1);
    h->status = DLOCK_OK;
    h->renew_at = -1;
    h->refs = 1;
    h->k.kind = kind;
    if (kind != DLOCK__KIND_LOCK)
        return h;
    if (l->nnames >= l->nbuckets)
        names_grow(l);
    h->nhash = name_hash(name, nlen);
    b = h->nhash & (l->nbuckets - 1);
    h->tnext = l->names[b];
    l->names[b] = h;
    l->nnames++;
    return h;
}

/* Drop one reference; the last frees h (out of the name table and the
 * loop's holds, its renewal batch slot cleared). */
void dloop__hold_unref(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    if (--h->refs > 0)
        return;
    dloop__hold_unsched(h);
    l->nholds--;
    dloop__name_drop(h);
    dloop__mn_rec_free(h);
    if (h->wd != NULL)
        dloop__wd_drop(h);
    if (h->batch != NULL)
        h->batch->h[h->slot] = NULL;
    if (h->held) {
        if (h->hprev != NULL)
            h->hprev->hnext = h->hnext;
        else if (l->holds == h)
            l->holds = h->hnext;
        if (h->hnext != NULL)
            h->hnext->hprev = h->hprev;
    }
    free(h->why);
    h->why = NULL;
    if (h->pooled)
        dloop__pool_put(&l->hold_pool, h);
    else
        free(h);
}

/* See loop_impl.h. A hold's lease is no longer ours: say so once. */
void dloop__lost(dlock_hold *h, int status)
{
    if (h->status != DLOCK_OK)
        return;
    dloop__lost_why(h, status);
    h->status = status;
    dloop__ev_lost(h, status);
    if (h->on_lost != NULL && !h->gone)
        h->on_lost(h, status, h->lost_ud);
}

/* See loop_impl.h. */
void dloop__renewed(dlock_hold *h, int64_t sent_ms, int64_t lease)
{
    dlock_loop *l = h->loop;
    h->lease_ms = lease;
    h->valid_until = dlock__valid_until(l->c, sent_ms, lease);
    if (h->renew)
        h->renew_at = sent_ms + lease / 3;
    dloop__hold_sched(h);
    dloop__ev_renewed(h, sent_ms);
}

/* See loop_impl.h. */
void dloop__round_renewed(dlock_hold *h, int64_t sent_ms)
{
    int64_t next = h->lease_ms;
    dloop__renewed(h, sent_ms, h->round_lease);
    h->lease_ms = next;
}

/* See loop_impl.h. */
void dloop__extended(dlock_op *op, int64_t sent_ms)
{
    dlock_hold *h = op->hold;
    if (!op->overlap) {
        dloop__renewed(h, sent_ms, op->lease_ms);
        return;
    }
    h->lease_ms = op->lease_ms;
    if (h->renew)
        h->renew_at = dlock__now_ms();
    dloop__hold_sched(h);
}

/* See loop_impl.h. */
void dloop__lost_why(dlock_hold *h, int status)
{
    const char *last = h->loop->renew_err;
    char text[LOOP_ERRLEN + 96];

    if (status == DLOCK_NOT_OWNER)
        snprintf(text, sizeof text,
                 "the servers say it is no longer this owner's: its key "
                 "expired or was deleted, or another owner holds it");
    else if (last[0] != '\0')
        snprintf(text, sizeof text, "renewals failed: %s", last);
    else
        snprintf(text, sizeof text,
                 "renewals failed: the lease ran out before one was "
                 "confirmed (the loop did not run in time)");
    free(h->why);
    h->why = strdup(text);
}

/* See loop_impl.h. */
void dloop__mn_rec_free(dlock_hold *h)
{
    if (h->rec == NULL)
        return;
    dlock__held_drop_pins(h->loop->c, h->rec);
    dlock__held_free(h->rec);
    h->rec = NULL;
}
