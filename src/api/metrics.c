/*
 * metrics.c - the operator's numbers as the API gives them: the counters
 * (dlock_client_stats) and a snapshot of them with the three latency
 * histograms (dlock_client_metrics). Recording is hold/metrics.c's and
 * base/hist.c's.
 */
#include <string.h>

#include "base/hist.h"
#include "hold/core.h"

/* See dlock.h. */
void dlock_client_stats(const dlock_client *c, dlock_stats *s)
{
    if (s == NULL)
        return;
    memset(s, 0, sizeof *s);
    if (c == NULL)
        return;
    s->requests = atomic_load(&c->stats.requests);
    s->acquisitions = atomic_load(&c->stats.acquisitions);
    s->busy = atomic_load(&c->stats.busy);
    s->waits = atomic_load(&c->stats.waits);
    s->wakeups = atomic_load(&c->stats.wakeups);
    s->renewals = atomic_load(&c->stats.renewals);
    s->lost = atomic_load(&c->stats.lost);
    s->reconnects = atomic_load(&c->stats.reconnects);
}

/* See dlock.h. */
void dlock_client_metrics(const dlock_client *c, dlock_metrics *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof *out);
    if (c == NULL)
        return;
    dlock_client_stats(c, &out->stats);
    dlock__hist_read(&c->metrics.acquire_wait, &out->acquire_wait);
    dlock__hist_read(&c->metrics.hold, &out->hold);
    dlock__hist_read(&c->metrics.renewal, &out->renewal);
}
