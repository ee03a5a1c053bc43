/*
 * wait.c - one wait of any kind (wait.h): the pure policy, then its
 * blocking driver. By kind and strategy:
 *
 *  - a queued waiter (a fair lock's, a semaphore's under NOTIFY or FAIR)
 *    holds a place in the name's queue, refreshed at a third of the
 *    waiter TTL, and sleeps on its process's handoff channel: a release
 *    hands it the lock or permit ('h TOKEN OWNER'; confirmed at once
 *    with wait_replicas, else by the watchdog), or wakes it to try
 *    ('h 0 OWNER', or a Redlock majority's wake);
 *  - an unqueued waiter (a lock under NOTIFY, a reader) sleeps until a
 *    release is announced on the name's channel or the lease would have
 *    run out;
 *  - DLOCK_WAIT_SPIN: jittered backoff, never past the lease.
 *
 * For every kind: the lock-delay is waited out; outages (servers away,
 * late or not ready; on Sentinel, errors a failover explains) are ridden
 * out (DLOCK__OUTAGE_RETRY_MS in a row, within the wait); after a
 * Redlock split vote the waiter backs off with jitter; a SUBSCRIBE the
 * ACL refuses is not asked again for NOSUB_RETRY_MS, and the waiter
 * polls, leaving one warning.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hold/held.h"
#include "notify/notify.h"
#include "hold/wait.h"
#include "hold/withdraw.h"

/* After the server refused our subscription (ACL NOPERM), waiters poll
 * and do not ask again for this long. */
#define NOSUB_RETRY_MS 10000

/* ---- the policy (pure) ------------------------------------------------- */

/* See wait.h. */
int dlock__wait_strategy(const dlock__kind *k, int s, int *queued)
{
    /* A kind without a queue waits by notification under FAIR. */
    if (k->queue == DLOCK__Q_NONE && s == DLOCK_WAIT_FAIR)
        s = DLOCK_WAIT_NOTIFY;
    *queued = (k->queue == DLOCK__Q_FAIR && s == DLOCK_WAIT_FAIR) ||
              (k->queue == DLOCK__Q_ALL && s != DLOCK_WAIT_SPIN);
    return s;
}

/* See wait.h. */
dlock__ask dlock__wait_ask(int first, int s, int queued)
{
    if (first)
        return s == DLOCK_WAIT_FAIR ? DLOCK__ASK_TRY_FAIR : DLOCK__ASK_TRY;
    if (queued && s == DLOCK_WAIT_FAIR)
        return DLOCK__ASK_FIFO;
    return queued ? DLOCK__ASK_QUEUE : DLOCK__ASK_WAIT;
}

/* See wait.h. */
uint64_t dlock__wait_ticket(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* See wait.h. */
void dlock__wait_unsubscribed(dlock__wait *x, const dlock__kind *k)
{
    x->subscribed = 0;
    if (x->queued && k->queue_unsub)
        return; /* queued still: refreshes find a handoff made to it */
    x->queued = 0;
    x->strategy = DLOCK_WAIT_SPIN;
}

/* See wait.h. */
int dlock__outage_retryable(int sentinel, int rc, int notready)
{
    return rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_NO_QUORUM ||
           rc == DLOCK_NOT_REPLICATED ||
           (rc == DLOCK_ESERVER && (sentinel || notready));
}

/* The earlier of the deadline and until. */
static int64_t cap(const dlock__wait *x, int64_t until)
{
    return x->deadline >= 0 && x->deadline < until ? x->deadline : until;
}

/* The next jittered spin delay (uniform in [d/2, d], d doubling from
 * spin_min_ms to spin_max_ms). */
static int64_t spin_delay(dlock__wait *x)
{
    return dlock__backoff_ms(x->spin_min_ms, x->spin_max_ms, x->round++);
}

/* After a busy attempt: how to wait for the next. A queued waiter sleeps
 * until a wake or its next refresh (a third of the waiter TTL, sooner when
 * the lease ends sooner); after a split vote, when another live waiter is
 * ahead (nobody hands over a free lock, and one that gives up wakes
 * nobody: F6 in docs/reliability.md), or without a subscription, no
 * longer than the spin backoff. Unqueued: until a release is announced or
 * the lease would have run out; after a split vote, the backoff (the
 * contenders' undos wake everyone at once). */
static dlock__next after_busy(dlock__wait *x, const dlock__got *g, int64_t now,
                              int64_t *until)
{
    int64_t third = dlock__refresh_every(g->place_ms), d;
    /* The newest reading only: an earlier one says nothing of now. A
     * waiter woken early kept it and slept it out again, a whole lease
     * after the lease had ended (issue 29 item 7). 0: it ends within the
     * millisecond, so try again in one; below 0: not known. */
    x->pttl = g->pttl > 0 ? g->pttl : g->pttl == 0 ? 1 : -1;
    x->nbusy = g->nbusy;
    if (x->strategy == DLOCK_WAIT_SPIN) {
        d = spin_delay(x);
        *until = cap(x, now + (x->pttl > 0 && x->pttl < d ? x->pttl : d));
        return DLOCK__W_SLEEP;
    }
    if (x->queued) {
        d = x->pttl > 0 && !g->ahead && x->pttl < third ? x->pttl : third;
        if (!x->subscribed || g->split || g->ahead) {
            int64_t s = spin_delay(x);
            d = s < d ? s : d;
        }
        *until = cap(x, now + d);
        return x->subscribed ? DLOCK__W_WAKE : DLOCK__W_SLEEP;
    }
    if (g->split) {
        *until = cap(x, now + spin_delay(x));
        return DLOCK__W_SLEEP;
    }
    *until = cap(x, now + (x->pttl > 0 ? x->pttl : x->spin_max_ms));
    return DLOCK__W_WAKE;
}

/* See wait.h. */
dlock__next dlock__wait_next(dlock__wait *x, int rc, const dlock__got *g,
                             int64_t now, int64_t *until, int *rc_out)
{
    if (rc == DLOCK__SLEPT) {
        if (x->deadline < 0 || now < x->deadline)
            return DLOCK__W_TRY;
        /* Its message is the thread's: say the cause. */
        *rc_out = x->outage_since != 0 ? x->outage_rc : DLOCK_TIMEDOUT;
        return DLOCK__W_DONE;
    }
    if (rc == DLOCK_LOCK_DELAY) { /* wait it out (or until the deadline) */
        *until = cap(x, now + g->pttl);
        return DLOCK__W_SLEEP;
    }
    if (!x->no_ride &&
        dlock__outage_retryable(x->sentinel, rc, g != NULL && g->notready)) {
        if (x->outage_since == 0)
            x->outage_since = now;
        x->outage_rc = rc;
        int64_t ride = x->ride_ms != 0 ? x->ride_ms : DLOCK__OUTAGE_RETRY_MS;
        if (ride > 0 && now - x->outage_since >= ride) {
            *rc_out = rc;
            return DLOCK__W_DONE;
        }
        *until = cap(x, now + spin_delay(x));
        return DLOCK__W_SLEEP;
    }
    x->outage_since = 0;
    if (rc != DLOCK_BUSY) {
        *rc_out = rc;
        return DLOCK__W_DONE;
    }
    return after_busy(x, g, now, until);
}

/* See wait.h. A token not above the last one granted when our attempt
 * ran (nbusy) was granted before that attempt, which would have confirmed
 * it had it still been ours: it has lapsed. A newer one was granted after
 * the attempt was sent, so its lease runs at least until sent + hl (the
 * message may have waited in our socket while this process was paused
 * for longer than hl: that is all that is sure). */
int64_t dlock__handoff_valid_until(int64_t sent, uint64_t nbusy, uint64_t token,
                                   int64_t hl, int64_t drift, int64_t now)
{
    int64_t until = sent + hl - drift;
    if (token <= nbusy || until - now < hl / 4)
        return -1;
    return until;
}

/* ---- the blocking driver ------------------------------------------------ */

/* One blocking wait: the policy's state and what the driver needs. */
typedef struct waiting {
    dlock__wait x;
    dlock_client *c;
    dlock__held *h;
    const dlock__want *w;
    const dlock__kind *k;
    uint64_t gen; /* cancel generation at the start */
    dlock__waiter *sub;
    int polling;     /* notifications refused (ACL): polling instead */
    uint64_t ticket; /* fair, Redlock: the place in every node's queue */
    int64_t sent;    /* when the last attempt was sent (monotonic) */
} waiting;

/* Subscribe before the next attempt, so that a release between it and
 * the sleep is not missed. A SUBSCRIBE the ACL refused moments ago is not
 * asked again. Without a subscription the wait falls back (see
 * dlock__wait_unsubscribed). */
static void wait_begin(waiting *y)
{
    dlock_client *c = y->c;
    int64_t now = dlock__now_ms();
    const char *chan, *owner;
    size_t len;
    int rc;
    if (y->x.strategy == DLOCK_WAIT_SPIN)
        return;
    if (atomic_load(&c->nopub) && now < atomic_load(&c->nosub_until_ms)) {
        rc = DLOCK_EAUTH; /* refused moments ago: do not ask again yet */
    } else {
        dlock__wait_channel(y->h, y->x.queued, &chan, &len, &owner);
        rc = dlock__notify_begin(c->notifier, chan, len, owner, &y->sub,
                                 cap(&y->x, now + c->opts.command_timeout_ms),
                                 y->gen);
        if (rc == DLOCK_EAUTH)
            atomic_store(&c->nosub_until_ms, now + NOSUB_RETRY_MS);
    }
    if (rc == DLOCK_OK) {
        y->x.subscribed = 1;
        return;
    }
    y->sub = NULL;
    y->polling = rc == DLOCK_EAUTH;
    dlock__wait_unsubscribed(&y->x, y->k);
}

/* Before an attempt: cancelled, or (a kind whose process's waiters take
 * turns) not our turn by the deadline? 1 to go on, else the status. */
static int may_try(waiting *y)
{
    int t;
    if (atomic_load(&y->c->cancel_gen) != y->gen)
        return DLOCK_CANCELED;
    if (y->sub == NULL || !y->k->turns || y->x.strategy == DLOCK_WAIT_SPIN)
        return 1;
    t = dlock__notify_turn(y->sub, y->x.deadline);
    return t == 1 ? 1 : t == 0 ? DLOCK_TIMEDOUT : t;
}

/* One attempt of the wait. */
static int try_once(waiting *y, dlock__got *g)
{
    dlock_client *c = y->c;
    dlock__ask ask = dlock__wait_ask(0, y->x.strategy, y->x.queued);
    if (ask == DLOCK__ASK_FIFO && y->ticket == 0 && c->ns.n > 1)
        /* Its place, taken when it first queues (after it got its
         * process's turn). */
        y->ticket = dlock__wait_ticket();
    if (y->x.queued && y->sub != NULL)
        /* A handoff read from now on came after this attempt was sent,
         * or is older than the token it reports (nbusy). */
        dlock__notify_handoff_reset(y->sub);
    y->sent = dlock__now_ms();
    return dlock__attempt(c, y->h, y->w, ask, y->ticket, g);
}

/* Wait for a wake or until. 1 when the lock or permit was handed to us
 * (*g filled, to confirm), 0 to try again, DLOCK_CANCELED. */
static int wake(waiting *y, int64_t until, dlock__got *g)
{
    int64_t hl, valid;
    uint64_t tok;
    int rc;
    if (!y->x.queued) {
        rc = dlock__notify_wait(y->sub, until);
        return rc == 1 ? 0 : rc; /* woken or not: try again */
    }
    rc = dlock__notify_wait_handoff(y->sub, until);
    if (rc != 1)
        return rc;
    tok = dlock__notify_handoff_token(y->sub);
    if (!dlock__notify_handed(y->sub) || tok == 0)
        return 0; /* woken: our turn to try */
    /* Handed over (one server): the handoff lease holds until we confirm
     * it (the watchdog does, at half of what is left of it). */
    hl = dlock__fair_handoff_lease(y->w->lease_ms);
    valid = dlock__handoff_valid_until(y->sent, y->x.nbusy, tok, hl,
                                       dlock__drift(y->c, hl), dlock__now_ms());
    if (valid < 0)
        return 0; /* try again: the attempt confirms it if still ours */
    memset(g, 0, sizeof *g);
    g->token = tok;
    g->depth = 1;
    g->nodes = 1;
    g->valid_until = valid;
    y->h->confirm_pending = 1;
    return 1;
}

/* The driver's loop: obey the policy until it is done. */
static int run(waiting *y, dlock__got *g)
{
    dlock_client *c = y->c;
    int64_t until = 0;
    int rc = DLOCK_OK;
    dlock__next next =
        dlock__wait_next(&y->x, DLOCK__SLEPT, g, dlock__now_ms(), &until, &rc);
    for (;;) {
        if (next == DLOCK__W_DONE)
            return rc;
        if (next == DLOCK__W_TRY) {
            rc = may_try(y);
            if (rc == DLOCK_TIMEDOUT && y->x.outage_since != 0)
                return y->x.outage_rc; /* say the cause */
            if (rc != 1)
                return rc;
            rc = try_once(y, g);
            if (rc == DLOCK_BUSY) {
                atomic_fetch_add(&c->stats.busy, 1);
                atomic_fetch_add(&c->stats.waits, 1);
            }
            next = dlock__wait_next(&y->x, rc, g, dlock__now_ms(), &until, &rc);
            continue;
        }
        rc = next == DLOCK__W_SLEEP ? dlock__sleep_cancelable(c, y->gen, until)
                                    : wake(y, until, g);
        if (rc == 1)
            return dlock__confirm_handed(c, y->h, y->w->lease_ms, g->token,
                                         &g->valid_until, y->k->handed);
        if (rc < 0)
            return rc;
        next = dlock__wait_next(&y->x, DLOCK__SLEPT, g, dlock__now_ms(), &until,
                                &rc);
    }
}

/* See wait.h. */
int dlock__wait_blocking(dlock_client *c, dlock__held *h, const dlock__want *w,
                         int64_t deadline, uint64_t gen, int64_t pttl,
                         int outage, int no_ride, dlock__got *g, int *warn)
{
    waiting y = {.c = c, .h = h, .w = w, .gen = gen};
    int rc;
    y.k = dlock__kind_of(w->kind);
    y.x.strategy =
        dlock__wait_strategy(y.k, c->opts.wait_strategy, &y.x.queued);
    y.x.sentinel = c->ns.kind == DLOCK__TOPO_SENTINEL;
    y.x.deadline = deadline;
    y.x.spin_min_ms = c->opts.spin_min_ms;
    y.x.spin_max_ms = c->opts.spin_max_ms;
    y.x.pttl = pttl;
    y.x.no_ride = no_ride;
    y.x.ride_ms = atomic_load(&c->outage_ride_ms);
    if (outage != 0) { /* the first attempt's: at the deadline, say it */
        y.x.outage_since = dlock__now_ms();
        y.x.outage_rc = outage;
    }
    wait_begin(&y);
    rc = run(&y, g);
    if (y.x.queued && rc != DLOCK_OK)
        y.k->leave(c, h);
    if ((rc == DLOCK_TIMEDOUT || rc == DLOCK_CANCELED) && y.k->give_up)
        y.k->give_up(c, h); /* a waiting writer's mark goes with it */
    dlock__notify_end(y.sub);
    if (rc == DLOCK_OK && (y.polling || atomic_load(&c->nopub)))
        *warn = 1;
    return rc;
}
