/*
 * metrics.c - the operator's numbers as the lock layer records them: the
 * client's three latency histograms (acquire wait, hold time, renewal
 * round trip; recorded with base/hist.c) and the event callback
 * (acquired, busy, waited, renewed, lost, released, with name and
 * durations), so that a program can export to Prometheus or
 * OpenTelemetry without a paid edition. api/metrics.c reads them out
 * (dlock_client_stats, dlock_client_metrics).
 *
 * The callback runs on the thread where the event happens, with no
 * library lock held (hold/take.c, api/lock.c, hold/renew.c and
 * watchdog.c call dlock__event outside held_mu).
 */
#include "hold/core.h"
#include "hold/metrics.h"

/* See metrics.h. */
int dlock__events_on(const dlock_client *c)
{
    return c->opts.on_event != NULL;
}

/* See metrics.h. */
void dlock__event(const dlock_client *c, dlock_event_type type,
                  const char *name, int status, int64_t duration_us,
                  uint64_t token)
{
    dlock_event ev;
    if (c->opts.on_event == NULL)
        return;
    ev.type = type;
    ev.name = name;
    ev.status = status;
    ev.duration_us = duration_us < 0 ? 0 : duration_us;
    ev.token = token;
    c->opts.on_event(&ev, c->opts.on_event_userdata);
}
