/*
 * with_lock.c - dlock_with_lock: acquire, call the caller's function,
 * release, through the public entry points (api/acquire.c, api/lock.c):
 * a composite of the API, as multi.c and election.c are.
 */
#include "hold/core.h"

/* See dlock.h. */
int dlock_with_lock(dlock_client *c, const char *name,
                    const dlock_acquire_options *opts,
                    int (*fn)(dlock_lock *, void *), void *ud, int *fn_result)
{
    dlock_lock *l;
    int rc, r;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (fn == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "fn is NULL");
    rc = dlock_lock_acquire_ex(&l, c, name, opts);
    if (rc != DLOCK_OK)
        return rc;
    r = fn(l, ud);
    if (fn_result != NULL)
        *fn_result = r;
    return dlock_lock_release(l);
}
