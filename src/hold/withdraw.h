/*
 * withdraw.h - which grants of an attempt may not last (withdraw.c): a
 * grant too few replicas acknowledged (wait_replicas), or one from a node
 * whose lock-delay began during the attempt. The one attempt of every
 * kind (hold/attempt.c) judges its grants by this rule, says so with
 * these words, and gives back a failed attempt's grants the same way
 * (dlock__give_back). Above verdict.h (the tally), cluster_delay.h,
 * release.h, renew.h and notify.h.
 */
#ifndef DLOCK_WITHDRAW_H
#define DLOCK_WITHDRAW_H

#include <stdint.h>

#include "hold/verdict.h"
#include "hold/core.h"
#include "hold/held.h"

/* The nodes an attempt for h may ask: all, less (when fresh: a new hold,
 * not a reentry) those whose master is in its lock-delay (it may have
 * forgotten grants: a failover or restart). 0 when too few are left for a
 * quorum; *left_ms is then the delay still to run. */
uint64_t dlock__askable_nodes(dlock_client *c, const dlock__held *h, int fresh,
                              int64_t *left_ms);

/* Take the grants of t that may not last out of it: those of a node whose
 * lock-delay for h's key is running (only when fresh: a reentry's grant
 * stands, the hold is older than the delay), and, with wait_replicas,
 * those fewer replicas acknowledged (res[i].acks). They move to
 * t->unknown, so that the attempt's undo gives them back. Returns the
 * nodes withdrawn (0: none); *minacks (set to -1 by the caller) becomes
 * the fewest acknowledgements a grant had. */
uint64_t dlock__withdraw_grants(dlock_client *c, const dlock__held *h,
                                int fresh, dlock__tally *t,
                                const dlock__result *res, long long *minacks);

/* The status, with its message, of an attempt whose grants were
 * withdrawn: DLOCK_LOCK_DELAY (*pttl set to the delay left) when a
 * withdrawn node is in its lock-delay, else DLOCK_NOT_REPLICATED (*pttl
 * untouched). */
int dlock__withdrawn_error(dlock_client *c, const dlock__held *h,
                           uint64_t withdrawn, long long minacks,
                           int64_t *pttl);

/* DLOCK_LOCK_DELAY for h, left_ms of the delay still to run. */
int dlock__lock_delay_error(dlock_client *c, const dlock__held *h,
                            int64_t left_ms);

/*
 * Give back what a failed attempt of h may have taken on the nodes in
 * mask (dlock__undo_acquire, at depth h->depth + 1, with token, lease_ms,
 * ticket and eval as there). When some node did not answer at once, the
 * give-back may still arrive there later (the watchdog retries it, or a
 * request given up on is still on its way) and would remove whatever
 * grant h->owner then has, a later attempt's too: so a fresh hold
 * (h->depth 0) takes a new owner id for its next attempts, and a
 * give-back only ever acts on the grant of its own attempt. (A reentrant
 * attempt keeps its id, which its earlier levels hold; its give-back only
 * takes one level off a count of two or more, never the lock.) Where
 * every node answered, the give-back is done and the id stays: a Redlock
 * fair waiter keeps its place in the queues under it.
 */
void dlock__give_back(dlock_client *c, dlock__held *h, uint64_t mask,
                      uint64_t token, int64_t lease_ms, uint64_t ticket,
                      int eval);

/* A give-back of h's attempt was left unanswered (it may still arrive):
 * a fresh hold (h->depth 0) takes a new owner id for its next attempts
 * (dlock__give_back's rule). */
void dlock__give_back_left(dlock_client *c, dlock__held *h);

/* A grant handed over by a release script (a fair lock's handoff, a
 * permit passed on) came without WAIT, which only the acquirer's own
 * writes carry: with wait_replicas, confirm it at once (the extend to the
 * full lease_ms, WAITed like every lock write) before it counts. Too few
 * acknowledgements give it back (token: its token; a lock or permit given
 * back is passed on to the next waiter): DLOCK_NOT_REPLICATED, its
 * message naming what (e.g. "a permit handed over by a release").
 * DLOCK_OK (*valid_until updated), or the extend's status. Without
 * wait_replicas: DLOCK_OK at once. */
int dlock__confirm_handed(dlock_client *c, dlock__held *h, int64_t lease_ms,
                          uint64_t token, int64_t *valid_until,
                          const char *what);

#endif
