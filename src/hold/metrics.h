/*
 * metrics.h - latency histograms and the event callback (metrics.c): what
 * a program exports to Prometheus or OpenTelemetry. Lock layer; the
 * histograms live in struct dlock_client (core.h), the hooks are called
 * by hold/take.c, lock.c and watchdog.c where the events happen.
 */
#ifndef DLOCK_METRICS_H
#define DLOCK_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"

/* One histogram: counts per fixed log-scale bucket and the sum, each an
 * atomic (no lock: many threads record at once). */
typedef struct dlock__hist {
    _Atomic uint64_t bucket[DLOCK_HIST_BUCKETS];
    _Atomic uint64_t sum_us;
} dlock__hist;

/* The client's histograms. */
typedef struct dlock__metrics {
    dlock__hist acquire_wait, hold, renewal;
} dlock__metrics;

/* Record a value of us microseconds (< 0 counts as 0). */
void dlock__hist_add(dlock__hist *h, int64_t us);

/* The bucket of a value (pure; unit-tested). */
int dlock__hist_bucket(int64_t us);

/* Call the client's event callback, if any, with an event of TYPE for
 * lock NAME: status, duration and token. */
void dlock__event(const dlock_client *c, dlock_event_type type,
                  const char *name, int status, int64_t duration_us,
                  uint64_t token);

/* 1 when the client has an event callback. */
int dlock__events_on(const dlock_client *c);

#endif /* DLOCK_METRICS_H */
