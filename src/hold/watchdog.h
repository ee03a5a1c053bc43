/*
 * watchdog.h - the lease renewer thread (watchdog.c): renews watchdog
 * locks, confirms fair handoffs, retries undos. Started with the first
 * work the registry signals (dlock__work_due in held.h): nothing of the
 * lock layer calls it; client.c makes and frees it.
 */
#ifndef DLOCK_WATCHDOG_H
#define DLOCK_WATCHDOG_H

#include <stdint.h>

#include "dlock.h"

/* Make the watchdog's state (the thread starts on the first work due). */
int dlock__watchdog_init(dlock_client *c);

/* Stop the thread and free the state. Accepts a client without one. */
void dlock__watchdog_free(dlock_client *c);

#endif /* DLOCK_WATCHDOG_H */
