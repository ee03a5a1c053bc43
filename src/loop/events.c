/*
 * events.c - the client's metrics and events for a loop's operations
 * (dlock_client_stats, dlock_client_metrics, dlock_options.on_event), as
 * the blocking API records its own (hold/take.c, api/lock.c,
 * hold/renew.c, watchdog.c): acquired, busy, waited, renewed, lost,
 * released, with the same durations, and the counters and histograms
 * beside them. The callbacks run on the loop's thread, from process (or
 * cancel / free), like every other callback of the loop.
 */
#include <stdatomic.h>

#include "hold/metrics.h"
#include "loop/loop_impl.h"

/* See loop_impl.h. */
void dloop__ev_op_ended(dlock_op *op, int status)
{
    dlock_client *c = op->loop->c;
    dlock_hold *h = op->hold;
    int64_t now, t_us;
    if (op->type != OP_LOCK && op->type != OP_RELEASE && op->type != OP_EXTEND)
        return;
    now = dlock__now_us();
    t_us = now - op->t0_us;
    if (op->type == OP_LOCK) {
        if (status == DLOCK_OK && h != NULL) {
            h->since_us = now; /* held from here (the hold histogram) */
            atomic_fetch_add(&c->stats.acquisitions, 1);
            dlock__hist_add(&c->metrics.acquire_wait, t_us);
            dlock__event(c, DLOCK_EVENT_ACQUIRED, h->k.name, DLOCK_OK, t_us,
                         h->token);
        } else if (status == DLOCK_BUSY) {
            atomic_fetch_add(&c->stats.busy, 1);
            if (h != NULL)
                dlock__event(c, DLOCK_EVENT_BUSY, h->k.name, status, t_us, 0);
        } else if ((status == DLOCK_TIMEDOUT || status == DLOCK_CANCELED) &&
                   op->deadline != 0 && h != NULL) {
            dlock__event(c, DLOCK_EVENT_WAITED, h->k.name, status, t_us, 0);
        }
    } else if (op->type == OP_RELEASE && h != NULL) {
        int64_t held_us = now - h->since_us;
        if (status == DLOCK_OK)
            dlock__hist_add(&c->metrics.hold, held_us);
        dlock__event(c, DLOCK_EVENT_RELEASED, h->k.name, status, held_us,
                     h->token);
    } else if (op->type == OP_EXTEND && status == DLOCK_OK) {
        dlock__hist_add(&c->metrics.renewal, t_us);
    }
}

/* See loop_impl.h. */
void dloop__ev_renewed(dlock_hold *h, int64_t sent_ms)
{
    dlock_client *c = h->loop->c;
    atomic_fetch_add(&c->stats.renewals, 1);
    dlock__event(c, DLOCK_EVENT_RENEWED, h->k.name, DLOCK_OK,
                 (dlock__now_ms() - sent_ms) * 1000, h->token);
}

/* See loop_impl.h. */
void dloop__ev_lost(dlock_hold *h, int status)
{
    dlock_client *c = h->loop->c;
    atomic_fetch_add(&c->stats.lost, 1);
    dlock__event(c, DLOCK_EVENT_LOST, h->k.name, status,
                 dlock__now_us() - h->since_us, h->token);
}

/* See loop_impl.h. */
void dloop__ev_round(dlock_loop *l, int64_t sent_ms)
{
    dlock__hist_add(&l->c->metrics.renewal, (dlock__now_ms() - sent_ms) * 1000);
}

/* See loop_impl.h. */
void dloop__ev_count(dlock_loop *l, int what)
{
    dlock__stats *s = &l->c->stats;
    atomic_fetch_add(what == DLOOP_EV_REQUEST  ? &s->requests
                     : what == DLOOP_EV_BUSY   ? &s->busy
                     : what == DLOOP_EV_WAIT   ? &s->waits
                     : what == DLOOP_EV_WAKEUP ? &s->wakeups
                                               : &s->reconnects,
                     1);
}
