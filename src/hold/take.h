/*
 * take.h - an acquire of any kind from its spec to its handle (take.c):
 * the first attempt, the wait when the name is taken, the failure
 * messages, and the record (registration, first renewal, holder info).
 * The public acquire functions (acquire.c: locks; shared.c: permits and
 * readers) check their arguments, fill a dlock__want and call it.
 * Above attempt.h and wait.h.
 */
#ifndef DLOCK_HOLD_TAKE_H
#define DLOCK_HOLD_TAKE_H

#include "hold/attempt.h"
#include "hold/core.h"
#include "hold/held.h"
#include "hold/kind.h"

/* The checks every acquire starts with: *out set to NULL (out not
 * NULL), c not NULL, NAME a valid name. DLOCK_OK, or DLOCK_EINVAL (with
 * the message when c is set). */
int dlock__check_acquire_args(dlock_lock **out, dlock_client *c,
                              const char *name);

/* Check the acquire options *opts (NULL: the defaults, put in *defaults
 * and *opts pointed at them): the version, the lease (> 0, at most a
 * year, and above the clock drift allowance when several servers vote or
 * always_drift). DLOCK_OK, or DLOCK_EINVAL with the message. */
/* The flags of options o (a version 1 struct has none, and no field to
 * read them from). */
static inline unsigned dlock__acquire_flags(const dlock_acquire_options *o)
{
    return o->version >= 2 ? o->flags : 0;
}

int dlock__check_acquire_opts(dlock_client *c,
                              const dlock_acquire_options **opts,
                              dlock_acquire_options *defaults,
                              int always_drift);

/* Acquire w of NAME with options o (checked) and give the caller its
 * handle in *out. h: this thread's registered hold of NAME to enter again
 * (a reentrant kind), or NULL for a fresh hold. The status, with its
 * message; on DLOCK_OK a warning may be left in the message (the ACL
 * refuses notifications). */
int dlock__take(dlock_lock **out, dlock_client *c, const char *name,
                const dlock__want *w, const dlock_acquire_options *o,
                dlock__held *h);

/* The record phase of an acquire of h (its kind: h->k.kind) that got g
 * with options o: fill h (fresh: register it), schedule its first
 * renewal, record holder info and metrics where its kind does, and give
 * the caller its handle. t_us: when the call began (metrics). */
int dlock__record(dlock_client *c, dlock__held *h,
                  const dlock_acquire_options *o, const dlock__got *g,
                  int fresh, int64_t t_us, dlock_lock **out);

#endif /* DLOCK_HOLD_TAKE_H */
