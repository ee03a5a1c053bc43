/*
 * renew.h - renewing leases (renew.c): many holds in one script call per
 * node, the Cluster rounds (one call per slot, all at once), and the
 * Redlock take-back of a renewed lock on the servers that lost it. The
 * watchdog's rounds and dlock_lock_extend call it. Above kind.h,
 * holder.h and held.h.
 */
#ifndef DLOCK_HOLD_RENEW_H
#define DLOCK_HOLD_RENEW_H

#include <stdint.h>

#include "hold/core.h"
#include "hold/held.h"

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

#endif /* DLOCK_HOLD_RENEW_H */
