/*
 * metrics.h - the client's latency histograms and the event callback
 * (metrics.c): what a program exports to Prometheus or OpenTelemetry.
 * Lock layer; the histograms (base/hist.h) live in struct dlock_client
 * (core.h), the hooks are called by hold/take.c, api/lock.c, hold/renew.c and
 * watchdog.c where the events happen.
 */
#ifndef DLOCK_METRICS_H
#define DLOCK_METRICS_H

#include <stdint.h>

#include "base/hist.h"
#include "dlock.h"

/* Call the client's event callback, if any, with an event of TYPE for
 * lock NAME: status, duration and token. */
void dlock__event(const dlock_client *c, dlock_event_type type,
                  const char *name, int status, int64_t duration_us,
                  uint64_t token);

/* 1 when the client has an event callback. */
int dlock__events_on(const dlock_client *c);

#endif /* DLOCK_METRICS_H */
