/*
 * take.c - an acquire of any kind, from its spec to its handle (take.h):
 * the first attempt, the wait (wait.c) when the name is taken, in its
 * lock-delay or its servers away (an outage), the failure messages, and the
 * record: registration, the first renewal, holder info, metrics.
 */
#include <inttypes.h>
#include <string.h>

#include "hold/attempt.h"
#include "hold/holder.h"
#include "hold/held.h"
#include "hold/metrics.h"
#include "notify/notify.h"
#include "hold/take.h"
#include "hold/wait.h"

/* See take.h. */
int dlock__check_acquire_args(dlock_lock **out, dlock_client *c,
                              const char *name)
{
    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "out is NULL");
    return dlock__check_name(c, name);
}

/* See dlock.h. Here, beside the checks of what it fills, because the
 * acquire of every kind (this file) falls back to it. */
void dlock_acquire_options_init(dlock_acquire_options *opts)
{
    if (opts == NULL)
        return;
    memset(opts, 0, sizeof *opts);
    opts->version = DLOCK_ACQUIRE_OPTIONS_VERSION;
    opts->lease_ms = 30000;
}

/* See take.h. */
int dlock__check_acquire_opts(dlock_client *c,
                              const dlock_acquire_options **opts,
                              dlock_acquire_options *defaults, int always_drift)
{
    const dlock_acquire_options *o = *opts;
    if (o == NULL) {
        dlock_acquire_options_init(defaults);
        *opts = o = defaults;
    }
    if (o->version != 1 && o->version != DLOCK_ACQUIRE_OPTIONS_VERSION)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "acquire options version %u not supported",
                                o->version);
    if (o->lease_ms <= 0 || o->lease_ms > 365LL * 24 * 3600 * 1000)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lease_ms must be > 0 and at most a year "
                                "(got %" PRId64 ")",
                                o->lease_ms);
    if ((c->ns.n > 1 || always_drift) &&
        o->lease_ms <= dlock__drift(c, o->lease_ms))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lease_ms %" PRId64 " is not above the clock "
                                "drift allowance",
                                o->lease_ms);
    return DLOCK_OK;
}

/* The first attempt and, when the name is taken (or in its lock-delay,
 * or its servers away: an outage) and the caller waits, the wait. fresh: a
 * new hold (not a reentry). */
static int first_then_wait(dlock_client *c, dlock__held *h,
                           const dlock__want *w, const dlock_acquire_options *o,
                           int fresh, dlock__got *g, int *warn)
{
    const dlock__kind *k = dlock__kind_of(w->kind);
    uint64_t gen = atomic_load(&c->cancel_gen);
    int64_t deadline = o->wait_ms < 0 ? -1 : dlock__now_ms() + o->wait_ms;
    int fair = c->opts.wait_strategy == DLOCK_WAIT_FAIR && fresh;
    int no_ride = !!(dlock__acquire_flags(o) & DLOCK_ACQUIRE_NO_OUTAGE_WAIT);
    int rc;

    /* Fair: the first attempt respects the queue but does not join it:
     * the wait subscribes before it queues, or a quick handoff could come
     * before the subscription. Uncontended, that is one round trip and no
     * subscription. A process still subscribed (contending for the name
     * again) queues at once: the try would only add a round trip. */
    if (fair && k->queue_at_once && o->wait_ms != 0 &&
        dlock__notify_subscribed(c->notifier, h->k.hchan, h->k.hchanlen))
        return dlock__wait_blocking(c, h, w, deadline, gen, -1, 0, no_ride, g,
                                    warn);
    rc = dlock__attempt(c, h, w, fair ? DLOCK__ASK_TRY_FAIR : DLOCK__ASK_TRY, 0,
                        g);
    if (rc == DLOCK_BUSY)
        atomic_fetch_add(&c->stats.busy, 1);
    if (o->wait_ms == 0)
        return rc;
    if (rc == DLOCK_BUSY)
        return dlock__wait_blocking(c, h, w, deadline, gen, g->pttl, 0, no_ride,
                                    g, warn);
    if (rc == DLOCK_LOCK_DELAY)
        return dlock__wait_blocking(c, h, w, deadline, gen, -1, 0, no_ride, g,
                                    warn);
    if (!no_ride && dlock__outage_retryable(c->ns.kind == DLOCK__TOPO_SENTINEL,
                                            rc, g->notready)) {
        if (deadline >= 0 && dlock__now_ms() >= deadline)
            return rc; /* the attempt outlasted the wait: its error */
        return dlock__wait_blocking(c, h, w, deadline, gen, -1, rc, no_ride, g,
                                    warn);
    }
    return rc;
}

/* A failed acquire's message and event (t_us: when the call began). */
static int failed(dlock_client *c, const dlock__kind *k, const char *name,
                  int rc, int64_t t_us)
{
    if (rc == DLOCK_BUSY)
        dlock__set_error(c, rc, "%s%s", name, k->busy);
    else if (rc == DLOCK_TIMEDOUT)
        dlock__set_error(c, rc, "gave up waiting for %s", name);
    else if (rc == DLOCK_CANCELED)
        dlock__set_error(c, rc, "waiting for %s was cancelled", name);
    else if (k->id == DLOCK__KIND_LOCK &&
             (rc == DLOCK_ESERVER || rc == DLOCK_NO_QUORUM))
        rc = dlock__lock_kind_error(c, name, rc);
    if (k->events &&
        (rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT || rc == DLOCK_CANCELED))
        dlock__event(c,
                     rc == DLOCK_BUSY ? DLOCK_EVENT_BUSY : DLOCK_EVENT_WAITED,
                     name, rc, dlock__now_us() - t_us, 0);
    return rc;
}

/* See take.h. */
int dlock__record(dlock_client *c, dlock__held *h,
                  const dlock_acquire_options *o, const dlock__got *g,
                  int fresh, int64_t t_us, dlock_lock **out)
{
    const dlock__kind *k = dlock__kind_of(h->k.kind);
    pthread_mutex_lock(&c->held_mu);
    h->depth = k->reentrant ? g->depth : 1;
    h->handles++;
    h->token = g->token;
    h->nodes |= g->nodes;
    atomic_store(&h->held_on, g->nodes);
    h->lease_ms = o->lease_ms;
    atomic_store(&h->valid_until_ms, g->valid_until);
    if (fresh || (o->watchdog && !h->watchdog)) {
        h->watchdog = o->watchdog;
        h->on_lost = o->on_lost;
        h->on_lost_ud = o->on_lost_userdata;
    }
    if (fresh) {
        h->since_us = dlock__now_us();
        dlock__held_link(c, h);
    }
    dlock__held_started(c, h, o->lease_ms, g->valid_until);
    if (fresh && k->holder_info)
        dlock__holder_record(c, h);
    if (k->events) {
        t_us = dlock__now_us() - t_us;
        dlock__hist_add(&c->metrics.acquire_wait, t_us);
        dlock__event(c, DLOCK_EVENT_ACQUIRED, h->k.name, DLOCK_OK, t_us,
                     h->token);
    }
    return dlock__handle_give(c, h, o->watchdog, out);
}

/* See take.h. */
int dlock__take(dlock_lock **out, dlock_client *c, const char *name,
                const dlock__want *w, const dlock_acquire_options *o,
                dlock__held *h)
{
    const dlock__kind *k = dlock__kind_of(w->kind);
    int64_t t_us = dlock__now_us(); /* metrics: time in this call */
    char owner[DLOCK_OWNER_MAX], *msg;
    int rc, fresh = h == NULL, warn = 0;
    dlock__got g;

    dlock__nodes_note_lease(&c->ns, o->lease_ms);
    if (fresh) {
        /* A fresh hold: a new owner id (see dlock__owner_id). */
        dlock__owner_id(c, owner, sizeof owner);
        h = dlock__held_new(c, name, owner);
        if (h == NULL)
            return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
        h->k.kind = w->kind;
        h->thread = dlock__thread_serial();
        if (dlock__acquire_flags(o) & DLOCK_ACQUIRE_NO_REENTRY)
            h->flags |= DLOCK__HELD_SOLE;
    }
    msg = dlock__errbuf(c); /* a success leaves no stale message */
    if (msg != NULL)
        msg[0] = '\0';
    /* Only this thread changes h->depth (the owner is this thread), so
     * the attempt may read it without the lock. */
    rc = first_then_wait(c, h, w, o, fresh, &g, &warn);
    if (rc == DLOCK_OK && msg != NULL)
        msg[0] = '\0'; /* nor does a failed attempt of the wait */
    if (rc != DLOCK_OK) {
        if (fresh)
            dlock__held_free(h);
        return failed(c, k, name, rc, t_us);
    }
    rc = dlock__record(c, h, o, &g, fresh, t_us, out);
    if (rc == DLOCK_OK && warn && !atomic_exchange(&c->nopub_warned, 1))
        dlock__set_error(c, DLOCK_OK,
                         "warning: the server refuses this user the lock's "
                         "pub/sub channels (NOPERM), so waiters poll instead "
                         "of being notified; allow them with the ACL rule "
                         "&%s:* (or allchannels)",
                         c->key_prefix);
    return rc;
}
