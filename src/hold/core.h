/*
 * core.h - struct dlock_client: the state the lock layer shares (options,
 * the node set and scripts, the per-thread messages, the registry of held
 * locks, cancellation, counters). api/client.c makes and frees it; the
 * files of hold/, api/ and loop/ read it; the tiers below never see it
 * (the notifier gets a dlock__notify_ctx). It includes only the tiers
 * below (engine/step.h, topo/node.h, base/errors.h, base/util.h,
 * base/hist.h); the notifier, the watchdog and the records are opaque
 * here.
 *
 * The inline helpers at the end adapt the engine and the error
 * channel to a client.
 */
#ifndef DLOCK_CORE_H
#define DLOCK_CORE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/errors.h"
#include "base/hist.h"
#include "topo/node.h"
#include "engine/step.h"
#include "base/util.h"

struct dlock__held;
struct dlock__undo;
struct dlock__notifier;
struct dlock__watchdog;
struct dlock__holder;

/* Work due at a time: the registry's signal (dlock__work_due, registry.c)
 * to the thread that does it, the watchdog (watchdog.c), which sets start
 * and waits on cv. So nothing in the lock layer calls up into the
 * watchdog. Every field under the client's held_mu. */
typedef struct dlock__due {
    pthread_cond_t cv;
    int (*start)(dlock_client *c); /* starts the thread: 0 when it runs */
    int started;                   /* start succeeded */
    int stop;                      /* the thread is to end */
    int kicked;                    /* work was signalled since its look */
    int sleeping;                  /* in its timed wait... */
    int64_t sleep_until;           /* ...until then (monotonic ms) */
} dlock__due;

struct dlock_client {
    dlock_options opts; /* strings below point to owned copies */
    char **servers;
    char *username, *password, *key_prefix;
    char *tls_ca_file, *tls_ca_dir, *tls_server_name, *tls_cert_file,
        *tls_key_file;
    char *sentinel_username, *sentinel_password;
    size_t prefixlen;

    dlock__nodeset ns; /* the servers, filled by a topology */
    dlock__script scripts[DLOCK__S_COUNT];

    unsigned char id[16];
    char idhex[33];

    dlock__msgs msgs; /* per-thread messages for dlock_errmsg */

    /* The registry of held locks (registry.c: lifecycle and rules). */
    pthread_mutex_t held_mu;
    pthread_cond_t held_cv;        /* a lost callback finished */
    struct dlock__held *held;      /* every registered record */
    struct dlock__held **held_tab; /* the reentrant ones by (name, thread) */
    size_t held_tabsz;             /* buckets, a power of 2 (0: no table) */
    size_t held_count;             /* records in the table */
    uint64_t held_seq;
    struct dlock__undo *undos;    /* maybe-taken locks to give back */
    _Atomic uint64_t hold_seq;    /* numbers the owner ids of fresh holds */
    _Atomic uint64_t release_seq; /* numbers release requests (notify) */

    /* Cancellation: dlock_client_cancel bumps cancel_gen and broadcasts
     * wait_cv; waits compare the generation they started in. */
    pthread_mutex_t wait_mu;
    pthread_cond_t wait_cv;
    _Atomic uint64_t cancel_gen;

    struct dlock__notifier *notifier;
    struct dlock__watchdog *watchdog;
    dlock__due due; /* work for the watchdog (registry.c, watchdog.c) */

    /* Notifications refused by the server's ACL (NOPERM on PUBLISH or
     * SUBSCRIBE: the user has no channel permission): waiters poll
     * instead, subscriptions are not tried again before nosub_until_ms,
     * dlock_client_check() says so, and the first acquire that had to
     * poll leaves one warning in dlock_errmsg() (nopub_warned). */
    _Atomic int nopub;
    _Atomic int64_t nosub_until_ms;
    _Atomic int nopub_warned;

    dlock__stats stats;

    struct dlock__holder *holder; /* holder info (holder.c), NULL: off */
    dlock__metrics metrics;       /* histograms (metrics.c) */
    int layout; /* dlock_layout of exclusive locks (client.c) */
    /* How long a wait rides out an outage in a row
     * (dlock_client_set_outage_ride_ms): 0 DLOCK__OUTAGE_RETRY_MS, -1 the
     * whole wait. */
    _Atomic int64_t outage_ride_ms;
};

/* Whether c's exclusive locks use the string layout (s_*.lua). */
static inline int dlock__string_layout(const dlock_client *c)
{
    return c->layout == DLOCK_LAYOUT_STRING;
}

/* DLOCK_EINVAL with a message when c uses the string layout, which WHAT
 * (e.g. "read locks") does not support; else DLOCK_OK. */
#define dlock__layout_refuse(c, what)                                          \
    (dlock__string_layout(c)                                                   \
         ? dlock__set_error((c), DLOCK_EINVAL,                                 \
                            "%s: not supported with layout string "            \
                            "(dlock_client_set_layout)",                       \
                            (what))                                            \
         : DLOCK_OK)

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

/* Sleep until until (monotonic ms) on c's cancel condition: 0 when the
 * time came, DLOCK_CANCELED when dlock_client_cancel moved the generation
 * away from gen (the one the wait started in). */
static inline int dlock__sleep_cancelable(dlock_client *c, uint64_t gen,
                                          int64_t until)
{
    int rc = 0;
    pthread_mutex_lock(&c->wait_mu);
    while (atomic_load(&c->cancel_gen) == gen && dlock__now_ms() < until)
        dlock__cond_wait_until(&c->wait_cv, &c->wait_mu, until);
    if (atomic_load(&c->cancel_gen) != gen)
        rc = DLOCK_CANCELED;
    pthread_mutex_unlock(&c->wait_mu);
    return rc;
}

/* A new id of a request that announces itself (a release, a writer
 * leaving), "<client id>:<n>", the same on every node for one request,
 * into buf (at least 64 bytes); returns its length. */
static inline size_t dlock__request_id(dlock_client *c, char *buf)
{
    size_t n;
    memcpy(buf, c->idhex, 32);
    buf[32] = ':';
    n = 33 + dlock__fmt_u64(buf + 33, atomic_fetch_add(&c->release_seq, 1));
    buf[n] = '\0';
    return n;
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

/* The deadline of one step of an operation that must be over by end_ms
 * (monotonic; < 0: no such end): the step's own deadline, or end_ms when
 * that comes first. An acquire's steps use it so that the whole call
 * keeps to the bound dlock.h states (command_timeout_ms). */
static inline int64_t dlock__deadline_by(const dlock_client *c,
                                         int64_t lease_ms, int64_t end_ms)
{
    int64_t d = dlock__deadline(c, lease_ms);
    return end_ms >= 0 && end_ms < d ? end_ms : d;
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

/* The message of a step that failed on every node it asked: the first
 * node's status with one server, DLOCK_NO_QUORUM over several. */
static inline int dlock__fail_all(const dlock_client *c,
                                  const dlock__result *res, const char *what)
{
    return dlock__fail_step(c, res, dlock__all_nodes(c),
                            c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                            what);
}

/* Make cmd a lock write: WAIT for the replicas after it when the client
 * asks for wait_replicas (see dlock__cmd). */
static inline void dlock__cmd_durable(const dlock_client *c, dlock__cmd *cmd)
{
    cmd->wait_replicas = c->ns.wait_replicas;
    cmd->wait_timeout_ms = c->ns.wait_timeout_ms;
    cmd->lock_write = 1;
}

/* The clock drift allowed for a lease with c's options. */
static inline int64_t dlock__drift(const dlock_client *c, int64_t lease_ms)
{
    return dlock__drift_ms(lease_ms, c->opts.drift_ppm, c->opts.drift_fixed_ms);
}

/* The end of a grant's validity on our clock (monotonic ms): an acquire
 * of lease_ms sent at sent_ms holds until then at least (the lease less
 * the drift allowance). What is left of it at t: the result less t. The
 * one formula of every attempt (attempt.c) and the loop's (loop/ops.c). */
static inline int64_t dlock__valid_until(const dlock_client *c, int64_t sent_ms,
                                         int64_t lease_ms)
{
    return sent_ms + lease_ms - dlock__drift(c, lease_ms);
}

#endif /* DLOCK_CORE_H */
