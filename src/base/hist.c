/*
 * hist.c - the latency histograms (see hist.h): fixed log-scale buckets
 * (1, 2.5, 5 per decade from 100 us to 5000 s, then +Inf), a histogram a
 * few atomic counters recorded without a lock from whichever thread
 * measures, so that histograms of different clients or processes add up
 * bucket by bucket; and the names of the events. Pure: no client.
 */
#include "base/hist.h"

/* Upper bounds of the buckets in microseconds; the last bucket has none. */
static const int64_t bounds_us[DLOCK_HIST_BUCKETS - 1] = {
    100,       250,       500,       1000,       2500,       5000,
    10000,     25000,     50000,     100000,     250000,     500000,
    1000000,   2500000,   5000000,   10000000,   25000000,   50000000,
    100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000LL};

/* See dlock.h. */
int64_t dlock_histogram_bound_us(int i)
{
    if (i < 0 || i >= DLOCK_HIST_BUCKETS - 1)
        return -1;
    return bounds_us[i];
}

/* See hist.h. Binary search over 24 bounds. */
int dlock__hist_bucket(int64_t us)
{
    int lo = 0, hi = DLOCK_HIST_BUCKETS - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (us <= bounds_us[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* See hist.h. */
void dlock__hist_add(dlock__hist *h, int64_t us)
{
    if (us < 0)
        us = 0;
    atomic_fetch_add_explicit(&h->bucket[dlock__hist_bucket(us)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
}

/* See hist.h. count is the sum of the buckets read, so that the +Inf
 * bucket of a cumulative export always equals the count. */
void dlock__hist_read(const dlock__hist *h, dlock_histogram *out)
{
    int i;
    out->count = 0;
    for (i = 0; i < DLOCK_HIST_BUCKETS; i++) {
        out->bucket[i] =
            atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        out->count += out->bucket[i];
    }
    out->sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
}

/* See dlock.h. */
const char *dlock_event_name(int type)
{
    switch (type) {
    case DLOCK_EVENT_ACQUIRED:
        return "acquired";
    case DLOCK_EVENT_BUSY:
        return "busy";
    case DLOCK_EVENT_WAITED:
        return "waited";
    case DLOCK_EVENT_RENEWED:
        return "renewed";
    case DLOCK_EVENT_LOST:
        return "lost";
    case DLOCK_EVENT_RELEASED:
        return "released";
    default:
        return "unknown";
    }
}
