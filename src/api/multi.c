/*
 * multi.c - several locks at once, all or nothing (dlock_lock_acquire_all).
 *
 * Deadlock freedom comes from one global order: the names are sorted
 * bytewise and taken one after the other, each with the time left of the
 * caller's wait, so no two callers of this file can each hold a lock the
 * other waits for (a cycle of waits would need one of them to take a
 * smaller name after a larger one). When a lock cannot be had, those
 * already taken are released in reverse order before returning: a caller
 * never keeps a partial set. Nor a set with a lapsed member: the first
 * leases run while the call waits for later names, so once all are taken
 * each is checked, and if one ran out (no watchdog and a long wait, or
 * the process was paused) all are given back and taken again.
 *
 * This is ordered acquisition with rollback over the public lock calls,
 * which is correct on every topology (one server, Redlock, and later
 * Cluster, where the names live in different slots). Taking the names
 * that share a node in one script is an optimisation left for later: it
 * would save round trips, not change what the call promises.
 *
 * Above the lock layer: it calls only dlock.h's lock calls and core.h's
 * error channel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"

/* Bytewise order of two names, a proper prefix first. */
static int name_cmp(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int d = memcmp(a, b, la < lb ? la : lb);

    if (d != 0)
        return d;
    return la < lb ? -1 : la > lb;
}

/* Sort idx[0..n-1] by the names they point at (insertion sort: n is at
 * most DLOCK_MULTI_MAX). */
static void sort_idx(size_t *idx, const char *const *names, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        size_t v = idx[i], j = i;

        while (j > 0 && name_cmp(names[idx[j - 1]], names[v]) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
}

/* Check the arguments of acquire_all and fill idx with the global order.
 * Returns DLOCK_OK or DLOCK_EINVAL with the message set. */
static int check_names(dlock_client *c, const char *const *names, size_t n,
                       size_t *idx)
{
    if (names == NULL || n == 0 || n > DLOCK_MULTI_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "acquire all: 1 to %d names are required "
                                "(got %zu)",
                                DLOCK_MULTI_MAX, names == NULL ? 0 : n);
    for (size_t i = 0; i < n; i++) {
        if (names[i] == NULL)
            return dlock__set_error(c, DLOCK_EINVAL,
                                    "acquire all: name %zu is NULL", i);
        idx[i] = i;
    }
    sort_idx(idx, names, n);
    for (size_t i = 1; i < n; i++)
        if (name_cmp(names[idx[i - 1]], names[idx[i]]) == 0)
            return dlock__set_error(c, DLOCK_EINVAL,
                                    "acquire all: \"%s\" is given twice",
                                    names[idx[i]]);
    return DLOCK_OK;
}

/* One pass: take names[idx[0..n-1]] in that order, each with what is
 * left until deadline (-1: wait_ms alone). On failure release what was
 * taken, newest first, and return the status with the name in the
 * message. */
static int take_all(dlock_lock **out, dlock_client *c, const char *const *names,
                    const size_t *idx, size_t n,
                    const dlock_acquire_options *ao, int64_t deadline)
{
    char why[DLOCK__MSGLEN];
    size_t k;
    int rc = DLOCK_OK;

    for (k = 0; k < n; k++) {
        dlock_acquire_options one = *ao;

        if (deadline >= 0) {
            one.wait_ms = deadline - dlock__now_ms();
            if (one.wait_ms <= 0) {
                rc = dlock__set_error(c, DLOCK_TIMEDOUT,
                                      "gave up waiting for the lock");
                break;
            }
        }
        rc = dlock_lock_acquire_ex(&out[idx[k]], c, names[idx[k]], &one);
        if (rc != DLOCK_OK)
            break;
    }
    if (rc == DLOCK_OK)
        return DLOCK_OK;
    if (rc == DLOCK_BUSY && ao->wait_ms != 0)
        rc = DLOCK_TIMEDOUT; /* the deadline fell between two waits */
    snprintf(why, sizeof why, "%s", dlock_errmsg(c));
    /* Roll back: every lock taken so far, newest first. */
    for (size_t j = k; j-- > 0;) {
        dlock_lock_release(out[idx[j]]);
        out[idx[j]] = NULL;
    }
    return dlock__set_error(c, rc, "acquire \"%s\" (%zu of %zu): %s",
                            names[idx[k]], k + 1, n,
                            *why != '\0' ? why : dlock_strerror(rc));
}

/* The first lock of out (in the order idx) that is no longer surely held
 * (validity used up, or lost), or n when all are. The first locks' leases
 * run while the pass waits for later ones: without the watchdog they can
 * run out, and a process paused meanwhile loses them even with it. */
static size_t first_lapsed(dlock_lock *const *out, const size_t *idx, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (dlock_lock_validity_ms(out[idx[k]]) <= 0 ||
            dlock_lock_status(out[idx[k]]) != DLOCK_OK)
            return k;
    return n;
}

/* See dlock.h. */
int dlock_lock_acquire_all(dlock_lock **out, dlock_client *c,
                           const char *const *names, size_t n,
                           const dlock_acquire_options *opts)
{
    size_t idx[DLOCK_MULTI_MAX], k;
    dlock_acquire_options ao;
    int64_t deadline;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "acquire all: out is NULL");
    rc = check_names(c, names, n, idx);
    if (rc != DLOCK_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (opts != NULL)
        ao = *opts;
    else
        dlock_acquire_options_init(&ao);
    deadline = ao.wait_ms > 0 ? dlock__now_ms() + ao.wait_ms : -1;
    for (;;) {
        rc = take_all(out, c, names, idx, n, &ao, deadline);
        if (rc != DLOCK_OK)
            return rc;
        k = first_lapsed(out, idx, n);
        if (k == n)
            return DLOCK_OK;
        /* Never hand out a set with a lapsed member: give all back, and
         * take them again while the wait allows. */
        for (size_t j = n; j-- > 0;) {
            dlock_lock_release(out[idx[j]]);
            out[idx[j]] = NULL;
        }
        if (ao.wait_ms == 0 || (deadline >= 0 && dlock__now_ms() >= deadline))
            return dlock__set_error(
                c, DLOCK_TIMEDOUT,
                "acquire \"%s\" (%zu of %zu): its lease ran out while the "
                "call waited for the later names (a longer lease or the "
                "watchdog helps)",
                names[idx[k]], k + 1, n);
    }
}

/* See dlock.h. */
int dlock_lock_release_all(dlock_lock **locks, size_t n)
{
    size_t idx[DLOCK_MULTI_MAX];
    const char *names[DLOCK_MULTI_MAX] = {NULL};
    int rcs[DLOCK_MULTI_MAX];
    size_t m = 0;

    if (locks == NULL || n > DLOCK_MULTI_MAX)
        return DLOCK_EINVAL;
    for (size_t i = 0; i < n; i++) {
        rcs[i] = DLOCK_OK;
        names[i] = locks[i] != NULL ? dlock_lock_name(locks[i]) : "";
        if (locks[i] != NULL)
            idx[m++] = i;
    }
    sort_idx(idx, names, m);
    while (m-- > 0) { /* the reverse of the global order */
        rcs[idx[m]] = dlock_lock_release(locks[idx[m]]);
        locks[idx[m]] = NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (rcs[i] != DLOCK_OK)
            return rcs[i];
    return DLOCK_OK;
}
