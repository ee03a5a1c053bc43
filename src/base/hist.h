/*
 * hist.h - latency histograms (hist.c): the buckets, recording a value,
 * reading a snapshot. Pure, above dlock.h only; the client keeps three of
 * them (dlock__metrics).
 */
#ifndef DLOCK_BASE_HIST_H
#define DLOCK_BASE_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"

/* One histogram: counts per fixed log-scale bucket and the sum, each an
 * atomic (no lock: many threads record at once). */
typedef struct dlock__hist {
    _Atomic uint64_t bucket[DLOCK_HIST_BUCKETS];
    _Atomic uint64_t sum_us;
} dlock__hist;

/* The client's histograms (struct dlock_client's metrics). */
typedef struct dlock__metrics {
    dlock__hist acquire_wait, hold, renewal;
} dlock__metrics;

/* Record a value of us microseconds (< 0 counts as 0). */
void dlock__hist_add(dlock__hist *h, int64_t us);

/* The bucket of a value (pure; unit-tested). */
int dlock__hist_bucket(int64_t us);

/* A snapshot of h into *out. */
void dlock__hist_read(const dlock__hist *h, dlock_histogram *out);

#endif /* DLOCK_BASE_HIST_H */
