/*
 * lock.h - a held lock's operations that other lock-layer files use
 * (lock.c): the handle, renewal of many leases in one call (the
 * watchdog's), and giving back what an acquire may have taken (undo).
 * lock.c and watchdog.c call each other: the one cycle of the layering
 * (the watchdog renews through lock.c; an undo that is left over is
 * handed to the watchdog).
 */
#ifndef DLOCK_LOCK_H
#define DLOCK_LOCK_H

#include <stdint.h>

#include "hold/held.h"

/* The fair handoff lease: a lock handed to a waiter has this lease (at
 * most) until the new owner confirms it; the bound on how long a waiter
 * that died while being handed the lock can hold the others up. */
#define DLOCK__FAIR_HANDOFF_MS 2000

/* The fence hash outlives the last acquisition by this long (7 days) by
 * default (the option fence_retention_ms); see docs/design.md, "Fence
 * retention". acquire.lua has it as a constant (RETAIN) to keep the hot
 * path's command short: other retentions are sent (ARGV[9]). */
#define DLOCK__FENCE_RETENTION_MS (7LL * 24 * 3600 * 1000)

/* How long a fence hash that must exist is kept: the client's
 * fence_retention_ms, or the default when that is 0 (no retention: only a
 * Redlock fencing round still writes one, and the release that frees the
 * name deletes it). */
int64_t dlock__fence_keep_ms(const dlock_client *c); /* retention.c */

/* The fence retention the scripts are told (retention.c): the client's
 * fence_retention_ms, except that a client of several servers (Redlock)
 * keeps the default when it is 0: its releases record their tokens (r,
 * x) so that a renewal's late take-back (retake.lua) cannot bring a
 * released hold back, and the majority's counters order its tokens. */
int64_t dlock__fence_retention(const dlock_client *c);

/* Append acquire.lua's ARGV[9] (the fence retention) to b, an acquire
 * command built so far, when the client's retention is neither the
 * default nor 0 (which the mode carries), with the placeholders of the
 * ARGV[4..8] it left off (retention.c). */
struct dlock__cmdbuf;
void dlock__acquire_retention_args(struct dlock__cmdbuf *b,
                                   const dlock_client *c);

/* A new handle for h: DLOCK_OK and *out, or DLOCK_ENOMEM (message set). */
int dlock__handle_new(dlock_client *c, dlock__held *h, dlock_lock **out);

/* The lease a fair handoff gives until the new owner confirms it:
 * min(lease_ms, DLOCK__FAIR_HANDOFF_MS). */
int64_t dlock__fair_handoff_lease(int64_t lease_ms);

/* The common end of every successful acquire (locks, permits, readers).
 * Call with c->held_mu held, after h's fields are set and h is linked:
 * schedules h's first renewal (a fair handoff's short lease, valid until
 * valid_until, is confirmed at half of what is left of it; any other
 * lease renewed at a third), unlocks held_mu, counts the acquisition and
 * wakes the watchdog when it has to act. */
void dlock__held_started(dlock_client *c, dlock__held *h, int64_t lease_ms,
                         int64_t valid_until);

/* Give the caller a new handle on h (see dlock__handle_new); a watchdog
 * hold keeps it as the handle its renewals and on_lost callback name. */
int dlock__handle_give(dlock_client *c, dlock__held *h, int watchdog,
                       dlock_lock **out);

/* Extend hs[0..n-1] to leases[i] ms from now on their nodes in one call
 * per node; ok[i] gets DLOCK_OK / DLOCK_NOT_OWNER / an error. pins: the
 * one hold's pinned connections (see dlock__held.pins), or NULL. (The
 * watchdog's batches go over pooled connections: an extend that
 * overtakes an acquire still out on a minority node finds no owner
 * there, and that node keeps the acquire's lease, which the next
 * renewal raises: the majority's leases are what count.) */
void dlock__extend_many(dlock_client *c, dlock__held **hs,
                        const int64_t *leases, int n, int *ok,
                        struct dlock__conn **pins);

/* Send release.lua for (owner, depth, token) on lock k to the nodes in
 * mask (over pins[i] where set; pins may be NULL); returns the nodes that
 * did not answer. ticket > 0: a Redlock
 * fair waiter goes back into the queue at that place. eval: send the
 * script's source, not its SHA (a retry of an undo whose first send got
 * no answer: a late NOSCRIPT nobody reads would lose it). */
uint64_t dlock__undo_send(dlock_client *c, const dlock__keys *k,
                          const char *owner, uint64_t mask, int depth,
                          uint64_t token, uint64_t ticket, int eval,
                          struct dlock__conn **pins);

/* Give back what an acquire of h may have taken (depth, token) on the
 * nodes in mask: at once (waiting for answers no longer than the attempt's
 * end, h->attempt_end_ms), and for nodes that do not answer, again from
 * the watchdog thread with the script's source until they answer or
 * lease_ms has passed. eval: send the source at once too; needed when a
 * node did not answer the acquire (it may be stalled: the undo must not
 * depend on a reply read later, and this process may be gone by then);
 * nodes that answered get the SHA (a NOSCRIPT answer is retried with the
 * source on the spot; no answer in time, by the watchdog). ticket: as
 * for dlock__undo_send (the retries do not requeue: the waiter's next
 * refresh does). Goes over h's pinned connections (h->pins: behind the
 * acquire it undoes), which it gives back. Returns the nodes that did
 * not answer at once: there the give-back may still arrive later (the
 * watchdog's retries, or a request given up on), and the caller must not
 * let a later attempt use h->owner (dlock__give_back in withdraw.h). */
uint64_t dlock__undo_acquire(dlock_client *c, dlock__held *h, uint64_t mask,
                             int depth, uint64_t token, int64_t lease_ms,
                             uint64_t ticket, int eval);

#endif /* DLOCK_LOCK_H */
