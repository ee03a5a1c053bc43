/*
 * watchdog.h - the lease renewer thread (watchdog.c): renews watchdog
 * locks, confirms fair handoffs, retries undos. Started with the first
 * lock that needs it.
 */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include <stdint.h>

#include "dlock.h"

/* Make the watchdog's state (the thread starts on the first kick). */
int dlock__watchdog_init(dlock_client *c);

/* Stop the thread and free the state. Accepts a client without one. */
void dlock__watchdog_free(dlock_client *c);

/* Tell the watchdog of work due at due_ms (monotonic): a lock to renew or
 * confirm, an undo to retry. Starts the thread; wakes it only if it would
 * sleep past due_ms (it looks at least once a second anyway). */
void dlock__watchdog_kick(dlock_client *c, int64_t due_ms);

#endif /* DLOCK_WATCHDOG_H */
