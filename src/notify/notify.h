/*
 * notify.h - release notifications (notify.c): a waiter subscribes to a
 * lock's channel, takes turns as its process's one contender, and sleeps
 * until a release (or, in fair mode, a handoff to it) is announced. One
 * subscriber thread per client, started on first use. Above the node
 * set (a narrow context, dlock__notify_ctx, instead of the client); the
 * wait (hold/wait.c) is its caller.
 */
#ifndef DLOCK_NOTIFY_H
#define DLOCK_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "dlock.h"
#include "notify/ctx.h"

/* Make a notifier over x (copied) into *out (the thread starts on first
 * use): DLOCK_OK, DLOCK_ENOMEM or DLOCK_EIO. */
int dlock__notify_init(dlock__notifier **out, const dlock__notify_ctx *x);
/* Stop the thread and free n. Accepts NULL. */
void dlock__notify_free(dlock__notifier *n);

/*
 * Register interest in a lock's channel and wait (until deadline_ms) for
 * the subscription to be confirmed on every node, so that a release after
 * this returns is never missed. Returns DLOCK_OK with *out set, or an
 * error (DLOCK_ETIMEDOUT, DLOCK_EIO...; the caller may fall back to spin).
 * Fair mode: me is the owner id a handoff would name (else NULL); a
 * handoff to it is recorded from now on, also one that arrives before the
 * waiter sleeps (the reply to its queueing attempt can come after it).
 */
int dlock__notify_begin(dlock__notifier *n, const char *chan, size_t chanlen,
                        const char *me, dlock__waiter **out,
                        int64_t deadline_ms, uint64_t cancel_gen);

/*
 * dlock__notify_begin without the wait, for a driver that must not
 * block (an event loop): the waiter is registered (*out set) and its
 * subscription asked for; dlock__notify_ready says when it is confirmed
 * (its wake-up descriptor, dlock__waiter_fd, becomes readable then).
 * DLOCK_OK or DLOCK_ENOMEM.
 */
int dlock__notify_join(dlock__notifier *n, const char *chan, size_t chanlen,
                       const char *me, dlock__waiter **out,
                       uint64_t cancel_gen);

/* Whether w's subscription is confirmed (1: a release from now on is
 * not missed), not yet (0), or refused by the servers' ACL (DLOCK_EAUTH,
 * with the message). Never blocks. */
int dlock__notify_ready(dlock__waiter *w);

/* Without blocking: 1 when something came for w since it last looked
 * (unfair: a release on its channel or a lost link; fair: a handoff or a
 * wake naming it, consumed), else 0. The client's cancel does not end
 * it (a loop cancels its own waits). */
int dlock__notify_look(dlock__waiter *w, int fair);

/*
 * Become the process's one contender for this channel: returns when this
 * thread may send an acquire attempt (at once if nobody else of this
 * process is trying, else after the current contender finishes or a
 * release is announced). 1 = go, 0 = deadline passed, DLOCK_CANCELED.
 */
int dlock__notify_turn(dlock__waiter *w, int64_t deadline_ms);

/*
 * The contender found the lock busy: give up the turn and sleep until a
 * release is announced (or the subscriber connection was lost: messages
 * may have been missed), until_ms passes, or the wait is cancelled.
 * Returns 1 (woken), 0 (until_ms), DLOCK_CANCELED.
 */
int dlock__notify_wait(dlock__waiter *w, int64_t until_ms);

/*
 * The waiter's wake-up descriptor, for a driver that polls instead of
 * blocking: an eventfd that becomes readable (POLLIN) whenever the
 * subscriber wakes the waiter's channel (a release or handoff message, a
 * lost subscriber link, a cancel, another waiter's turn ending), made on
 * the first call and closed by dlock__notify_end. The driver then clears
 * it (dlock__waiter_fd_clear) and looks with dlock__notify_wait or
 * dlock__notify_wait_handoff and an until_ms already past, which do not
 * block. Readable once at first, for what came before it was made.
 * Returns the descriptor, or DLOCK_EIO (no eventfd). Wakes may be
 * spurious, as a condition variable's.
 */
int dlock__waiter_fd(dlock__waiter *w);
void dlock__waiter_fd_clear(dlock__waiter *w);

/* Stop waiting (acquired, gave up or failed): drop the turn, drop the
 * reference (unsubscribing when it was the last), free w. */
void dlock__notify_end(dlock__waiter *w);

/* 1 when this process already has a confirmed subscription to the channel
 * (a lingering one counts): a fair waiter may then queue at once. */
int dlock__notify_subscribed(dlock__notifier *n, const char *chan, size_t len);

/* Write owner (NUL-terminated) into buf (len bytes), an owner id that a
 * waiter may be watching (the `me` given to dlock__notify_begin): under
 * the notifier's mutex, which the subscriber thread holds while it reads
 * `me`. */
void dlock__notify_rename(dlock__notifier *n, char *buf, size_t len,
                          const char *owner);

/* Wake every waiter of the client (dlock_client_cancel). Accepts NULL. */
void dlock__notify_cancel(dlock__notifier *n);

/* Fair mode: sleep until a handoff addressed to the owner id given to
 * dlock__notify_begin has arrived (1, also when it arrived before this
 * call; its token then in dlock__notify_handoff_token), or a majority of
 * nodes woke it (1, see dlock__notify_handed), until_ms (0), or
 * cancellation (DLOCK_CANCELED). A SUBSCRIBE refused by the server's ACL
 * makes dlock__notify_begin return DLOCK_EAUTH. */
int dlock__notify_wait_handoff(dlock__waiter *w, int64_t until_ms);
uint64_t dlock__notify_handoff_token(const dlock__waiter *w);

/* Fair mode: whether the wait that returned 1 found the lock handed over
 * (1; one server), or only this waiter woken as the first in the queue
 * of a majority of nodes that freed the lock (0; Redlock: it must now
 * try, and no other waiter will). */
int dlock__notify_handed(dlock__waiter *w);
/* Forget the handoff recorded for w, so that the next
 * dlock__notify_wait_handoff sleeps again: a semaphore waiter woken to
 * try again ('h 0 OWNER', no permit handed) that did not get a permit. */
void dlock__notify_handoff_reset(dlock__waiter *w);

#endif /* DLOCK_NOTIFY_H */
