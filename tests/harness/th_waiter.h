/*
 * th_waiter.h - the waiter thread of the integration tests: an acquire
 * run in another thread while the test's own thread holds the name,
 * releases it, stops a server or inspects the queue (th_waiter.c).
 *
 * One struct, filled by the test, then th_waiter_start(). The thread
 * acquires; on success it records its entry (got, and optionally its id
 * in a shared arrival order), then either holds for hold_ms and releases,
 * or (hold_ms TH_WAITER_KEEP) leaves the lock to the test in l. The test
 * reads rc, got and done_ms after th_waiter_join(), or polls got with
 * atomic_load() before.
 */
#ifndef DLOCK_TEST_TH_WAITER_H
#define DLOCK_TEST_TH_WAITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dlock.h"

/* How a waiter acquires: dlock_lock_acquire()'s shape, so a test wraps
 * any other kind of acquire (a reader, a permit) in a function of this
 * type. */
typedef int (*th_acquire_fn)(dlock_lock **out, dlock_client *c,
                             const char *name, int64_t wait_ms,
                             int64_t lease_ms);

/* hold_ms: keep the lock (in l) for the test to release. */
#define TH_WAITER_KEEP (-1)

typedef struct th_waiter {
    /* Set by the test. */
    dlock_client *c;
    const char *name;
    int64_t wait_ms;       /* the acquire's wait (-1: forever) */
    int64_t lease_ms;      /* its lease */
    th_acquire_fn acquire; /* NULL: dlock_lock_acquire */
    int64_t hold_ms;       /* once in: hold, release; or TH_WAITER_KEEP */
    /* Optional, shared by a group of waiters: on entry the thread writes
     * id at seq[(*order)++] (arrival order), then adds 1 to *entered. */
    int id;
    atomic_int *order;
    int *seq;
    atomic_int *entered;
    /* Set by the thread. */
    int rc;          /* the acquire's status */
    atomic_int got;  /* 1 once it holds (rc is DLOCK_OK) */
    int64_t done_ms; /* th_now_ms() when the acquire returned */
    dlock_lock *l;   /* the hold, with TH_WAITER_KEEP (else NULL) */
    pthread_t t;
} th_waiter;

/* Start the thread (w must stay in place until th_waiter_join). Clears
 * the thread's outputs first. 0, or pthread_create's error. */
int th_waiter_start(th_waiter *w);

/* Join the thread: 0, or pthread_join's error. */
int th_waiter_join(th_waiter *w);

/* A waiter of c for NAME that waits up to 20 s (lease 10 s) and keeps
 * the lock for the test (w.l). */
th_waiter th_waiter_keeping(dlock_client *c, const char *name);

/* Wait (at most 10 s) until the fair queue of the lock NAME (key prefix
 * "dlock") on server s holds n waiters: 0, or -1 when it did not. */
struct th_server;
int th_await_queued(const struct th_server *s, const char *name, long long n);

/* Wait (at most timeout_ms) until client c has found names busy at least
 * n times (dlock_client_stats): its waiters are then waiting, not about
 * to find the name free (a fixed sleep is not enough on a loaded
 * machine). 0, or -1 when it never did. */
int th_wait_busy(dlock_client *c, unsigned long long n, int64_t timeout_ms);

/* Start w (its client waiting by notification for what l holds), wait
 * until it has found the name busy twice (its first try, and its attempt
 * once subscribed), release l and join w: 0 when w got in (w->rc is
 * DLOCK_OK), -1 otherwise. With a lease of l longer than w's wait, w gets
 * in only by hearing the release (issue 31: the '#l' mark). */
int th_release_heard(th_waiter *w, dlock_lock *l);

/* What dlock_shared_inspect() says of NAME through c (no holder list),
 * for a test waiting until its waiters are queued; when the inspect
 * fails, kind and the counts (limit, holders, waiters,
 * writer_waiting_ms) are -1. */
dlock_shared_info th_shared_info(dlock_client *c, const char *name);

#endif /* DLOCK_TEST_TH_WAITER_H */
