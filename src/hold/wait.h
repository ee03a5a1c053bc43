/*
 * wait.h - one wait of any kind (wait.c): after an attempt found the name
 * taken (or in its lock-delay, or its servers away: an outage), attempt
 * again until acquired, the deadline, cancellation or an error.
 *
 * The policy is pure: given what the last attempt (or sleep) came to, it
 * says what to do next and until when (try, sleep, wait for a wake or the
 * timeout, done). Outage riding, the lock-delay, the split-vote back-off,
 * the queue's refreshes are in it, for every kind and topology; the
 * blocking driver (dlock__wait) obeys it, and a loop driver can too.
 * Above attempt.h and notify.h.
 */
#ifndef DLOCK_HOLD_WAIT_H
#define DLOCK_HOLD_WAIT_H

#include <stdint.h>

#include "hold/attempt.h"
#include "hold/core.h"
#include "hold/held.h"
#include "hold/kind.h"

/* What to do next. */
typedef enum dlock__next {
    DLOCK__W_TRY,   /* attempt now */
    DLOCK__W_SLEEP, /* sleep until *until (cancelable) */
    DLOCK__W_WAKE,  /* sleep until a wake (a release, a handoff) or *until */
    DLOCK__W_DONE   /* return *rc */
} dlock__next;

/* What dlock__wait_next is told after a sleep or a wake (not an
 * attempt's status). */
#define DLOCK__SLEPT 1

/* A waiting acquire rides out an outage (dlock__outage_retryable) for at
 * most this long in a row, unless its client says otherwise
 * (dlock_client_set_outage_ride_ms). */
#define DLOCK__OUTAGE_RETRY_MS 60000

/* The wait's state: what the policy reads and keeps. */
typedef struct dlock__wait {
    int strategy;        /* DLOCK_WAIT_*, after the fallbacks */
    int queued;          /* the waiting tries hold a place in a queue */
    int subscribed;      /* there is a subscription to wake on */
    int sentinel;        /* a Sentinel master: any ESERVER is an outage */
    int no_ride;         /* DLOCK_ACQUIRE_NO_OUTAGE_WAIT: outages end it */
    int64_t ride_ms;     /* an outage in a row ends it after this long: 0
                            DLOCK__OUTAGE_RETRY_MS, -1 never (the client's) */
    int64_t deadline;    /* monotonic, -1: none */
    int64_t spin_min_ms; /* the spin backoff's bounds */
    int64_t spin_max_ms;
    int round;            /* spin backoff round */
    int64_t pttl;         /* the holder's lease left, as last reported */
    uint64_t nbusy;       /* queued: the last token granted, as it saw */
    int64_t outage_since; /* first error of a ridden streak, 0: none */
    int outage_rc;        /* its last error */
} dlock__wait;

/* The strategy and queueing of a wait of kind k under strategy s (the
 * client's), before its subscription: *queued set. */
int dlock__wait_strategy(const dlock__kind *k, int s, int *queued);

/* How a waiter's attempt asks, for every kind, topology and driver (the
 * blocking wait, the engine loop's, the single-server loop's): a first
 * try TRY, or TRY_FAIR under FAIR (respects the queue, does not join
 * it); a waiting attempt FIFO when queued under FAIR (handed over), QUEUE
 * when queued (woken in turn), else WAIT. s and queued as
 * dlock__wait_strategy gives them. Pure. */
dlock__ask dlock__wait_ask(int first, int s, int queued);

/* A fair Redlock waiter's place in every node's queue, the same on each
 * so that all serve the waiters in one order: the wall clock (µs) when it
 * first queues. */
uint64_t dlock__wait_ticket(void);

/* The wait's fallback when it has no subscription (refused, timed out):
 * a queue that a waiter may hold while polling stays; else it spins. */
void dlock__wait_unsubscribed(dlock__wait *x, const dlock__kind *k);

/* 1 when a waiting acquire rides out rc rather than return it (issue 29
 * items 8 and 19), in every topology: servers that cannot be reached or
 * answer too late (EIO, ETIMEDOUT: a restart, a pause), too few that
 * answer (NO_QUORUM), a server not ready (ESERVER with notready: LOADING,
 * MASTERDOWN, BUSY, TRYAGAIN), too few replicas (NOT_REPLICATED: the
 * attempt gave its grant back, and a give-back acts only on its own
 * attempt's grant, so trying again risks nothing a new acquire would
 * not; a replica restarting ends). On Sentinel any ESERVER: the errors of a
 * master going away or being replaced (READONLY, no master named yet)
 * last until the sentinels have promoted a replica. The same outages the
 * CLI rides (cli_wait_through_outages). */
int dlock__outage_retryable(int sentinel, int rc, int notready);

/* The policy. rc: the last attempt's status (g: what it got), or
 * DLOCK__SLEPT after a sleep or a wake. Sets *until (monotonic ms, never
 * past the deadline) for SLEEP and WAKE, *rc_out for DONE. Pure but for
 * the spin backoff's jitter. */
dlock__next dlock__wait_next(dlock__wait *x, int rc, const dlock__got *g,
                             int64_t now, int64_t *until, int *rc_out);

/* A handoff message (one server) read after the attempt sent at `sent`
 * that saw nbusy as the last token granted: the end of its validity, or
 * -1 when it is stale or too little is left (the next attempt confirms
 * it if it is still ours). hl: the handoff lease; drift its allowance.
 * Pure. */
int64_t dlock__handoff_valid_until(int64_t sent, uint64_t nbusy, uint64_t token,
                                   int64_t hl, int64_t drift, int64_t now);

/* The blocking wait of w on h: pttl the holder's lease left as the first
 * attempt saw it (-1: unknown), gen the cancel generation at the start,
 * outage the first attempt's error when it was an outage (0: none),
 * no_ride: outages end the wait. DLOCK_OK with *g filled, or the status
 * (a timeout during an outage returns the outage's error). *warn set when
 * it got in without notifications because the server's ACL refuses
 * them. */
int dlock__wait_blocking(dlock_client *c, dlock__held *h, const dlock__want *w,
                         int64_t deadline, uint64_t gen, int64_t pttl,
                         int outage, int no_ride, dlock__got *g, int *warn);

#endif /* DLOCK_HOLD_WAIT_H */
