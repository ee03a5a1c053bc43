/*
 * dlock.h - the one public header of libdlock, a distributed lock on Redis.
 *
 * This header is the API manual: what is not declared here is not API.
 *
 * Model
 * -----
 * A dlock_client holds the configuration, the connections to one or more
 * Redis servers, and the client's background threads (the notifier that
 * wakes waiters when a lock is released, and the watchdog that renews
 * leases). With one server the lock is a single-instance lock; with several
 * independent masters it is a Redlock (quorum of N/2+1); with one
 * redis+sentinel:// URL it is a single-instance lock on the master the
 * sentinels name, followed across failovers.
 *
 * A dlock_lock is one held lock. It is obtained by dlock_lock_acquire() and
 * given back by dlock_lock_release(), which always frees the handle.
 *
 * Owner: the owner of a lock is the pair (client instance, thread). The
 * instance id is 128 bits from getrandom(2), made when the client is
 * created. The same owner may acquire a lock it holds again (reentrancy);
 * each acquisition returns its own handle and each handle is released once.
 * On the server each hold is recorded under an owner id unique to that
 * hold ("<client id>:<thread id>:<hold number>"), so a delayed message of
 * an earlier hold can never act on a later one.
 *
 * Threads
 * -------
 * A dlock_client is safe to share between all threads of a process, and
 * should be: it keeps one subscriber connection and one renewer for the
 * whole process. A dlock_lock is used by one thread at a time; release it
 * from the thread that acquired it (the owner includes the thread).
 * dlock_client_cancel() may be called from any thread.
 *
 * Ownership
 * ---------
 * Out-objects belong to the caller and are freed by their own destructor;
 * destructors accept NULL. Strings passed in are copied. A returned
 * const char * belongs to the object it came from and lives as long as it.
 *
 * Errors
 * ------
 * Fallible calls return int: DLOCK_OK (0) or a negative dlock_status code.
 * dlock_strerror() gives static text for any code; dlock_errmsg() gives the
 * specifics of the last failure of the calling thread on a client
 * ("connect 127.0.0.1:6379: Connection refused"). Passwords never appear in
 * messages.
 *
 * Durations are int64_t milliseconds and named *_ms. Deadlines and
 * validity are measured on CLOCK_MONOTONIC.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_EXPORT __attribute__((visibility("default")))
#else
#define DLOCK_EXPORT
#endif

#define DLOCK_VERSION "0.1.0"
#define DLOCK_VERSION_NUM 0x000100

/*
 * Status codes: X(NAME, value, text). Append-only: values never change.
 * Expected outcomes come first; the broad failure classes start at -20.
 */
#define DLOCK_STATUS_LIST(X)                                                   \
    X(OK, 0, "success")                                                        \
    X(BUSY, -1, "lock is held by another owner")                               \
    X(TIMEDOUT, -2, "gave up waiting for the lock")                            \
    X(NOT_OWNER, -3, "not the owner: the lock expired or was taken")           \
    X(LOST, -4, "the lease was lost while the lock was held")                  \
    X(CANCELED, -5, "the wait was cancelled")                                  \
    X(STALE, -6, "fencing token older than one the resource has seen")         \
    X(NO_QUORUM, -7, "no majority of the servers could be reached")            \
    X(EINVAL, -20, "invalid argument")                                         \
    X(EIO, -21, "I/O error talking to the server")                             \
    X(ETIMEDOUT, -22, "the server did not answer in time")                     \
    X(EPROTO, -23, "protocol error: the peer does not speak Redis")            \
    X(ESERVER, -24, "the server returned an error")                            \
    X(ENOMEM, -25, "out of memory")                                            \
    X(ETLS, -26, "TLS error")                                                  \
    X(EAUTH, -27, "authentication failed")                                     \
    X(NOT_REPLICATED, -8,                                                      \
      "too few replicas acknowledged the lock write (wait_replicas)")          \
    X(LOCK_DELAY, -9,                                                          \
      "refused during the lock-delay after a failover or restart")

typedef enum dlock_status {
#define DLOCK__ENUM(name, value, text) DLOCK_##name = (value),
    DLOCK_STATUS_LIST(DLOCK__ENUM)
#undef DLOCK__ENUM
} dlock_status;

/* Static text for any code, "unknown status" for values not in the list. */
DLOCK_EXPORT const char *dlock_strerror(int code);
/* The code's name without prefix ("BUSY"), or "UNKNOWN". */
DLOCK_EXPORT const char *dlock_status_name(int code);
/* The library's version string, as DLOCK_VERSION at build time. */
DLOCK_EXPORT const char *dlock_version(void);

/* How a waiting acquire waits for the holder to go away. */
typedef enum dlock_wait_strategy {
    /* Sleep until the holder's release is announced on the lock's pub/sub
     * channel, bounded by the remaining TTL the server reported. Threads of
     * one process waiting on one key send one contender to Redis.
     * Not fair: every release wakes one contender per waiting process
     * and one wins, so under heavy contention from many processes a
     * waiter can starve until its deadline. Use DLOCK_WAIT_FAIR when
     * order or bounded waiting matters. */
    DLOCK_WAIT_NOTIFY = 0,
    /* Retry with exponential backoff (spin_min_ms doubling up to
     * spin_max_ms) plus jitter, never sleeping past the remaining TTL. */
    DLOCK_WAIT_SPIN = 1,
    /* Strict FIFO: waiters queue in Redis and the release hands the lock
     * directly to the head of the queue. Single server only:
     * dlock_client_new() refuses it with several servers (DLOCK_EINVAL).
     * Acquirers of one name should all use it: others barge. */
    DLOCK_WAIT_FAIR = 2
} dlock_wait_strategy;

#define DLOCK_OPTIONS_VERSION 1

/* Limits, named once. */
#define DLOCK_MAX_SERVERS 64 /* servers of one client (Redlock nodes) */
#define DLOCK_PREFIX_MAX 256 /* bytes of key_prefix */
#define DLOCK_NAME_MAX 512   /* bytes of a lock name */
#define DLOCK_OWNER_MAX 96   /* bytes of an owner id, with its NUL */
#define DLOCK_KEY_MAX 4096   /* bytes of a fenced value's key */

/*
 * Client options. Call dlock_options_init() first: it fills every default.
 * Every string is copied by dlock_client_new().
 */
typedef struct dlock_options {
    unsigned version; /* DLOCK_OPTIONS_VERSION */

    /* Server URLs: redis://[user[:password]@]host[:port][/db],
     * rediss://... for TLS, unix:///path/to.sock[?db=N]. One server: a
     * single-instance lock. Several independent masters: Redlock. */
    const char *const *servers;
    size_t nservers;

    /* ACL user and password; when set they override the URL's. */
    const char *username;
    const char *password;

    /* Prefix of every key: keys are "<prefix>:{<name>}..." (default
     * "dlock"; 1 to 256 bytes, no '{' or '}': the braces make every key
     * of one lock share a Redis Cluster hash slot). */
    const char *key_prefix;

    int64_t connect_timeout_ms; /* name lookup, connect, TLS and AUTH;
                                   default 2000 */
    int64_t command_timeout_ms; /* per command and server, default 2000 */

    /* Idle connections kept per server for the threads of the client
     * (default 4). More threads than this still work: extra connections
     * are opened and closed on demand. */
    int pool_size;

    dlock_wait_strategy wait_strategy; /* default DLOCK_WAIT_NOTIFY */
    int64_t spin_min_ms;               /* default 1 */
    int64_t spin_max_ms;               /* default 128 */

    /* The clock drift allowed for, as parts per million of the lease,
     * plus drift_fixed_ms (defaults 10000 = 1% and 2 ms): validity =
     * lease - elapsed - drift, for one server and for Redlock alike. */
    int64_t drift_ppm;
    int64_t drift_fixed_ms;

    /* TLS for rediss:// servers. CA file or directory to trust (default:
     * the system store); the name to verify (default: the URL's host,
     * checked as an IP address when it is one); an optional client
     * certificate and key (PEM). tls_insecure turns every verification
     * off: for tests only. dlock_client_new() then says so: a warning in
     * errbuf (even though it succeeds) and in dlock_errmsg() of the
     * creating thread. */
    const char *tls_ca_file;
    const char *tls_ca_dir;
    const char *tls_server_name;
    const char *tls_cert_file;
    const char *tls_key_file;
    int tls_insecure;

    /* Sentinel (a redis+sentinel:// or rediss+sentinel:// server URL,
     * which must then be the only server): the ACL user and password of
     * the sentinels themselves (the URL's and the options above are the
     * data nodes'). NULL: the sentinels need none. */
    const char *sentinel_username;
    const char *sentinel_password;

    /* Durability. wait_replicas > 0: every lock write (acquire, extend,
     * fenced set) is followed, in the same round trip, by WAIT
     * wait_replicas wait_replicas_timeout_ms; fewer acknowledgements give
     * DLOCK_NOT_REPLICATED (an acquire's grant is undone first). Default 0
     * (no WAIT); wait_replicas_timeout_ms default 1000. */
    int wait_replicas;
    int64_t wait_replicas_timeout_ms;

    /* Lock-delay: when a master's run_id or replication id changes (a
     * failover promoted a replica, or it restarted) and grants were not
     * covered by wait_replicas, new grants on it are refused for this
     * long (DLOCK_LOCK_DELAY; a waiting acquire waits it out), at least
     * the longest lease this client has taken: a lock the old master
     * granted and the new one never saw has expired by then. -1 (the
     * default): 30000 with Sentinel, off otherwise; 0: off. */
    int64_t lock_delay_ms;
} dlock_options;

/* Fill every field of *opts with its default (no servers). */
DLOCK_EXPORT void dlock_options_init(dlock_options *opts);

typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;

/*
 * Create a client. Checks and copies the options and parses every URL;
 * connections are made on first use (so a server that is down now does
 * not fail this call). On failure *out is NULL and, when errbuf is not
 * NULL, a message is written there (there is no client to ask yet).
 * Returns DLOCK_OK, DLOCK_EINVAL (bad option or URL), DLOCK_ETLS (CA or
 * certificate could not be loaded), DLOCK_ENOMEM or DLOCK_EIO.
 */
DLOCK_EXPORT int dlock_client_new(dlock_client **out, const dlock_options *opts,
                                  char *errbuf, size_t errbuflen);

/* Stop the client's threads and close its connections. Locks still held
 * are not released (their leases run out); release or detach every handle
 * first: handles left over can no longer be used, and their small
 * allocations are lost. Accepts NULL. */
DLOCK_EXPORT void dlock_client_free(dlock_client *client);

/* The message of the last failure of the calling thread on this client,
 * or "" when there was none. Valid until the thread's next call. */
DLOCK_EXPORT const char *dlock_errmsg(const dlock_client *client);

/* The client's instance id, 32 hex digits. */
DLOCK_EXPORT const char *dlock_client_id(const dlock_client *client);

/* Wake every acquire waiting on this client; they return DLOCK_CANCELED.
 * Acquires started after this call wait normally again. Safe from any
 * thread (not from a signal handler). */
DLOCK_EXPORT void dlock_client_cancel(dlock_client *client);

/* Counters the client keeps since it was created; a snapshot. */
typedef struct dlock_stats {
    uint64_t requests;     /* commands sent to servers (all nodes) */
    uint64_t acquisitions; /* successful acquires (reentrant ones too) */
    uint64_t busy;         /* acquire attempts that found the lock held */
    uint64_t waits;        /* times a thread went to sleep waiting */
    uint64_t wakeups;      /* release notifications that woke a waiter */
    uint64_t renewals;     /* lease renewals by the watchdog */
    uint64_t lost;         /* leases found lost */
    uint64_t reconnects;   /* connections (re)opened */
} dlock_stats;

DLOCK_EXPORT void dlock_client_stats(const dlock_client *client,
                                     dlock_stats *out);

/* Called from the client's watchdog thread when a held lock's lease is
 * found lost (the key is gone or has another owner, or renewals failed
 * until the validity ran out). Keep it short; it may not call back into
 * the lock it is told about, except dlock_lock_status(). */
typedef void (*dlock_lost_cb)(dlock_lock *lock, void *userdata);

#define DLOCK_ACQUIRE_OPTIONS_VERSION 1

typedef struct dlock_acquire_options {
    unsigned version; /* DLOCK_ACQUIRE_OPTIONS_VERSION */
    /* 0: try once; > 0: wait at most this long; < 0: wait forever. */
    int64_t wait_ms;
    /* The lease: how long the lock outlives a holder that stops renewing.
     * Must be > 0. Default 30000. */
    int64_t lease_ms;
    /* Renew the lease from the client's watchdog thread (every lease/3)
     * until the lock is released. Default 0. */
    int watchdog;
    /* Told when the lease is found lost (watchdog locks only). */
    dlock_lost_cb on_lost;
    void *on_lost_userdata;
} dlock_acquire_options;

/* Fill *opts with the defaults: try once, 30 s lease, no watchdog. */
DLOCK_EXPORT void dlock_acquire_options_init(dlock_acquire_options *opts);

/*
 * Acquire the lock NAME (1 to 512 bytes, any bytes but NUL).
 * Returns DLOCK_OK with *out set, or: DLOCK_BUSY (wait_ms == 0 and the
 * lock is held), DLOCK_TIMEDOUT (waited wait_ms), DLOCK_CANCELED,
 * DLOCK_NOT_OWNER (a reentrant acquire found our earlier hold expired),
 * DLOCK_NO_QUORUM (Redlock), or an error class. On failure *out is NULL.
 * A failed acquire never leaves a lock behind: when a reply was lost the
 * client releases what it may have taken (in the background, until the
 * server answers or the lease has run out).
 * A reentrant acquire (the thread already holds NAME) sets the lease to
 * the new lease_ms and turns the watchdog on if asked; it never turns it
 * off.
 */
DLOCK_EXPORT int dlock_lock_acquire(dlock_lock **out, dlock_client *client,
                                    const char *name, int64_t wait_ms,
                                    int64_t lease_ms);

/* dlock_lock_acquire() with every option. opts may be NULL (defaults). */
DLOCK_EXPORT int dlock_lock_acquire_ex(dlock_lock **out, dlock_client *client,
                                       const char *name,
                                       const dlock_acquire_options *opts);

/*
 * Release the lock and free the handle, whatever the outcome.
 * Returns DLOCK_OK (released, or one reentry level given back),
 * DLOCK_NOT_OWNER (the lease had expired or another owner has it),
 * DLOCK_LOST (the watchdog had already found it lost), or an error class
 * (the lease then runs out by itself). Accepts NULL (returns DLOCK_EINVAL).
 */
DLOCK_EXPORT int dlock_lock_release(dlock_lock *lock);

/* Free the handle WITHOUT releasing the lock: it stays held on the
 * servers until its lease runs out (renewal of it stops), or until a
 * process that adopted it (dlock_lock_adopt) releases it. For tools whose
 * acquire and release happen in different processes. Accepts NULL. */
DLOCK_EXPORT void dlock_lock_detach(dlock_lock *lock);

/* Set the lease to lease_ms from now. DLOCK_NOT_OWNER when the lock has
 * expired or been taken; with Redlock, a majority must agree within the
 * remaining validity. */
DLOCK_EXPORT int dlock_lock_extend(dlock_lock *lock, int64_t lease_ms);

/* The lock's fencing token: strictly greater than the token of every
 * acquisition of this name before it (reentry keeps the token). */
DLOCK_EXPORT uint64_t dlock_lock_token(const dlock_lock *lock);

/* Milliseconds of validity left by the client's monotonic clock (the
 * lease measured from when the request was sent, less drift for Redlock);
 * 0 once expired or lost. */
DLOCK_EXPORT int64_t dlock_lock_validity_ms(const dlock_lock *lock);

/* DLOCK_OK while the lock is believed held, DLOCK_LOST once the watchdog
 * found it lost, DLOCK_NOT_OWNER once its validity ran out. */
DLOCK_EXPORT int dlock_lock_status(const dlock_lock *lock);

/* The lock's name as given to acquire. */
DLOCK_EXPORT const char *dlock_lock_name(const dlock_lock *lock);

/* The owner id this lock is held under on the servers:
 * "<client id>:<thread id>:<hold number>" (reentrant acquisitions share
 * it). */
DLOCK_EXPORT const char *dlock_lock_owner(const dlock_lock *lock);

/*
 * Run fn(lock, userdata) while holding NAME, then release it whatever fn
 * returned. opts may be NULL (defaults: try once, 30 s lease).
 * fn's return value is stored in *fn_result when not NULL.
 * Returns the acquire's failure, else the release's result (DLOCK_OK, or
 * e.g. DLOCK_NOT_OWNER when the lease ran out while fn ran: then fn's
 * work was not protected all along and the caller should know).
 */
DLOCK_EXPORT int dlock_with_lock(dlock_client *client, const char *name,
                                 const dlock_acquire_options *opts,
                                 int (*fn)(dlock_lock *lock, void *userdata),
                                 void *userdata, int *fn_result);

/*
 * Fenced write: store VALUE under the Redis key KEY (un-prefixed, as the
 * caller names it) only if TOKEN is >= the highest token any fenced write
 * to KEY has carried, and record TOKEN. KEY holds a hash with fields
 * "value" and "fence". Returns DLOCK_OK, DLOCK_STALE (older token:
 * nothing changed), or an error class. With several servers the write
 * goes to the first one: the fenced value does not get Redlock's tolerance
 * of failed servers.
 */
DLOCK_EXPORT int dlock_fenced_set(dlock_client *client, const char *key,
                                  uint64_t token, const void *value,
                                  size_t len);

/* Read a fenced value: *value (malloc'd, NUL-terminated, free() it) and
 * *len, and the highest token seen in *fence (0 if never written).
 * *value is NULL when KEY has no value. Returns DLOCK_OK, DLOCK_EINVAL,
 * DLOCK_EPROTO (KEY is not a fenced value's hash) or an error class. */
DLOCK_EXPORT int dlock_fenced_get(dlock_client *client, const char *key,
                                  char **value, size_t *len, uint64_t *fence);

/* What the servers say about a lock, for tools such as `dlock status`. */
typedef struct dlock_info {
    int held;                    /* 1 if some owner holds it */
    char owner[DLOCK_OWNER_MAX]; /* the owner id, "" when free */
    int64_t reentry;             /* the owner's reentry count */
    int64_t ttl_ms;              /* remaining lease, -1 when free */
    uint64_t last_token;         /* the last fencing token granted (0: never) */
    int64_t waiters;             /* fair-mode waiters queued, -1 when unknown */
    int nodes_holding;           /* Redlock: nodes on which it is held */
} dlock_info;

/* Fill *out from the servers (all of them with Redlock; held = held on
 * any). Returns DLOCK_OK, DLOCK_EINVAL, DLOCK_NO_QUORUM (Redlock: fewer
 * than a majority answered) or an error class. */
DLOCK_EXPORT int dlock_lock_inspect(dlock_client *client, const char *name,
                                    dlock_info *out);

/*
 * Ask every server for the settings the lock's promises rest on, and
 * describe each one that weakens them, one line per finding, into buf
 * (len bytes, NUL-terminated, as many lines as fit):
 *  - maxmemory-policy other than noeviction: under memory pressure Redis
 *    may evict a lock key (every lock key has a TTL, so volatile-*
 *    policies too), and then two owners can hold the lock;
 *  - with several servers (Redlock), appendonly not yes or appendfsync
 *    not always: a node restarted without its data forgets the locks and
 *    fencing counters a majority argument relies on (docs/design.md);
 *  - a server that cannot be reached, or that refuses CONFIG GET (ACL,
 *    renamed command): not checked, said so;
 *  - a master with replicas and no wait_replicas (a failover can lose a
 *    grant), fewer replicas connected than wait_replicas, a failover or
 *    restart seen recently, a sentinel that does not answer or that
 *    disagrees with the others (see dlock_client_topology).
 * Returns the number of findings (0: nothing to report), or DLOCK_EINVAL.
 */
DLOCK_EXPORT int dlock_client_check(dlock_client *client, char *buf,
                                    size_t len);

/*
 * Describe the deployment, for "is this lock safe here?" (`dlock status`):
 * one line per fact into buf (len bytes, NUL-terminated, as many whole
 * lines as fit): the client's topology, wait_replicas and lock-delay;
 * with Sentinel, what each sentinel names as master and whether the
 * +switch-master watch is up; for every server its role, the replicas
 * connected and their lag, min-replicas-to-write, persistence (AOF and
 * appendfsync, or RDB only) and maxmemory-policy ("unknown" where an ACL
 * refuses INFO or CONFIG), and a failover or restart this client has
 * seen (its run_id or replication id changed). dlock_client_check()
 * includes the warnings that follow from these facts.
 * Returns the number of lines, or DLOCK_EINVAL.
 */
DLOCK_EXPORT int dlock_client_topology(dlock_client *client, char *buf,
                                       size_t len);

/*
 * Adopt a lock held under another owner id, for tools whose acquire and
 * release happen in different processes (`dlock acquire` ... `dlock
 * release`). OWNER is the string dlock_lock_owner() gave; TOKEN its
 * fencing token (0 if unknown). Checks that OWNER holds NAME now
 * (DLOCK_NOT_OWNER otherwise); the handle then releases or extends as
 * that owner, at its current reentry level.
 */
DLOCK_EXPORT int dlock_lock_adopt(dlock_lock **out, dlock_client *client,
                                  const char *name, const char *owner,
                                  uint64_t token);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
