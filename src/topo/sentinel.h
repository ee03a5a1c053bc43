/*
 * sentinel.h - a node set whose one master is found by Redis Sentinel
 * (sentinel.c): discovery (SENTINEL get-master-addr-by-name, then the
 * node layer's INFO check of the address), and a thread that watches
 * +switch-master so that a failover moves the node at once. topology.c
 * calls it for a redis+sentinel:// URL. Above node.h.
 */
#ifndef DLOCK_SENTINEL_H
#define DLOCK_SENTINEL_H

#include <stddef.h>

#include "topo/node.h"

/* The lock-delay of a Sentinel client when lock_delay_ms is -1. */
#define DLOCK__SENTINEL_LOCK_DELAY_MS 30000

/* Fill ns for the one redis+sentinel:// (or rediss+sentinel://) URL of
 * o: one node, quorum 1, located on first use. Connects to nothing yet.
 * DLOCK_OK, DLOCK_EINVAL (URL) or DLOCK_ENOMEM, with err set; on failure
 * the caller frees ns with dlock__nodeset_free(). */
int dlock__sentinel_fill(dlock__nodeset *ns, const dlock_options *o, char *err,
                         size_t errlen);

/* What the sentinels know, for the topology report (health.c): one line
 * per fact through add(ctx, kind, text), kind 0 for a fact and 2 for a
 * fact that is also a warning — the master each names, one that does
 * not answer or disagrees, the +switch-master watch and the switches it
 * saw. Asks each sentinel once, before deadline_ms. Returns the number
 * of warnings. */
int dlock__sentinel_report(dlock__nodeset *ns, int64_t deadline_ms,
                           void (*add)(void *ctx, int warn, const char *line),
                           void *ctx);

#endif /* DLOCK_SENTINEL_H */
