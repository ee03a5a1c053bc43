/*
 * watchdog.c - the client's watchdog thread as the renewer of a loop's
 * holds (dlock_loop_set_watchdog), for a loop that may stall (a callback
 * that blocks, a process call that comes late): each hold granted then is
 * also a record of the client's registry (hold/held.h, as
 * dlock_lock_adopt makes one: same owner, token and lease; never
 * re-entered) with the watchdog on, so the watchdog thread renews it
 * whatever the loop's thread does. The loop keeps it on its clock only to
 * look (holds.c): at each of its renewal times process reads the record's
 * state and validity (atomics the watchdog writes) and reports a loss
 * through the hold's on_lost, from process as always. Its release and a
 * downgrade take the record out of the registry first (the watchdog stops
 * renewing it), then go through the loop. On every topology: the
 * record is renewed as a blocking hold of the client is (all the nodes
 * of a fixed set, voted by a majority; Sentinel's master; a cluster's
 * slot). The ground of src/loop/: it calls only the hold tier.
 */
#include <stdlib.h>
#include <string.h>

#include "hold/held.h"
#include "loop/loop_impl.h"

int dlock_loop_set_watchdog(dlock_loop *l, int on)
{
    if (l == NULL)
        return DLOCK_EINVAL;
    l->watchdog = on != 0;
    return DLOCK_OK;
}

/* See loop_impl.h. */
void dloop__wd_adopt(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    dlock_client *c = l->c;
    dlock__held *r;
    int64_t due = dlock__now_ms() + h->lease_ms / 3;
    if (!l->watchdog || !h->renew)
        return;
    r = dlock__held_new(c, h->k.name, h->owner);
    if (r == NULL)
        return; /* out of memory: the loop renews it */
    r->k.kind = h->k.kind;
    r->flags |= DLOCK__HELD_ADOPTED; /* never re-entered by a thread */
    pthread_mutex_lock(&c->held_mu);
    r->depth = 1;
    r->token = h->token;
    r->nodes = dlock__all_nodes(c);
    atomic_store(&r->held_on, r->nodes);
    r->lease_ms = h->lease_ms;
    atomic_store(&r->valid_until_ms, h->valid_until);
    r->watchdog = 1;
    r->since_us = dlock__now_us();
    r->next_renew_ms = due;
    dlock__held_link(c, r);
    r->handles = 1;
    pthread_mutex_unlock(&c->held_mu);
    if (dlock__handle_give(c, r, 1, &h->wd) != DLOCK_OK) {
        pthread_mutex_lock(&c->held_mu);
        r->handles = 0;
        dlock__held_unlink(c, r);
        pthread_mutex_unlock(&c->held_mu);
        dlock__held_free(r);
        h->wd = NULL;
        return; /* the loop renews it */
    }
    dlock__work_due(c, due);
}

/* See loop_impl.h. As dlock_lock_detach: the record leaves the registry
 * (once no lost callback runs on it), the handle goes. */
void dloop__wd_drop(dlock_hold *h)
{
    dlock_lock *w = h->wd;
    dlock_client *c;
    if (w == NULL)
        return;
    h->wd = NULL;
    c = w->client;
    pthread_mutex_lock(&c->held_mu);
    if (w->held->life == DLOCK__HELD_LIVE)
        w->held->life = DLOCK__HELD_RELEASING;
    while (w->held->flags & DLOCK__HELD_CB)
        pthread_cond_wait(&c->held_cv, &c->held_mu);
    pthread_mutex_unlock(&c->held_mu);
    dlock__handle_drop(c, w->held, w, 1);
}

/* See loop_impl.h. As dlock_lock_status, _validity_ms, _lost_reason. */
int dloop__wd_status(const dlock_hold *h, int64_t *left_ms, const char **why)
{
    const dlock__held *r = h->wd->held;
    int64_t left = atomic_load(&r->valid_until_ms) - dlock__now_ms();
    if (why != NULL)
        *why = "";
    if (left_ms != NULL)
        *left_ms = left > 0 ? left : 0;
    if (atomic_load(&r->state) == DLOCK_LOST) {
        if (left_ms != NULL)
            *left_ms = 0;
        if (why != NULL)
            *why = r->lost_why != NULL ? r->lost_why
                                       : dlock_strerror(r->lost_code);
        return r->lost_code;
    }
    return left > 0 ? DLOCK_OK : DLOCK_NOT_OWNER;
}
