/*
 * retention.h - the fence retention a client asks for (the option
 * fence_retention_ms) as the scripts are told it (retention.c). Above
 * core.h and held.h (DLOCK__FENCE_RETENTION_MS, the default).
 */
#ifndef DLOCK_HOLD_RETENTION_H
#define DLOCK_HOLD_RETENTION_H

#include <stdint.h>

#include "hold/core.h"

/* How long a fence hash that must exist is kept: the client's
 * fence_retention_ms, or the default when that is 0 (no retention: only a
 * Redlock fencing round still writes one, and the release that frees the
 * name deletes it). */
int64_t dlock__fence_keep_ms(const dlock_client *c);

/* The fence retention the scripts are told: the client's
 * fence_retention_ms, except that a client of several servers (Redlock)
 * keeps the default when it is 0: its releases record their tokens (r,
 * x) so that a renewal's late take-back (retake.lua) cannot bring a
 * released hold back, and the majority's counters order its tokens. */
int64_t dlock__fence_retention(const dlock_client *c);

/* Append acquire.lua's ARGV[9] (the fence retention) to b, an acquire
 * command built so far, when the client's retention is neither the
 * default nor 0 (which the mode carries), with the placeholders of the
 * ARGV[4..8] it left off. */
void dlock__acquire_retention_args(dlock__cmdbuf *b, const dlock_client *c);

#endif /* DLOCK_HOLD_RETENTION_H */
