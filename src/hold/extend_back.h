/*
 * extend_back.h - an explicit extension that did not count (too few
 * replicas acknowledged it) is given back (extend_back.c,
 * src/lua/extend_back.lua), as an acquire gives back its grant: the
 * servers keep the lease the holder still counts on, not the
 * unreplicated one. Above core.h and held.h.
 */
#ifndef DLOCK_EXTEND_BACK_H
#define DLOCK_EXTEND_BACK_H

#include "hold/core.h"
#include "hold/held.h"

/* The extension of h just failed with DLOCK_NOT_REPLICATED: shorten h's
 * lease on every node to what h's validity still promises (at least
 * 1 ms), never lengthening it. Only for a hold the watchdog does not
 * renew (its next renewal sets the hold's lease anyway, and a renewal
 * in flight must not be cut short). Best effort within the command
 * timeout; the status of the failed extension stands. */
void dlock__extend_give_back(dlock_client *c, dlock__held *h);

#endif /* DLOCK_EXTEND_BACK_H */
