/*
 * watchdog.c - the client's watchdog thread as the renewer of a loop's
 * holds (dlock_loop_set_watchdog), for a loop that may stall (a callback
 * that blocks, a process call that comes late): each hold granted then is
 * also a record of the client's registry (hold/held.h, as
 * dlock_lock_adopt makes one: same owner, token and lease; never
 * re-entered) with the watchdog on, so the watchdog thread renews it
 * whatever the loop's thread does. The loop keeps it on its clock only to
 * look: at each of its renewal times process reads the record's status
 * and validity (atomics the watchdog writes) and reports a loss through
 * the hold's on_lost, from process as always. Its release and a
 * downgrade take the record out of the registry first (the watchdog stops
 * renewing it), then go through the loop. One server only.
 */
#include <stdlib.h>
#include <string.h>

#include "hold/held.h"
#include "loop/loop_impl.h"

int dlock_loop_set_watchdog(dlock_loop *l, int on)
{
    if (l == NULL)
        return DLOCK_EINVAL;
    if (dloop__mn_refuse(l, "dlock_loop_set_watchdog") != DLOCK_OK)
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
    int64_t now = dlock__now_ms();
    if (!l->watchdog || l->engine || !h->renew)
        return;
    r = dlock__held_new(c, h->k.name, h->owner);
    if (r == NULL)
        return; /* out of memory: the loop renews it */
    r->k.kind = h->k.kind;
    r->flags |= DLOCK__HELD_ADOPTED; /* never re-entered by a thread */
    pthread_mutex_lock(&c->held_mu);
    r->depth = 1;
    r->handles = 1;
    r->token = h->token;
    r->nodes = dlock__all_nodes(c);
    atomic_store(&r->held_on, r->nodes);
    r->lease_ms = h->lease_ms;
    atomic_store(&r->valid_until_ms, h->valid_until);
    r->watchdog = 1;
    r->since_us = h->since_us;
    r->next_renew_ms = now + h->lease_ms / 3;
    dlock__held_link(c, r);
    pthread_mutex_unlock(&c->held_mu);
    if (dlock__handle_give(c, r, 1, &h->wd) != DLOCK_OK) {
        pthread_mutex_lock(&c->held_mu);
        dlock__held_unlink(c, r);
        pthread_mutex_unlock(&c->held_mu);
        dlock__held_free(r);
        h->wd = NULL;
        return; /* the loop renews it */
    }
    dlock__work_due(c, r->next_renew_ms);
}

/* See loop_impl.h. */
void dloop__wd_drop(dlock_hold *h)
{
    if (h->wd == NULL)
        return;
    dlock_lock_detach(h->wd);
    h->wd = NULL;
}

/* See loop_impl.h. */
void dloop__wd_check(dlock_hold *h, int64_t now)
{
    const char *why = NULL;
    int st = dlock_lock_lost_reason(h->wd, &why);
    if (st != DLOCK_OK) {
        dloop__lost(h, st);
        if (why != NULL && why[0] != '\0') {
            size_t n = strlen(why) + sizeof "watchdog: ";
            char *w = malloc(n);
            if (w != NULL) {
                memcpy(w, "watchdog: ", sizeof "watchdog: " - 1);
                memcpy(w + sizeof "watchdog: " - 1, why, strlen(why) + 1);
                free(h->why);
                h->why = w;
            }
        }
        dloop__hold_sched(h);
        return;
    }
    h->valid_until = now + dlock_lock_validity_ms(h->wd);
    h->renew_at = now + h->lease_ms / 3;
    dloop__hold_sched(h);
}
