/*
 * watchdog.c - the lease renewer: one background thread per client that
 * keeps the leases of watchdog locks alive while their holder lives.
 *
 * Every lock taken with watchdog = 1 is renewed at about a third of its
 * lease; all locks due in one round are renewed with one script call per
 * server (extend.lua takes many keys). A fair-mode handoff's short lease is
 * confirmed here too, at half the handoff lease (a lock released before
 * then never needs the round trip).
 *
 * The thread looks at least once a second, so taking a lock due later than
 * its next look does not wake it (dlock__work_due): with the 2 s
 * handoff lease, a fair hand-over costs the new holder no thread wake-up.
 *
 * Each look also lets idle pooled connections read the answers to
 * requests given up on (dlock__nodes_settle): a Redlock release returns
 * once a majority confirmed, and a NOSCRIPT answer from a slower node must
 * still make that connection send the script's source, even when no
 * thread uses it again.
 *
 * A renewal that finds the lock gone or owned by another, or renewals that
 * keep failing until the local validity (monotonic clock) has run out,
 * mark the lock LOST: its status says so, release reports it, and the
 * holder's callback is called from this thread. Nothing is dropped
 * silently.
 *
 * Races: the thread takes a reference (wd_refs) on each lock of a round and
 * does its I/O without the registry lock. A release in the meantime moves
 * the record to RELEASING (registry.c), so a "not owner" answer caused by
 * the release itself is not taken for a loss; and the extend script only
 * sets a lease where the owner's field exists, so a renewal that reaches
 * the server after the release's delete changes nothing.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/metrics.h"
#include "hold/release.h"
#include "hold/renew.h"
#include "hold/watchdog.h"

#define ROUND_MAX 256

/* The thread looks at the registry at least this often, so that a lock due
 * later than that needs no wake-up of the thread when it is taken (a
 * futex wake and a context switch at the start of every critical
 * section, otherwise). */
#define IDLE_TICK_MS 1000

/* The thread. Its wake-ups are the client's due signal (c->due, under
 * held_mu): the registry raises it (dlock__work_due) where work is
 * queued, and starts the thread through due.start on first use. */
typedef struct dlock__watchdog {
    pthread_t thread;
} watchdog;

static void *watchdog_main(void *arg);

/* c->due.start: start the thread (held_mu held). 0 when it runs. */
static int watchdog_start(dlock_client *c)
{
    return pthread_create(&c->watchdog->thread, NULL, watchdog_main, c);
}

/* See watchdog.h. The thread starts with the first work signalled. */
int dlock__watchdog_init(dlock_client *c)
{
    watchdog *w = calloc(1, sizeof *w);
    if (w == NULL)
        return DLOCK_ENOMEM;
    dlock__cond_init(&c->due.cv);
    c->due.start = watchdog_start;
    c->watchdog = w;
    return DLOCK_OK;
}

/* See watchdog.h. */
void dlock__watchdog_free(dlock_client *c)
{
    watchdog *w = c->watchdog;
    int started;
    if (w == NULL)
        return;
    pthread_mutex_lock(&c->held_mu);
    c->due.stop = 1;
    started = c->due.started;
    pthread_cond_broadcast(&c->due.cv);
    pthread_mutex_unlock(&c->held_mu);
    if (started)
        pthread_join(w->thread, NULL);
    pthread_cond_destroy(&c->due.cv);
    free(w);
    c->watchdog = NULL;
}

/* How soon to try again after a renewal failed without a verdict. */
static int64_t retry_after(int64_t lease_ms)
{
    int64_t r = lease_ms / 10;
    if (r > 500)
        r = 500;
    return r < 10 ? 10 : r;
}

/* Record why h was lost: code is the renewal's result (DLOCK_NOT_OWNER:
 * the servers say it is not ours; else the failure, whose details are
 * this thread's last message, set by the extend). Before state LOST is
 * stored, so a reader that sees LOST sees the reason. */
static void lost_reason(dlock_client *c, dlock__held *h, int code)
{
    const char *last = dlock__msgs_peek(&c->msgs);
    char text[DLOCK__MSGLEN + 64];
    h->lost_code = code;
    if (code == DLOCK_NOT_OWNER)
        snprintf(text, sizeof text,
                 "the servers say it is no longer this owner's: its key "
                 "expired or was deleted, or another owner holds it");
    else
        snprintf(text, sizeof text, "renewals failed: %s",
                 last[0] != '\0' ? last : dlock_strerror(code));
    h->lost_why = strdup(text);
}

/* Mark h lost (code: the renewal's result) and call its callback
 * (registry lock held on entry and on return; dropped around the
 * callback). */
static void mark_lost(dlock_client *c, dlock__held *h, int code)
{
    dlock_lost_cb cb;
    void *ud;
    dlock_lock *l;
    if (atomic_load(&h->state) == DLOCK_LOST)
        return;
    lost_reason(c, h, code);
    atomic_store(&h->state, DLOCK_LOST);
    atomic_fetch_add(&c->stats.lost, 1);
    cb = h->on_lost;
    ud = h->on_lost_ud;
    l = h->wd_handle;
    assert(h->life == DLOCK__HELD_LIVE);
    if ((cb == NULL || l == NULL) && !dlock__events_on(c))
        return;
    h->flags |= DLOCK__HELD_CB; /* a release waits for us from here */
    pthread_mutex_unlock(&c->held_mu);
    dlock__event(c, DLOCK_EVENT_LOST, h->k.name, DLOCK_LOST,
                 dlock__now_us() - h->since_us, h->token);
    if (cb != NULL && l != NULL)
        cb(l, ud);
    pthread_mutex_lock(&c->held_mu);
    h->flags &= ~DLOCK__HELD_CB;
    pthread_cond_broadcast(&c->held_cv);
}

/* One round: renew every lock that is due. Returns the monotonic time of
 * the next due renewal (or -1 for none). Called with held_mu held. */
static int64_t round_once(dlock_client *c)
{
    dlock__held *hs[ROUND_MAX];
    int64_t leases[ROUND_MAX];
    int ok[ROUND_MAX];
    int n = 0, i;
    int64_t now = dlock__now_ms(), next = -1;
    dlock__held *h;

    for (h = c->held; h != NULL; h = h->next) {
        int due;
        if ((!h->watchdog && !h->confirm_pending) ||
            h->life != DLOCK__HELD_LIVE || atomic_load(&h->state) != DLOCK_OK)
            continue;
        due = now >= h->next_renew_ms;
        if (due && h->extending) {
            /* After the extend: look again shortly. */
            if (next < 0 || now + 10 < next)
                next = now + 10;
        } else if (due && n < ROUND_MAX) {
            h->wd_refs++;
            h->wd_renewing = 1;
            hs[n] = h;
            leases[n] = h->lease_ms;
            n++;
        } else if (next < 0 || h->next_renew_ms < next) {
            next = h->next_renew_ms;
        }
    }
    if (n == 0)
        return next;

    pthread_mutex_unlock(&c->held_mu);
    dlock__extend_many(c, hs, leases, n, ok, NULL);
    pthread_mutex_lock(&c->held_mu);
    for (i = 0; i < n; i++) /* first: a lost callback may extend */
        hs[i]->wd_renewing = 0;
    pthread_cond_broadcast(&c->held_cv); /* extends waiting for it */

    now = dlock__now_ms();
    for (i = 0; i < n; i++) {
        h = hs[i];
        assert(h->wd_refs > 0);
        h->wd_refs--;
        if (h->life != DLOCK__HELD_LIVE) {
            /* Released meanwhile: the last user frees it. */
            if (h->life == DLOCK__HELD_UNLINKED && h->handles <= 0 &&
                h->wd_refs == 0)
                dlock__held_free(h);
            continue;
        }
        if (ok[i] == DLOCK_OK) {
            atomic_fetch_add(&c->stats.renewals, 1);
            h->confirm_pending = 0;
            h->next_renew_ms = now + h->lease_ms / 3;
        } else if (ok[i] == DLOCK_NOT_OWNER ||
                   atomic_load(&h->valid_until_ms) <= now) {
            h->confirm_pending = 0;
            mark_lost(c, h, ok[i]);
        } else {
            h->next_renew_ms = now + retry_after(h->lease_ms);
        }
        /* Released locks may have gone while the callback ran. */
    }
    return now; /* look again at once: more may be due */
}

/* Retry the pending undos (maybe-taken locks to give back). Returns 1 if
 * some remain. Called with held_mu held; dropped around the I/O. */
static int undo_round(dlock_client *c)
{
    dlock__undo *list = c->undos, *keep = NULL, *u, *next;
    int64_t now;
    if (list == NULL)
        return 0;
    c->undos = NULL;
    pthread_mutex_unlock(&c->held_mu);
    for (u = list; u != NULL; u = next) {
        next = u->next;
        u->nodes = dlock__undo_send(c, &u->k, u->owner, u->nodes, u->depth,
                                    u->token, 0, 1, NULL);
        now = dlock__now_ms();
        if (u->nodes != 0 && now < u->until_ms) {
            u->next = keep;
            keep = u;
        } else {
            free(u);
        }
    }
    pthread_mutex_lock(&c->held_mu);
    while (keep != NULL) {
        next = keep->next;
        keep->next = c->undos;
        c->undos = keep;
        keep = next;
    }
    return c->undos != NULL;
}

/* The thread: sleep until the next renewal is due or work is signalled
 * (c->due), renew. */
static void *watchdog_main(void *arg)
{
    dlock_client *c = arg;
    dlock__due *d = &c->due;
    pthread_mutex_lock(&c->held_mu);
    while (!d->stop) {
        int64_t next;
        /* Requests given up on that a NOSCRIPT answer makes us send
         * again (a Redlock release returned with a majority): if no
         * thread has used their connection since, this pass does. */
        pthread_mutex_unlock(&c->held_mu);
        dlock__nodes_settle(&c->ns);
        pthread_mutex_lock(&c->held_mu);
        next = round_once(c);
        if (d->stop)
            break;
        if (undo_round(c)) {
            int64_t soon = dlock__now_ms() + 100;
            if (next < 0 || soon < next)
                next = soon;
        }
        if (d->stop)
            break;
        if (next >= 0 && next <= dlock__now_ms()) {
            /* More may be due (or failures wait for retry_after). */
            if (!d->kicked)
                continue;
        }
        if (!d->kicked) {
            int64_t tick = dlock__now_ms() + IDLE_TICK_MS;
            if (next < 0 || next > tick)
                next = tick;
            d->sleeping = 1;
            d->sleep_until = next;
            dlock__cond_wait_until(&d->cv, &c->held_mu, next);
            d->sleeping = 0;
        }
        d->kicked = 0;
    }
    pthread_mutex_unlock(&c->held_mu);
    return NULL;
}
