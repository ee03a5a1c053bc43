/*
 * acquire.c - taking a lock (dlock.h): the argument checks, the reentry
 * rules of the calling thread, then one dlock__take (src/hold/take.c),
 * the acquire every kind shares: one attempt (attempt.c), one wait
 * (wait.c), the kind table (kind.c), the pure verdict (verdict.c).
 */

#include "hold/core.h"
#include "hold/held.h"
#include "hold/take.h"

/* This thread's registered hold of NAME for a reentry (*h, NULL: none),
 * or DLOCK_EINVAL / DLOCK_LOST with the message when it may not take
 * NAME exclusively again. */
static int reentry(dlock_client *c, const char *name, dlock__held **h)
{
    int kind;
    pthread_mutex_lock(&c->held_mu);
    *h = dlock__held_find(c, name, dlock__thread_serial());
    if (*h != NULL && (*h)->k.kind != DLOCK__KIND_LOCK) {
        /* This thread reads NAME (or holds a permit): taking it
         * exclusively would wait for its own read lease. */
        kind = (*h)->k.kind;
        pthread_mutex_unlock(&c->held_mu);
        return dlock__set_error(
            c, DLOCK_EINVAL,
            kind == DLOCK__KIND_READ
                ? "acquire %s: this thread holds it shared; upgrading to "
                  "exclusive is refused (it deadlocks): release the read "
                  "lock first"
                : "acquire %s: it is a semaphore, not a lock",
            name);
    }
    if (*h != NULL && atomic_load(&(*h)->state) != DLOCK_OK) {
        pthread_mutex_unlock(&c->held_mu);
        return dlock__set_error(c, DLOCK_LOST,
                                "acquire %s: this thread's earlier hold was "
                                "lost; release its handles first",
                                name);
    }
    pthread_mutex_unlock(&c->held_mu);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_lock_acquire_ex(dlock_lock **out, dlock_client *c, const char *name,
                          const dlock_acquire_options *opts)
{
    dlock_acquire_options defaults;
    dlock__want w = {.kind = DLOCK__KIND_LOCK};
    dlock__held *h;
    int rc;

    rc = dlock__check_acquire_args(out, c, name);
    if (rc == DLOCK_OK)
        rc = dlock__check_acquire_opts(c, &opts, &defaults, 0);
    h = NULL;
    if (rc == DLOCK_OK &&
        !(dlock__acquire_flags(opts) & DLOCK_ACQUIRE_NO_REENTRY))
        rc = reentry(c, name, &h);
    if (rc != DLOCK_OK)
        return rc;
    w.lease_ms = opts->lease_ms;
    return dlock__take(out, c, name, &w, opts, h);
}

/* See dlock.h. */
int dlock_lock_acquire(dlock_lock **out, dlock_client *c, const char *name,
                       int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    return dlock_lock_acquire_ex(out, c, name, &o);
}
