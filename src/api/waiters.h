/*
 * waiters.h - who waits for a lock, as far as Redis can tell (waiters.c),
 * for dlock_lock_inspect(). Above core.h.
 */
#ifndef DLOCK_WAITERS_H
#define DLOCK_WAITERS_H

#include <stdint.h>

#include "hold/core.h"
#include "hold/held.h"

/*
 * Fill out->notify_waiters (the subscribers of the lock's release
 * channel k->chan, the most any node counts; -1 when no node answered)
 * and out->waiters (notify_waiters + out->fair_queue, or -1 when
 * notify_waiters is unknown), asking every node by deadline_ms. Never
 * fails the inspect: what cannot be counted is -1.
 */
void dlock__count_waiters(dlock_client *c, const dlock__keys *k,
                          int64_t deadline_ms, dlock_info *out);

#endif /* DLOCK_WAITERS_H */
