/*
 * kind.h - the kinds of hold, as one table (kind.c): a lock, a semaphore
 * permit, a read-write lock's reader. What differs between them is here
 * (the scripts and their commands, the refusals and the messages of a
 * name that is another kind or not dlock's, whether a kind is re-entered,
 * allowed over Redlock, queued); the attempt (attempt.c) and the wait
 * (wait.c) are one for every kind and read this table.
 * Above release.h (the release command of each kind, which a waiter
 * that leaves a queue sends) and held.h (the constants of queues,
 * handoffs and fences).
 */
#ifndef DLOCK_HOLD_KIND_H
#define DLOCK_HOLD_KIND_H

#include <stdint.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/release.h"
#include "engine/step.h"

/* How an attempt asks; each kind maps it to its script's mode. */
typedef enum dlock__ask {
    DLOCK__ASK_TRY,      /* the first try: takes it when free */
    DLOCK__ASK_TRY_FAIR, /* the first try of a fair waiter: respects the
                          * queue, does not join it */
    DLOCK__ASK_WAIT,     /* a waiting try without a place in a queue */
    DLOCK__ASK_QUEUE,    /* a waiting try that joins or refreshes its place
                          * in the queue (woken in turn) */
    DLOCK__ASK_FIFO      /* the same in a FIFO queue (handed over) */
} dlock__ask;

/* What is asked for: one spec for every kind. */
typedef struct dlock__want {
    int kind;         /* DLOCK__KIND_* */
    int64_t lease_ms; /* the lease asked for */
    int64_t limit;    /* a permit: the semaphore's N */
    int ignore_mark;  /* a reader: enter while a writer waits */
    int token_now;    /* the token is wanted with the grant (the event
                       * loop's holds: dlock_hold_token never asks the
                       * server): no plain acquire (kind.h) */
} dlock__want;

/* When a kind waits in its queue (dlock__kind.queue). */
enum {
    DLOCK__Q_NONE = 0, /* no queue: wait by notification or spin */
    DLOCK__Q_FAIR = 1, /* queued under DLOCK_WAIT_FAIR only (a lock) */
    DLOCK__Q_ALL = 2   /* queued under NOTIFY and FAIR (a permit) */
};

typedef struct dlock__kind {
    int id;             /* DLOCK__KIND_* */
    const char *noun;   /* "lock", "semaphore", "read-write lock" */
    const char *busy;   /* why a try found it taken (after the name) */
    const char *handed; /* what a confirmed handoff is, for messages */
    int reentrant;      /* the owner thread may take it again */
    int redlock_ok;     /* allowed over several servers */
    int queue;          /* DLOCK__Q_* */
    int queue_unsub;    /* stays queued (polling) without a subscription;
                          * else such a waiter spins */
    int queue_at_once;  /* FAIR, its process subscribed already: queue
                          * at once, no first try */
    int turns;          /* a process's waiters take turns */
    int fresh_token_on_confirm; /* a late-confirmed handoff gets a new
                                 * token (F9, sem_acquire.lua) */
    int holder_info;            /* records holder info (holder.c) */
    int events;                 /* reports acquire events and the time in
                                 * the call (metrics); permits and readers
                                 * report their release only, as before */
    int extend_script;          /* DLOCK__S_*: renewal */
    int extend_keys;            /* keys per hold in a renewal (a reader:
                                 * its lock hash and the readers' set) */
    /* The acquire command of w for h (ticket: a fair Redlock waiter's
     * place, 0 for none). */
    void (*acquire_cmd)(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__held *h, const dlock__want *w,
                        dlock__ask ask, uint64_t ticket);
    /* The release command of r on keys k (release.c). */
    void (*release_cmd)(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__keys *k, const dlock__release *r);
    /* Leave the queue after giving up (NULL: no queue). */
    void (*leave)(dlock_client *c, dlock__held *h);
    /* After a wait that timed out or was cancelled: take back what the
     * waiting left on the servers besides a queue place (a lock: a
     * waiting writer's mark on a read-write lock). NULL: nothing. */
    void (*give_up)(dlock_client *c, const dlock__held *h);
} dlock__kind;

/* The string layout's plain acquire (no script): when w is an exclusive
 * lock's first try (ask DLOCK__ASK_TRY) of a fresh hold h on one server
 * (or a Sentinel group, or a Cluster) in the string layout without fence
 * retention, build SET <key> "<owner> 1 0" NX PX <lease> in b (val, of
 * DLOCK__PLAIN_VAL bytes, holds the value while b is used) and return 1;
 * else 0 and b is untouched. The token 0 is the lazy token's mark: the
 * hold's token is stamped when first asked for (dlock__lazy_token). Its
 * answer OK is a grant (dlock__classify), nil a busy name the caller
 * asks again with the script (which marks the hold for notify). */
#define DLOCK__PLAIN_VAL (DLOCK_OWNER_MAX + 8)
int dlock__plain_acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__held *h, const dlock__want *w,
                             dlock__ask ask, char *val);

/* s_stamp.lua's answer r (a plain-SET hold's token, issued when first
 * asked for): DLOCK_OK with the token in *tok, DLOCK_NOT_OWNER (the hold
 * is not its owner's on the server any more) or DLOCK_EPROTO (a
 * malformed reply); *tok 0 unless DLOCK_OK. For the blocking
 * dlock_lock_token and the loop's dlock_loop_token. */
int dlock__stamp_verdict(const redisReply *r, uint64_t *tok);

/* The entry of kind id (DLOCK__KIND_*). */
const dlock__kind *dlock__kind_of(int id);

/* The renewal script of k's holds for client c: k->extend_script, but a
 * lock of the string layout renews with s_extend.lua. */
int dlock__extend_script(const dlock_client *c, const dlock__kind *k);

/* A script's refusal in reply r: {-2, limit} another limit is stored
 * (*limit set), {-3, kind} the name is another kind (*other set).
 * DLOCK__REFUSED_* or 0 for none. Pure. */
enum { DLOCK__REFUSED_LIMIT = 1, DLOCK__REFUSED_KIND = 2 };
int dlock__refused(const redisReply *r, long long *limit, const char **other);

/* The status, with its message, of the first refusal among res (an
 * attempt of w on h): DLOCK_EINVAL, or DLOCK_OK when no node refused. */
int dlock__refusal(dlock_client *c, const dlock__held *h, const dlock__want *w,
                   const dlock__result *res);

/* A lock's acquire of NAME failed with rc: when the servers said
 * WRONGTYPE, ask them what the key holds (kind.lua) and return
 * DLOCK_EINVAL saying so ("is a semaphore", or a value not dlock's);
 * other failures keep rc and their message. */
int dlock__lock_kind_error(dlock_client *c, const char *name, int rc);

/* kind.lua's command for the name of keys k: what its key holds. */
void dlock__kind_cmd(dlock__cmdbuf *b, const dlock__keys *k);

/* From kind.lua's answers res[0..n) for lock NAME, whose acquire met
 * WRONGTYPE: DLOCK_EINVAL with the message saying what the name is (held
 * in the string layout, a value not dlock's, a semaphore). Pure but for
 * the message (c's, or the captured one: errors.h). */
int dlock__kind_answer(dlock_client *c, const char *name,
                       const dlock__result *res, int n);

/* DLOCK_EINVAL: lock NAME is held in layout OTHER ("hash", "string"),
 * not the client's (dlock_client_set_layout). */
int dlock__layout_error(dlock_client *c, const char *name, const char *other);

/* DLOCK_EINVAL: WHAT (e.g. "read-write lock") NAME cannot be had, its
 * key holds a Redis TYPE that dlock did not write (left as it is). */
int dlock__foreign_error(dlock_client *c, const char *what, const char *name,
                         const char *type);

/* The channel a waiter of kind k subscribes to (queued: its process's
 * handoff channel, named with its owner id; else the name's channel). */
void dlock__wait_channel(const dlock__held *h, int queued, const char **chan,
                         size_t *len, const char **owner);

#endif /* DLOCK_HOLD_KIND_H */
