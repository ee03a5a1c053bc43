/*
 * metrics.c - the operator's numbers: the counters (dlock_client_stats), three
 * latency histograms (acquire wait, hold time, renewal round trip) and an
 * event callback (acquired, busy, waited, renewed, lost, released, with
 * name and durations), so that a program can export to Prometheus or
 * OpenTelemetry without a paid edition.
 *
 * Buckets are fixed and log-scale (1, 2.5, 5 per decade from 100 us to
 * 5000 s, then +Inf): a histogram is a few atomic counters, recorded
 * without a lock from whichever thread measures, and histograms of
 * different clients or processes add up bucket by bucket.
 *
 * The callback runs on the thread where the event happens, with no
 * library lock held (hold/take.c, lock.c and watchdog.c call dlock__event
 * outside held_mu).
 */
#include <string.h>

#include "hold/core.h"
#include "hold/metrics.h"

/* Upper bounds of the buckets in microseconds; the last bucket has none. */
static const int64_t bounds_us[DLOCK_HIST_BUCKETS - 1] = {
    100,       250,       500,       1000,       2500,       5000,
    10000,     25000,     50000,     100000,     250000,     500000,
    1000000,   2500000,   5000000,   10000000,   25000000,   50000000,
    100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000LL};

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
int64_t dlock_histogram_bound_us(int i)
{
    if (i < 0 || i >= DLOCK_HIST_BUCKETS - 1)
        return -1;
    return bounds_us[i];
}

/* See metrics.h. Binary search over 24 bounds. */
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

/* See metrics.h. */
void dlock__hist_add(dlock__hist *h, int64_t us)
{
    if (us < 0)
        us = 0;
    atomic_fetch_add_explicit(&h->bucket[dlock__hist_bucket(us)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
}

/* A snapshot of h; count is the sum of the buckets read, so that the
 * +Inf bucket of a cumulative export always equals the count. */
static void hist_read(const dlock__hist *h, dlock_histogram *out)
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
void dlock_client_metrics(const dlock_client *c, dlock_metrics *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof *out);
    if (c == NULL)
        return;
    dlock_client_stats(c, &out->stats);
    hist_read(&c->metrics.acquire_wait, &out->acquire_wait);
    hist_read(&c->metrics.hold, &out->hold);
    hist_read(&c->metrics.renewal, &out->renewal);
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
