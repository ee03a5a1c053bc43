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

#include <poll.h>
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
    int64_t place_ms;    /* busy, queued: how long the queue keeps the
                          * place (a long queue's last longer: refresh at
                          * a third of it); 0: DLOCK__WAITER_TTL_MS */
    int64_t valid_until; /* monotonic */
    uint64_t nodes;      /* nodes that granted */
    int split;           /* Redlock: some nodes granted, too few (undone) */
    int notready;        /* DLOCK_ESERVER: a server not ready (LOADING,
                          * MASTERDOWN, BUSY, TRYAGAIN): may end */
} dlock__got;

typedef struct dlock__attempt_state dlock__attempt_state;

/* dlock__attempt_process: not done yet (poll and process again). */
#define DLOCK__AGAIN 1

/*
 * One attempt as a state machine on the heap, driven like the engine's
 * calls (call.h) by a poll() loop (dlock__attempt) or an event loop:
 * each phase that does I/O (send, fence, undo) is one engine call that
 * the attempt starts and advances. The attempt keeps its own message
 * (dlock__attempt_errmsg): what its phases say goes there, not to the
 * thread's message (errors.h: dlock__msgs_capture), so that attempts of
 * several operations can run on one thread.
 *
 * Start one attempt of w (copied) on every node h's lock-delay allows,
 * asking as ask (ticket: a fair Redlock waiter's place in every node's
 * queue, 0 for none), and send what can be sent. h (its owner, depth,
 * pins, attempt_end_ms) belongs to the attempt until it is freed. mem:
 * dlock__attempt_size(c) bytes (aligned as malloc's) the attempt runs in,
 * the caller's until dlock__attempt_free; or NULL: its own allocation.
 * DLOCK_OK (*out set; it may be done already) or DLOCK_ENOMEM.
 */
int dlock__attempt_start(dlock__attempt_state **out, void *mem, dlock_client *c,
                         dlock__held *h, const dlock__want *w, dlock__ask ask,
                         uint64_t ticket);

/* The bytes an attempt of c takes (dlock__attempt_start's mem). */
size_t dlock__attempt_size(const dlock_client *c);

/* The descriptors to poll now (dlock__call_pollfds' rules: returns how
 * many, only max filled) and in *wake_ms the monotonic time by which
 * dlock__attempt_process must run anyway; never past the attempt's end
 * (h->attempt_end_ms, grown by a WAIT's timeout with wait_replicas). */
int dlock__attempt_pollfds(dlock__attempt_state *a, struct pollfd *pfd, int max,
                           int64_t *wake_ms);

/* Do what the descriptors (as filled by the last pollfds, revents set;
 * n 0: none) and the clock allow. Never blocks but for the connection
 * opens the engine still does inline (call.h). Returns DLOCK__AGAIN, or
 * the attempt's status (dlock__attempt's), the same on every later call;
 * dlock__attempt_got then holds what it got. */
int dlock__attempt_process(dlock__attempt_state *a, const struct pollfd *pfd,
                           int n);

/* What the attempt got (final once done). */
const dlock__got *dlock__attempt_got(const dlock__attempt_state *a);

/* The attempt's message ("" when it set none). */
const char *dlock__attempt_errmsg(const dlock__attempt_state *a);

/* Free a (NULL accepted). Not done: it is cut short, and what it may
 * have taken (requests sent, grants, a give-back not answered) is handed
 * to the watchdog to give back, without waiting here. */
void dlock__attempt_free(dlock__attempt_state *a);

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
/* DLOCK_NO_QUORUM with its message: a grant of NAME came after its
 * validity (lease_ms, the attempt took took_ms) was used up. */
int dlock__too_late_error(dlock_client *c, const char *name, int64_t lease_ms,
                          int64_t took_ms);

/* The blocking driver: start, then poll() and process until done; the
 * attempt's message becomes this thread's. */
int dlock__attempt(dlock_client *c, dlock__held *h, const dlock__want *w,
                   dlock__ask ask, uint64_t ticket, dlock__got *g);

#endif /* DLOCK_HOLD_ATTEMPT_H */
