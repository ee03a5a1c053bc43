/*
 * held.h - the records of the lock layer (registry.c): a held lock, an
 * undo entry, the key names of a lock, and the handle given to the caller.
 * The lifecycle of a held record is written at the top of registry.c.
 * Above util.h; the registry itself lives in the client (core.h).
 */
#ifndef DLOCK_HELD_H
#define DLOCK_HELD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/* The fair handoff lease: a lock handed to a waiter has this lease (at
 * most) until the new owner confirms it; the bound on how long a waiter
 * that died while being handed the lock can hold the others up. */
#define DLOCK__FAIR_HANDOFF_MS 2000

/* The fence hash outlives the last acquisition by this long (7 days) by
 * default (the option fence_retention_ms); see docs/design.md, "Fence
 * retention". acquire.lua has it as a constant (RETAIN) to keep the hot
 * path's command short: other retentions are sent (ARGV[9]). */
#define DLOCK__FENCE_RETENTION_MS (7LL * 24 * 3600 * 1000)

/* A queued waiter (a fair lock's, a semaphore's) drops out this long
 * after its last refresh, and refreshes at a third of it. The one waiter
 * TTL of every queue; a long queue keeps a place 3 ms per waiter when
 * that is longer (the queueing scripts' 4th reply element). */
#define DLOCK__WAITER_TTL_MS 3000

/* How often a queued waiter refreshes its place, given place_ms, the
 * time the server said it keeps it (0 or less: not said): a third of
 * it, and never more often than a third of DLOCK__WAITER_TTL_MS. */
static inline int64_t dlock__refresh_every(int64_t place_ms)
{
    return (place_ms > DLOCK__WAITER_TTL_MS ? place_ms : DLOCK__WAITER_TTL_MS) /
           3;
}

/* The lease a fair handoff gives until the new owner confirms it:
 * min(lease_ms, DLOCK__FAIR_HANDOFF_MS). */
static inline int64_t dlock__fair_handoff_lease(int64_t lease_ms)
{
    return lease_ms < DLOCK__FAIR_HANDOFF_MS ? lease_ms
                                             : DLOCK__FAIR_HANDOFF_MS;
}

/* The names of one lock's keys and channels, "<prefix>:{<name>}..."; the
 * strings live in the allocation of the record that holds this. */
typedef struct dlock__keys {
    char *name;
    size_t namelen;
    char *key;   /* <prefix>:{<name>} */
    char *fkey;  /* <prefix>:{<name>}:f */
    char *chan;  /* <prefix>:{<name>}:c */
    char *qkey;  /* <prefix>:{<name>}:q  fair queue (zset; semaphore: list) */
    char *qtkey; /* <prefix>:{<name>}:qt fair queue deadlines (zset) */
    char *hchan; /* <prefix>:{<name>}:c:<client id>: fair handoffs */
    size_t keylen, fkeylen, chanlen, qkeylen, qtkeylen, hchanlen;
    char *rkey; /* <prefix>:{<name>}:r  read-write lock's readers (zset) */
    size_t rkeylen;
    int kind; /* DLOCK__KIND_*: which scripts release and renew it */
} dlock__keys;

/* What a hold is: the kind chooses the release and renew scripts
 * (release.c, renew.c); docs/design.md, "Semaphores and read-write
 * locks". */
enum {
    DLOCK__KIND_LOCK = 0,   /* exclusive: acquire.lua, release.lua */
    DLOCK__KIND_PERMIT = 1, /* a semaphore permit: sem_*.lua */
    DLOCK__KIND_READ = 2    /* a read-write lock's reader: rw_*.lua */
};

/* Where a held record is in its life (see registry.c). */
typedef enum dlock__life {
    DLOCK__HELD_NEW,       /* made by an acquire, not registered yet */
    DLOCK__HELD_LIVE,      /* registered: found for reentry, renewed */
    DLOCK__HELD_RELEASING, /* registered, its last level being given back */
    DLOCK__HELD_UNLINKED   /* out of the registry; freed when unused */
} dlock__life;

/* Flags of a held record. */
#define DLOCK__HELD_ADOPTED 0x1 /* from dlock_lock_adopt: never re-entered */
#define DLOCK__HELD_CB 0x2      /* its lost callback is running */
#define DLOCK__HELD_SOLE 0x4    /* DLOCK_ACQUIRE_NO_REENTRY: never re-entered */
/* Records no acquire re-enters. */
#define DLOCK__HELD_NOT_FOUND (DLOCK__HELD_ADOPTED | DLOCK__HELD_SOLE)

/* One lock held by one owner of this client; shared by the handles of its
 * reentrant acquisitions. Fields other than the atomics are protected by
 * client->held_mu, except where registry.c says otherwise. */
typedef struct dlock__held {
    struct dlock__held *next, *prev; /* c->held, while registered */
    struct dlock__held *hnext;       /* its bucket of c->held_tab */
    uint64_t hash;                   /* of (name, thread), for the table */
    dlock__keys k;
    uint64_t id;                  /* unique in the client, for the watchdog */
    dlock__life life;             /* see registry.c */
    unsigned flags;               /* DLOCK__HELD_* */
    int wd_refs;                  /* watchdog rounds using it */
    int wd_renewing;              /* a watchdog round renews it now */
    int extending;                /* dlock_lock_extend calls out: the
                                   * watchdog does not renew it meanwhile,
                                   * so the two never overlap on a server
                                   * (which would run them in either
                                   * order) */
    int depth;                    /* the owner's reentry count on the servers */
    int handles;                  /* live dlock_lock handles */
    struct dlock_lock *wd_handle; /* handle given to the lost callback */
    char owner[DLOCK_OWNER_MAX];
    uint64_t thread; /* dlock__thread_serial() of the thread that holds it
                        (reentrancy) */
    uint64_t token;
    int64_t lease_ms;
    _Atomic int64_t valid_until_ms; /* monotonic */
    _Atomic int state;              /* DLOCK_OK, DLOCK_LOST */
    uint64_t nodes;                 /* Redlock: mask of nodes that granted */
    /* The nodes found holding it: the acquire's grants, then each
     * renewal's answers and take-backs (renew.c); read by
     * dlock_lock_nodes_holding from any thread. */
    _Atomic uint64_t held_on;
    int watchdog;
    int64_t next_renew_ms;
    int confirm_pending; /* fair handoff: extend to lease_ms at once */
    /* Redlock: pins[i] carries this hold's acquire to node i, given up
     * on once a majority had granted (answer pending): the hold's next
     * request to node i goes over it, behind the acquire. NULL: none.
     * Only the holding thread uses it. */
    struct dlock__conn **pins;
    /* The running acquire attempt's end (monotonic ms, -1: none): its
     * steps, the fencing round and the undo of a failed attempt end by it
     * (hold/attempt.c, every kind). Read and written by the owner
     * thread only. */
    int64_t attempt_end_ms;
    dlock_lost_cb on_lost;
    void *on_lost_ud;
    int64_t since_us; /* monotonic: when the hold began (metrics) */
    /* Why it was lost (dlock_lock_lost_reason): set by the watchdog
     * before it stores state LOST, read after seeing LOST. lost_why is
     * malloc'd (NULL: out of memory or not lost), freed with the record. */
    int lost_code;
    char *lost_why;
} dlock__held;

/* A maybe-taken lock to give back: an acquire whose answer was lost, or a
 * Redlock attempt short of a quorum, on nodes that did not answer the
 * first undo. The watchdog retries it (client->undos, under held_mu). */
typedef struct dlock__undo {
    struct dlock__undo *next;
    dlock__keys k;
    char owner[DLOCK_OWNER_MAX];
    uint64_t nodes;   /* nodes still to answer */
    int depth;        /* the depth the release script expects */
    uint64_t token;   /* the token the release script hands on */
    int64_t until_ms; /* monotonic: the lease has run out by then */
} dlock__undo;

/* The handle given to the caller: one reentry level of a held record. */
struct dlock_lock {
    dlock_client *client;
    dlock__held *held;
};

/* Bytes the strings of NAME's keys take (dlock__keys_fill), and fill k
 * with them at cur ("<prefix>:{<name>}...", the handoff channel with this
 * client's id). For records that embed their keys (registry.c, the event
 * loop's holds). */
size_t dlock__keys_size(const dlock_client *c, const char *name);
void dlock__keys_fill(dlock__keys *k, char *cur, const dlock_client *c,
                      const char *name);

/* A new held record (state NEW) for NAME and OWNER, or NULL. */
dlock__held *dlock__held_new(dlock_client *c, const char *name,
                             const char *owner);

/* Free a held record that is NEW or UNLINKED and unused (its pins
 * dropped first). */
void dlock__held_free(dlock__held *h);

/* Give h's pinned connections (h->pins) back to the pool. */
void dlock__held_drop_pins(dlock_client *c, dlock__held *h);

/* A new undo entry for NAME and OWNER (not queued), or NULL. */
dlock__undo *dlock__undo_new(dlock_client *c, const char *name,
                             const char *owner);

/* The key names of NAME alone (free() it), or NULL. */
dlock__keys *dlock__keys_new(dlock_client *c, const char *name);

/* The registered (LIVE or RELEASING), not adopted hold of NAME by thread
 * SELF, or NULL. O(1) on average (a hash table by name and thread).
 * Caller holds held_mu. */
dlock__held *dlock__held_find(dlock_client *c, const char *name, uint64_t self);

/* Register NEW record h (it becomes LIVE) with a fresh id; O(1) on
 * average. Caller holds held_mu. */
void dlock__held_link(dlock_client *c, dlock__held *h);

/* Take registered h out of the registry (it becomes UNLINKED); O(1) on
 * average. Caller holds held_mu. */
void dlock__held_unlink(dlock_client *c, dlock__held *h);

/* Free every record and undo entry left in the client (dlock_client_free:
 * handles still out are the caller's bug; their leases run out). */
void dlock__registry_clear(dlock_client *c);

/* Owner id of a fresh hold of the calling thread:
 * "<client id>:<tid>:<hold number>". */
void dlock__owner_id(dlock_client *c, char *buf, size_t len);

/* A new handle for h: DLOCK_OK and *out, or DLOCK_ENOMEM (message set). */
int dlock__handle_new(dlock_client *c, dlock__held *h, dlock_lock **out);

/* Give the caller a new handle on h (see dlock__handle_new); a watchdog
 * hold keeps it as the handle its renewals and on_lost callback name. */
int dlock__handle_give(dlock_client *c, dlock__held *h, int watchdog,
                       dlock_lock **out);

/* Drop handle l of h: one reentry level given back (or all of them when
 * gone); unlink h from the registry when no level is left, and free it
 * (and l) once no handle and no watchdog round uses it. */
void dlock__handle_drop(dlock_client *c, dlock__held *h, dlock_lock *l,
                        int gone);

/* The common end of every successful acquire (locks, permits, readers).
 * Call with c->held_mu held, after h's fields are set and h is linked:
 * schedules h's first renewal (a fair handoff's short lease, valid until
 * valid_until, is confirmed at half of what is left of it; any other
 * lease renewed at a third), unlocks held_mu, counts the acquisition and
 * signals the work as due (dlock__work_due) when the watchdog has to act. */
void dlock__held_started(dlock_client *c, dlock__held *h, int64_t lease_ms,
                         int64_t valid_until);

/* Signal work due at due_ms (monotonic): a lock to renew or confirm, an
 * undo to retry, a request given up on to settle. The registry's signal
 * to the thread that does it (c->due: the watchdog waits on it and set
 * its start function): starts that thread on first use; wakes it only if
 * it would sleep past due_ms (it looks at least once a second anyway). */
void dlock__work_due(dlock_client *c, int64_t due_ms);

/* Check a lock name; DLOCK_OK or DLOCK_EINVAL with the message set. */
int dlock__check_name(const dlock_client *c, const char *name);
/* Check a resource key of the fenced calls, the same way. */
int dlock__check_key(const dlock_client *c, const char *key);

#endif /* DLOCK_HELD_H */
