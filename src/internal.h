/*
 * internal.h - private declarations shared by the files of libdlock.
 *
 * Layers, bottom up:
 *   util.c       monotonic clock, random bytes, error-message helpers
 *   url.c        server URL -> dlock__endpoint
 *   transport.c  dlock__conn: one non-blocking connection (TCP, unix
 *                socket or TLS) with hiredis's reader beneath it; AUTH and
 *                SELECT on open; poll-driven so one thread can drive many
 *   node.c       per-server connection pool and the fan-out executor that
 *                runs one script on every server in parallel
 *   lock.c       the lock: acquire / release / extend / fencing
 *   notify.c     the subscriber thread and waiter coalescing
 *   watchdog.c   the lease renewer thread
 *   client.c     dlock_client: options, lifetime, stats, error messages
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

#include "errors.h"
#include "url.h"
#include "util.h"

#include "conn.h"
#include "net.h"
#include "tls.h"

#include "node.h"
#include "step.h"

/* ---- lock.c: the per-process registry of held locks -------------------- */

/* One lock held by one owner of this client; shared by the handles of its
 * reentrant acquisitions. Protected by client->held_mu. */
typedef struct dlock__held {
    struct dlock__held *next;
    char *name;
    size_t namelen;
    char *key;   /* <prefix>:{<name>} */
    char *fkey;  /* <prefix>:{<name>}:f */
    char *chan;  /* <prefix>:{<name>}:c */
    char *qkey;  /* <prefix>:{<name>}:q  fair queue (list) */
    char *qtkey; /* <prefix>:{<name>}:qt fair queue deadlines (zset) */
    char *hchan; /* <prefix>:{<name>}:c:<client id>: fair handoffs */
    size_t hchanlen;
    size_t keylen, fkeylen, chanlen, qkeylen, qtkeylen;
    uint64_t id;    /* unique in the client, for the watchdog */
    int orphaned;   /* unlinked from the registry */
    int releasing;  /* last level being released: ignore renewals */
    int wd_refs;    /* watchdog rounds using it */
    int cb_running; /* the lost callback is running */
    struct dlock_lock *wd_handle; /* handle given to the lost callback */
    char owner[96];
    pthread_t thread; /* the thread that holds it (reentrancy) */
    int adopted;      /* from dlock_lock_adopt: never re-entered */
    int depth;        /* the owner's reentry count on the servers */
    int handles;      /* live dlock_lock handles */
    uint64_t token;
    int64_t lease_ms;
    _Atomic int64_t valid_until_ms; /* monotonic */
    _Atomic int state;              /* DLOCK_OK, DLOCK_LOST */
    uint64_t nodes;                 /* Redlock: mask of nodes that granted */
    int watchdog;
    int64_t next_renew_ms;
    int confirm_pending; /* fair handoff: extend to lease_ms at once */
    dlock_lost_cb on_lost;
    void *on_lost_ud;
} dlock__held;

struct dlock_lock {
    dlock_client *client;
    dlock__held *held;
};

/* ---- notify.c ---------------------------------------------------------- */

typedef struct dlock__notifier dlock__notifier;
typedef struct dlock__waiter dlock__waiter;

/* Start/stop the notifier (the thread starts on first use). */
int dlock__notify_init(dlock_client *c);
void dlock__notify_free(dlock_client *c);

/*
 * Register interest in a lock's channel and wait (until deadline_ms) for
 * the subscription to be confirmed on every node, so that a release after
 * this returns is never missed. Returns DLOCK_OK with *out set, or an
 * error (DLOCK_ETIMEDOUT, DLOCK_EIO...; the caller may fall back to spin).
 * Fair mode: me is the owner id a handoff would name (else NULL); a
 * handoff to it is recorded from now on, also one that arrives before the
 * waiter sleeps (the reply to its queueing attempt can come after it).
 */
int dlock__notify_begin(dlock_client *c, const char *chan, size_t chanlen,
                        const char *me, dlock__waiter **out,
                        int64_t deadline_ms, uint64_t cancel_gen);

/*
 * Become the process's one contender for this channel: returns when this
 * thread may send an acquire attempt (at once if nobody else of this
 * process is trying, else after the current contender finishes or a
 * release is announced). 1 = go, 0 = deadline passed, DLOCK_CANCELED.
 */
int dlock__notify_turn(dlock__waiter *w, int64_t deadline_ms);

/* 1 when the waiter was handed the lock (fair mode) since it last asked. */

/*
 * The contender found the lock busy: give up the turn and sleep until a
 * release is announced (or the subscriber connection was lost: messages
 * may have been missed), until_ms passes, or the wait is cancelled.
 * Returns 1 (woken), 0 (until_ms), DLOCK_CANCELED.
 */
int dlock__notify_wait(dlock__waiter *w, int64_t until_ms);

/* Stop waiting (acquired, gave up or failed): drop the turn, drop the
 * reference (unsubscribing when it was the last), free w. */
void dlock__notify_end(dlock__waiter *w);

/* 1 when this process already has a confirmed subscription to the channel
 * (a lingering one counts): a fair waiter may then queue at once. */
int dlock__notify_subscribed(dlock_client *c, const char *chan, size_t len);

/* Wake every waiter of the client (dlock_client_cancel). */
void dlock__notify_cancel(dlock_client *c);

/* Fair mode: sleep until a handoff addressed to the owner id given to
 * dlock__notify_begin has arrived (1, also when it arrived before this
 * call; its token then in dlock__notify_handoff_token), until_ms (0), or
 * cancellation (DLOCK_CANCELED). */
int dlock__notify_wait_handoff(dlock__waiter *w, int64_t until_ms);
uint64_t dlock__notify_handoff_token(const dlock__waiter *w);

/* ---- watchdog.c -------------------------------------------------------- */

int dlock__watchdog_init(dlock_client *c);
void dlock__watchdog_free(dlock_client *c);
/* Tell the watchdog of work due at due_ms (monotonic): a lock to renew or
 * confirm, an undo to retry. Starts the thread; wakes it only if it would
 * sleep past due_ms (it looks at least once a second anyway). */
void dlock__watchdog_kick(dlock_client *c, int64_t due_ms);

/* Extend hs[0..n-1] to leases[i] ms from now on their nodes in one call
 * per node; ok[i] gets DLOCK_OK / DLOCK_NOT_OWNER / an error (lock.c). */
void dlock__extend_many(dlock_client *c, dlock__held **hs,
                        const int64_t *leases, int n, int *ok);

/* Send release.lua for (h's owner, depth, token) to the nodes in mask;
 * returns the nodes that did not answer (lock.c). */
uint64_t dlock__undo(dlock_client *c, dlock__held *h, uint64_t mask, int depth,
                     uint64_t token);
/* Queue that undo for the watchdog thread to retry until the nodes answer
 * or until_ms (when the lease would have run out anyway). */
void dlock__undo_later(dlock_client *c, const dlock__held *h, uint64_t mask,
                       int depth, uint64_t token, int64_t until_ms);

/* Free a held record (lock.c). */
void dlock__held_free(dlock__held *h);

/* ---- client.c ---------------------------------------------------------- */

struct dlock_client {
    dlock_options opts; /* strings below point to owned copies */
    char **servers;
    char *username, *password, *key_prefix;
    char *tls_ca_file, *tls_ca_dir, *tls_server_name, *tls_cert_file,
        *tls_key_file;
    size_t prefixlen;

    dlock__nodeset ns; /* the servers, filled by a topology */
    dlock__script scripts[DLOCK__S_COUNT];

    unsigned char id[16];
    char idhex[33];

    dlock__msgs msgs; /* per-thread messages for dlock_errmsg */

    /* Held locks (reentrancy, watchdog). */
    pthread_mutex_t held_mu;
    pthread_cond_t held_cv; /* lost callback finished */
    dlock__held *held;
    uint64_t held_seq;
    dlock__held *undos;        /* maybe-taken locks to give back (watchdog) */
    _Atomic uint64_t hold_seq; /* numbers the owner ids of fresh holds */
    _Atomic uint64_t release_seq; /* numbers release requests (notify) */

    /* Cancellation: dlock_client_cancel bumps cancel_gen and broadcasts
     * wait_cv; waits compare the generation they started in. */
    pthread_mutex_t wait_mu;
    pthread_cond_t wait_cv;
    _Atomic uint64_t cancel_gen;

    dlock__notifier *notifier;
    void *watchdog;

    dlock__stats stats;
};

/* This thread's message buffer for client c (DLOCK__MSGLEN bytes). */
static inline char *dlock__errbuf(const dlock_client *c)
{
    return dlock__msgs_buf(&c->msgs);
}

/* Set this thread's message on c and return code. */
static inline int dlock__set_error(const dlock_client *c, int code,
                                   const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int dlock__set_error(const dlock_client *c, int code,
                                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = dlock__msgs_vset(&c->msgs, code, fmt, ap);
    va_end(ap);
    return code;
}

/* The mask of every node of c. */
static inline uint64_t dlock__all_nodes(const dlock_client *c)
{
    return dlock__nodes_all(&c->ns);
}

/* The deadline of one step with this lease (see dlock__step_deadline). */
static inline int64_t dlock__deadline(const dlock_client *c, int64_t lease_ms)
{
    return dlock__step_deadline(&c->ns, c->opts.command_timeout_ms, lease_ms);
}

/* Run cmd on c's nodes in mask (see dlock__exec). */
static inline int dlock__run(dlock_client *c, uint64_t mask,
                             const dlock__cmd *cmd, int64_t deadline_ms,
                             dlock__result *res)
{
    return dlock__exec(&c->ns, c->scripts, mask, cmd, deadline_ms, res);
}

/* This thread's message for a failed step (see dlock__step_error). */
static inline int dlock__fail_step(const dlock_client *c,
                                   const dlock__result *res, uint64_t mask,
                                   int code, const char *what)
{
    return dlock__step_error(&c->ns, &c->msgs, res, mask, code, what);
}

/* Owner id of the calling thread: "<client id>:<tid>". */
void dlock__owner_id(dlock_client *c, char *buf, size_t len);

#endif /* DLOCK_INTERNAL_H */
