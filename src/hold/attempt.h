/*
 * attempt.h - one acquire attempt of any kind (attempt.c): ask (the
 * nodes the lock-delay allows), send (the kind's acquire script to them,
 * done at a majority over Redlock), the verdict (verdict.h), fence (raise
 * the Redlock fencing counter when the granting nodes disagree), undo
 * (give back what a failed attempt may have taken). Every step of it ends
 * by the attempt's end, command_timeout_ms after it began (dlock.h).
 * Above kind.h, verdict.h, withdraw.h and release.h (the undo).
 */
#ifndef DLOCK_HOLD_ATTEMPT_H
#define DLOCK_HOLD_ATTEMPT_H

#include <stdint.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/kind.h"

/* What an attempt got, for the caller to record in the held record. */
typedef struct dlock__got {
    uint64_t token;
    int depth;           /* the depth the granting nodes report */
    int64_t pttl;        /* busy: the shortest lease left, -1 unknown;
                         * DLOCK_LOCK_DELAY: the delay left */
    uint64_t nbusy;      /* busy, queued: the last token granted then */
    int ahead;           /* busy: free, but another live fair waiter is
                         * first */
    int64_t valid_until; /* monotonic */
    uint64_t nodes;      /* nodes that granted */
    int split;           /* Redlock: some nodes granted, too few (undone) */
    int notready;        /* DLOCK_ESERVER: a server not ready (LOADING,
                          * MASTERDOWN, BUSY, TRYAGAIN): may end */
} dlock__got;

/*
 * One attempt of w on every node h's lock-delay allows, asking as ask
 * (ticket: a fair Redlock waiter's place in every node's queue, 0 for
 * none). Fills *g. Returns DLOCK_OK, DLOCK_BUSY (g->pttl), DLOCK_NOT_OWNER
 * (a reentry whose earlier hold expired), DLOCK_LOCK_DELAY (g->pttl: the
 * delay left), DLOCK_NOT_REPLICATED, DLOCK_EINVAL (another limit or
 * kind), DLOCK_NO_QUORUM or an error, with its message. Whatever a failed
 * attempt may have taken is given back before it returns (what does not
 * answer, later by the watchdog); a queued Redlock waiter goes back into
 * the queue at its ticket, so a split vote costs it nothing of its place.
 */
int dlock__attempt(dlock_client *c, dlock__held *h, const dlock__want *w,
                   dlock__ask ask, uint64_t ticket, dlock__got *g);

#endif /* DLOCK_HOLD_ATTEMPT_H */
