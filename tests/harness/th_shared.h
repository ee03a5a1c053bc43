/*
 * th_shared.h - semaphore permits and read-write locks' readers in the
 * replication tests (th_shared.c): take one, and count the live ones a
 * given server (a master, or a replica) holds.
 */
#ifndef DLOCK_TEST_TH_SHARED_H
#define DLOCK_TEST_TH_SHARED_H

#include <stdint.h>

#include "dlock.h"
#include "harness.h"
#include "th_waiter.h"

/* A reader of lock NAME (rw 1), or a permit of semaphore NAME with this
 * limit (rw 0), waiting wait_ms, for lease_ms. *l is set to NULL first.
 * The acquire's status. */
int th_shared_take(dlock_lock **l, dlock_client *c, const char *name, int rw,
                   int64_t limit, int64_t wait_ms, int64_t lease_ms);

/* A permit of semaphore NAME, limit 1, in th_acquire_fn's shape (for a
 * th_waiter). */
int th_permit1_acquire(dlock_lock **l, dlock_client *c, const char *name,
                       int64_t wait_ms, int64_t lease_ms);

/* A reader of lock NAME (no flags) in th_acquire_fn's shape. */
int th_reader_acquire(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t wait_ms, int64_t lease_ms);

/* One kind of hold, for a test that runs one body for each (th_kinds):
 * how to take one, and what keeps one out. */
typedef struct th_kind {
    const char *what;      /* "lock", "permit", "reader" */
    th_acquire_fn acquire; /* take one of this kind */
    th_acquire_fn blocker; /* what keeps it out: the lock itself, the one
                            * permit of a semaphore of limit 1, a writer */
    int redlock;           /* allowed over Redlock (several servers) */
    int rw;                /* th_shared_held's rw (0 permit, 1 reader);
                            * -1 for the lock (its key exists or not) */
} th_kind;

/* The three kinds: lock, permit, reader. */
#define TH_NKINDS 3
extern const th_kind th_kinds[TH_NKINDS];

/* Live permits of semaphore NAME (rw 0), or readers of lock NAME (rw 1),
 * on server s: members of the zset (dlock:{NAME}, or dlock:{NAME}:r) whose
 * deadline is ahead of s's clock (the limit's member '#' has a small
 * score, tombstones negative ones). Asked on one connection that sent
 * READONLY first, so that a Cluster replica answers for its master's
 * slots (elsewhere READONLY's error is ignored). The count, or -1 (on
 * stderr). */
long long th_shared_held(const th_server *s, const char *name, int rw);

#endif /* DLOCK_TEST_TH_SHARED_H */
