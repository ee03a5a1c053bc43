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
 * sentinels name, followed across failovers; with one redis+cluster://
 * URL it is a single-instance lock on the master serving the name's hash
 * slot, followed across slot moves and failovers.
 *
 * What can be held on a name: a lock (exclusive, reentrant), a
 * semaphore's permit (at most N holders), a read-write lock's reader
 * (the writer is the lock itself), and a leadership (an election is a
 * lock whose holder is the leader). All are held through a dlock_lock
 * handle with its own lease, owner id and fencing token.
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
 * an earlier hold can never act on a later one. Nor can one of an earlier
 * attempt of the same acquire: an attempt whose give-back (of what it may
 * have taken) a server did not answer at once is followed by attempts
 * under a new hold number.
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
 *
 * Contents
 * --------
 * The declarations come in sections, one per object, each under a
 * numbered divider:
 *   1. Errors            dlock_status, dlock_strerror, dlock_status_name,
 *                        dlock_version
 *   2. The client        dlock_options, dlock_client_new/_free,
 *                        dlock_errmsg, dlock_client_id, dlock_client_cancel
 *   3. The lock          dlock_acquire_options, dlock_lock_acquire(_ex),
 *                        dlock_lock_release/_detach/_extend, the handle's
 *                        accessors, dlock_with_lock
 *   4. Semaphores and    dlock_sem_acquire, dlock_sem_set_limit,
 *      read-write locks  dlock_rw_acquire_shared, dlock_rw_downgrade,
 *                        dlock_shared_inspect
 *   5. Fencing tokens    dlock_fenced_set/_get/_read,
 *                        dlock_lock_fenced_set_release, dlock_lock_check
 *      and fenced values
 *   6. Leader election   dlock_campaign, dlock_election_*, dlock_leader,
 *                        dlock_leader_wait
 *   7. Several locks     dlock_lock_acquire_all, dlock_lock_release_all
 *   8. The operator's    dlock_lock_inspect, dlock_client_check,
 *      view              dlock_client_topology, dlock_lock_adopt,
 *                        dlock_list
 *   9. Metrics and       dlock_client_stats, dlock_client_metrics,
 *      events            dlock_histogram_bound_us, the events of
 *                        dlock_options.on_event, dlock_event_name
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

/* ====================================================================
 * 1. Errors: status codes, their texts, the version
 * ==================================================================== */

/*
 * Status codes: X(NAME, value, text). Append-only: values never change.
 * Expected outcomes come first; the broad failure classes start at -20.
 *
 * Which failures a retry may cure: DLOCK_EIO, DLOCK_ETIMEDOUT and
 * DLOCK_NO_QUORUM (a server down, slow or unreachable) may pass;
 * DLOCK_EAUTH (credentials refused: WRONGPASS, NOAUTH) and DLOCK_EREFUSED
 * (the server refuses what we ask whoever asks again: an ACL without the
 * right to run EVALSHA/EVAL or to touch the lock's keys (NOPERM), a
 * read-only replica (READONLY), EVAL renamed or disabled (unknown
 * command), a database the server does not have (the URL's /DB: SELECT
 * refused)) do not: fix the configuration. With several servers, these
 * are returned when so many servers refused that no majority is left.
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
    X(NOT_REPLICATED, -8,                                                      \
      "too few replicas acknowledged the lock write (wait_replicas)")          \
    X(LOCK_DELAY, -9,                                                          \
      "refused during the lock-delay after a failover or restart")             \
    X(EINVAL, -20, "invalid argument")                                         \
    X(EIO, -21, "I/O error talking to the server")                             \
    X(ETIMEDOUT, -22, "the server did not answer in time")                     \
    X(EPROTO, -23, "protocol error: the peer does not speak Redis")            \
    X(ESERVER, -24, "the server returned an error")                            \
    X(ENOMEM, -25, "out of memory")                                            \
    X(ETLS, -26, "TLS error")                                                  \
    X(EAUTH, -27, "authentication failed")                                     \
    X(EREFUSED, -28, "refused by the server: retrying will not help")

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

/* ====================================================================
 * 2. The client: options, lifetime, messages, cancellation
 * ==================================================================== */

/* How a waiting acquire waits for the holder to go away. */
typedef enum dlock_wait_strategy {
    /* Sleep until the holder's release is announced on the lock's pub/sub
     * channel, bounded by the remaining TTL the server reported. Threads of
     * one process waiting on one key send one contender to Redis.
     * Not fair: every release wakes one contender per waiting process
     * and one wins, so under heavy contention from many processes a
     * waiter can starve until its deadline. The default before
     * DLOCK_WAIT_FAIR became it. */
    DLOCK_WAIT_NOTIFY = 0,
    /* Retry with exponential backoff (spin_min_ms doubling up to
     * spin_max_ms) plus jitter, never sleeping past the remaining TTL. */
    DLOCK_WAIT_SPIN = 1,
    /* The default. FIFO across processes, without a herd: waiters queue
     * in Redis (one per process and key; the process's other threads
     * wait their turn in-process, in the order they came) and a
     * release serves only the first
     * live one: with one server it hands the lock over (no acquire
     * round trip), with several (Redlock) it wakes that waiter alone,
     * which then acquires in one round trip. A waiter that died holds
     * the others up for at most about 3 s. Acquirers of one name should
     * all use it: others barge. Between hosts, Redlock serves waiters in
     * the order of their wall clocks when they queued (keep clocks in
     * step). Without pub/sub permission (ACL) waiters poll instead, and
     * the first acquire that had to leaves a warning in dlock_errmsg(). */
    DLOCK_WAIT_FAIR = 2
} dlock_wait_strategy;

/* 2 added fence_retention_ms. Fields are only ever appended.
 * dlock_client_new() still accepts a struct of version 1 (it reads no
 * field beyond that version's, and the new ones take their defaults);
 * dlock_options_init() fills the whole struct of this header, so a
 * program built against an earlier header that calls it must be rebuilt
 * (a language binding: its struct must match this header). */
#define DLOCK_OPTIONS_VERSION 2

/* Limits, named once. */
#define DLOCK_MAX_SERVERS 64 /* servers of one client (Redlock nodes) */
#define DLOCK_PREFIX_MAX 256 /* bytes of key_prefix */
#define DLOCK_NAME_MAX 512   /* bytes of a lock name */
#define DLOCK_OWNER_MAX 96   /* bytes of an owner id, with its NUL */
#define DLOCK_KEY_MAX 4096   /* bytes of a fenced value's key */
#define DLOCK_HOST_MAX 256   /* bytes of a holder's host name, with NUL */
#define DLOCK_LABEL_MAX 512  /* bytes of a holder's label, with its NUL */

struct dlock_event; /* see "Events" below */

/*
 * Client options. Call dlock_options_init() first: it fills every default.
 * Every string is copied by dlock_client_new().
 */
typedef struct dlock_options {
    unsigned version; /* DLOCK_OPTIONS_VERSION */

    /* Server URLs: redis://[user[:password]@]host[:port][/db],
     * rediss://... for TLS, unix:///path/to.sock[?db=N]. One server: a
     * single-instance lock. Several independent masters: Redlock. Two
     * entries that are one server are refused (one server must not count
     * twice toward a majority): the same host and port or socket path,
     * whatever the db, by dlock_client_new (DLOCK_EINVAL); others
     * (127.0.0.1 and localhost, a socket and the TCP port of one server)
     * by the server's run_id (INFO server), asked on the way with the
     * first request on each server's first connection: that operation and
     * every later one of the client then fail with DLOCK_EINVAL naming
     * both entries (a failed acquire still gives back what it took). A
     * server that refuses INFO is compared by its URL only.
     * A Redis Cluster: one URL, alone,
     * redis+cluster://[user[:password]@]host:port[,host:port...] (or
     * rediss+cluster://) naming seed nodes; each lock then lives on the
     * master serving its name's hash slot (a seed not in cluster mode,
     * or a redis:// URL naming a cluster node, fails with DLOCK_EINVAL at
     * the first call that meets it; a cluster that is down, CLUSTERDOWN,
     * with DLOCK_ESERVER). */
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
    /* Per command and server, default 2000. It also bounds a whole
     * acquire attempt: its connects (cut short by it when
     * connect_timeout_ms is longer), the request and its one retry on a
     * fresh connection, the Redlock fencing round, and the give-back
     * (undo) of a failed attempt all end within command_timeout_ms after
     * the attempt began; an undo not answered by then is retried from
     * the watchdog thread. This holds for every kind of hold (a lock,
     * a semaphore permit, a reader). So dlock_lock_acquire() returns within
     * command_timeout_ms when it does not wait (wait_ms == 0, or a first
     * attempt that fails with an error that is not an outage: see
     * DLOCK_ACQUIRE_NO_OUTAGE_WAIT), and within wait_ms +
     * command_timeout_ms when it waits (fair mode: plus one more
     * command_timeout_ms to leave the queue). Every other call is one
     * step per node, in parallel: within command_timeout_ms, except
     * dlock_client_check(), which asks the servers one after the other
     * (the sum). */
    int64_t command_timeout_ms;

    /* Idle connections kept per server for the threads of the client
     * (default 4). More threads than this still work: extra connections
     * are opened and closed on demand. */
    int pool_size;

    dlock_wait_strategy wait_strategy; /* default DLOCK_WAIT_FAIR */
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
     * fenced set; also a semaphore permit's or a reader's acquire, a
     * downgrade) is followed, in the same round trip, by WAIT
     * wait_replicas wait_replicas_timeout_ms; fewer acknowledgements give
     * DLOCK_NOT_REPLICATED (an acquire's grant is undone first, and so
     * is an extend's extension, unless the watchdog renews it); a lock
     * (or permit) handed over by a fair release is confirmed the same way
     * before the acquire returns. In a Redis Cluster, WAIT runs on the
     * master of the lock's slot. Default 0 (no WAIT);
     * wait_replicas_timeout_ms default 1000. */
    int wait_replicas;
    int64_t wait_replicas_timeout_ms;

    /* Lock-delay: when a master's run_id or replication id changes (a
     * failover promoted a replica, or it restarted) and grants were not
     * covered by wait_replicas, new grants on it are refused for this
     * long (DLOCK_LOCK_DELAY; a waiting acquire waits it out), at least
     * the longest lease this client has taken: a lock the old master
     * granted and the new one never saw has expired by then. -1 (the
     * default): 30000 with Sentinel, off otherwise; 0: off. In a Redis
     * Cluster each master has its own delay (a restart, or a replica
     * promoted from a master this client saw): only its slots wait. */
    int64_t lock_delay_ms;

    /* Holder info (issue 21): with holder_info = 1, every fresh hold also
     * records who holds it, in <prefix>:{<name>}:i beside the lock (one
     * more round trip after the acquire, renewed with the lease in the
     * same call, left to expire after the release): this host's name, the
     * pid (holder_pid, or getpid() when 0), holder_label (copied; at most
     * DLOCK_LABEL_MAX - 1 bytes; a command line or any text, NULL for
     * none), the start time and the library's version.
     * dlock_lock_inspect() and dlock_list() show it. Off by default: a
     * client that does not ask pays nothing. */
    int holder_info;
    const char *holder_label;
    int64_t holder_pid;

    /* Events (see dlock_event below): called for every acquisition,
     * busy answer, given-up wait, renewal, loss and release of this
     * client, from the thread where it happens. NULL: none. */
    void (*on_event)(const struct dlock_event *ev, void *userdata);
    void *on_event_userdata;

    /* Version 2. Fence retention: how long a lock's fence hash
     * (<prefix>:{<name>}:f, the name's last token) outlives the last
     * grant, at least this and at most twice. Default 604800000 (7 days):
     * tokens then increase over a name's whole life, whatever the
     * servers' clocks do, and a retried release is recognised. 0: nothing
     * is kept once a name is released and free (no key per name ever
     * locked: a gateway locking one name per request; a name handed over
     * between fair waiters keeps its last token 7 to 14 days); the hold's
     * token is kept in the lock hash itself (field "#t") while it is
     * held, and tokens of later holds are still above it as long as the
     * server's clock does not step back (docs/design.md, "Fence
     * retention"). Otherwise 1000 ms to 10 years. Applies to plain locks
     * (and writers) of one server or a Cluster, to elections (a
     * resignation also deletes the leader hash <prefix>:{<name>}:l; a
     * leader that died leaves it for 7 days), to semaphores and to
     * readers (with 0 the release that leaves the name free and
     * unqueued deletes its keys; a holder that died leaves them for 7
     * days); a client of several servers (Redlock) keeps 7 days when it
     * is 0. */
    int64_t fence_retention_ms;
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

/* Key layouts of exclusive locks (dlock_client_set_layout). */
typedef enum dlock_layout {
    /* The default: a lock is a hash <prefix>:{<name>} (owner -> reentry
     * count, and marks), with every kind of wait, holder info, fenced
     * values, read-write locks, elections and Redlock. */
    DLOCK_LAYOUT_HASH = 0,
    /* A lock is a string <prefix>:{<name>} = "<owner> <count> <token>"
     * whose TTL is the lease. With fence_retention_ms 0 and a notify or
     * spin wait, the fresh uncontended acquire is a plain SET NX PX (no
     * script) whose token is issued lazily: the first
     * dlock_lock_token() of the hold asks the server once (4 Redis
     * commands a cycle that does not ask, as SET NX PX + a
     * compare-and-delete). Otherwise the acquire is one script doing
     * TIME and SET NX PX, the release GET and DEL (6 commands a cycle
     * for a fair try without retention, with an EXISTS of the queue;
     * 9 with retention). Exclusive locks of one
     * server, a Sentinel group or a Cluster, every wait strategy (FAIR
     * hands over as the hash layout does); over several servers
     * (Redlock) 9 commands a server a cycle, NOTIFY and SPIN waits only
     * (no fair queue), tokens ordered as in the hash layout, and a
     * server that lost a hold is not given it back by the renewal.
     * Clients of one name must all use one layout:
     * a hash-layout client (or an earlier version) and a string-layout
     * client refuse each other's holds with DLOCK_EINVAL, and never both
     * hold (docs/design.md, "The string layout"). */
    DLOCK_LAYOUT_STRING = 1
} dlock_layout;

/* Choose the key layout of client's exclusive locks: call it after
 * dlock_client_new, before the client acquires anything (and before a
 * dlock_loop is made on it). DLOCK_LAYOUT_STRING is refused
 * (DLOCK_EINVAL, with a message) with holder_info, and for a client of
 * several servers (Redlock) whose wait_strategy is DLOCK_WAIT_FAIR (the
 * default: choose NOTIFY or SPIN); any change is refused once the client
 * holds a lock. With the string layout these calls return DLOCK_EINVAL:
 * read locks (dlock_rw_acquire_shared, dlock_rw_downgrade; the loop's
 * read acquire) and elections (dlock_campaign, the loop's campaign);
 * semaphores are unchanged. The layout also chooses the fenced values'
 * form (dlock_fenced_set): one string with the string layout, a hash
 * with the hash layout. Returns DLOCK_OK. */
DLOCK_EXPORT int dlock_client_set_layout(dlock_client *client,
                                         dlock_layout layout);

/* How long a waiting acquire of client rides out a server outage in a
 * row (connections refused or lost, no quorum, a Sentinel master that
 * does not answer: it keeps trying, with the spin backoff) before it
 * gives up with the outage's status: ms (1 or more), or -1 for as long as
 * the wait lasts. The default is 60000 (a minute). It applies to the
 * blocking API's waits and to an event loop's (dlock_loop.h), on every
 * topology; waits that begin after the call. A setter, not a
 * dlock_options field, so that the struct's layout (the Python binding
 * mirrors it) stays. Returns DLOCK_OK, or DLOCK_EINVAL for 0 or less
 * than -1. */
DLOCK_EXPORT int dlock_client_set_outage_ride_ms(dlock_client *client,
                                                 int64_t ms);

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

/* ====================================================================
 * 3. The lock: acquire, release, extend, the handle
 * ==================================================================== */

/* Called from the client's watchdog thread when a held lock's lease is
 * found lost (the key is gone or has another owner, or renewals failed
 * until the validity ran out: dlock_lock_lost_reason() says which). Keep
 * it short; it may not call back into the lock it is told about, except
 * dlock_lock_status() and dlock_lock_lost_reason(). */
typedef void (*dlock_lost_cb)(dlock_lock *lock, void *userdata);

#define DLOCK_ACQUIRE_OPTIONS_VERSION 2

/* dlock_acquire_options.flags. */
/* Never re-enter: this acquire is a hold of its own even when the calling
 * thread holds NAME already (then it is busy, or waits like any other
 * owner), and no later acquire of the thread re-enters it. What a worker
 * pool needs when a hold belongs to a request rather than to the thread
 * that happens to run it: a duplicate request that lands on the worker
 * already holding its key must get DLOCK_BUSY, not a second level of the
 * first request's hold (both would then be processed). */
#define DLOCK_ACQUIRE_NO_REENTRY 0x1u
/* Do not wait through an outage: a waiting acquire (wait_ms != 0) whose
 * attempt fails because the servers cannot be reached or answer too late
 * (DLOCK_EIO, DLOCK_ETIMEDOUT), too few of them answer (DLOCK_NO_QUORUM),
 * one is not ready (DLOCK_ESERVER: LOADING, MASTERDOWN, BUSY, TRYAGAIN;
 * on Sentinel any DLOCK_ESERVER, a failover's READONLY included) or too
 * few replicas acknowledged the grant (DLOCK_NOT_REPLICATED: given back)
 * returns that error at once. By default, in every topology, such errors
 * are tried again, with backoff, while the wait lasts (at most 60 s in a
 * row), the first attempt's too (so a wrong URL costs a waiting acquire
 * its wait); at the deadline the acquire returns the outage's error, not
 * DLOCK_TIMEDOUT. A try (wait_ms 0) never waits through an outage. */
#define DLOCK_ACQUIRE_NO_OUTAGE_WAIT 0x2u

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
    /* Version 2: DLOCK_ACQUIRE_* flags. Default 0 (a thread re-enters
     * what it holds). A version 1 struct is still accepted; it has no
     * flags. */
    unsigned flags;
} dlock_acquire_options;

/* Fill *opts with the defaults: try once, 30 s lease, no watchdog. */
DLOCK_EXPORT void dlock_acquire_options_init(dlock_acquire_options *opts);

/*
 * Acquire the lock NAME (1 to 512 bytes, any bytes but NUL; in a Redis
 * Cluster not beginning with '}', DLOCK_EINVAL: see libdlock(3)).
 * Returns DLOCK_OK with *out set, or: DLOCK_BUSY (wait_ms == 0 and the
 * lock is held), DLOCK_TIMEDOUT (waited wait_ms), DLOCK_CANCELED,
 * DLOCK_NOT_OWNER (a reentrant acquire found our earlier hold expired),
 * DLOCK_NO_QUORUM (Redlock), or an error class. On failure *out is NULL.
 * A failed acquire never leaves a lock behind: when a reply was lost the
 * client releases what it may have taken (in the background, until the
 * server answers or the lease has run out).
 * A reentrant acquire (the thread already holds NAME) sets the lease to
 * the new lease_ms and turns the watchdog on if asked; it never turns it
 * off. A success leaves dlock_errmsg() empty, except once per client for
 * a warning ("warning: ...") when the wait had to poll because the server
 * refuses the lock's pub/sub channels to this user.
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
 * remaining validity, the servers that do not hold it are given it
 * again where it is free (see dlock_lock_nodes_holding), and a success
 * leaves a warning in dlock_errmsg() while not every server holds it.
 * DLOCK_NOT_REPLICATED (wait_replicas): the extension is given back, the
 * lease is what it was (a lock the watchdog renews gets its lease at the
 * next renewal). */
DLOCK_EXPORT int dlock_lock_extend(dlock_lock *lock, int64_t lease_ms);

/* The lock's fencing token: strictly greater than the token of every
 * acquisition of this name before it (reentry keeps the token). In the
 * string layout without fence retention (DLOCK_LAYOUT_STRING) a hold
 * taken by the plain SET NX PX has no token until asked: the first call
 * asks the server (one round trip, which stamps the server's time while
 * the hold is still this owner's) and later calls answer from the
 * handle. Returns 0 when the hold is gone then (the lease ran out, or
 * another owner has it: DLOCK_NOT_OWNER in the thread's message) or the
 * server did not answer (a later call asks again): a fenced writer must
 * not go on with a hold whose token is 0. */
DLOCK_EXPORT uint64_t dlock_lock_token(const dlock_lock *lock);

/* Milliseconds of validity left by the client's monotonic clock (the
 * lease measured from when the request was sent, less drift for Redlock);
 * 0 once expired or lost. */
DLOCK_EXPORT int64_t dlock_lock_validity_ms(const dlock_lock *lock);

/* DLOCK_OK while the lock is believed held, DLOCK_LOST once the watchdog
 * found it lost, DLOCK_NOT_OWNER once its validity ran out. */
DLOCK_EXPORT int dlock_lock_status(const dlock_lock *lock);

/*
 * Why the watchdog found the lease lost. Returns DLOCK_OK while it is not
 * (DLOCK_LOST from dlock_lock_status() only); DLOCK_NOT_OWNER when the
 * servers answered a renewal that the lock is no longer this owner's (a
 * majority of them, with Redlock): its key expired or was deleted, or
 * another owner holds it; else the failure of the last renewal
 * (DLOCK_ETIMEDOUT, DLOCK_EIO, DLOCK_NO_QUORUM, DLOCK_EREFUSED, ...):
 * renewals failed until the validity ran out. When why is not NULL, *why
 * is set to a sentence for people ("" while not lost), e.g. "renewals
 * failed: extend: 10.0.0.5:6379: no answer in time"; it belongs to the
 * lock. May be called from the lost callback.
 */
DLOCK_EXPORT int dlock_lock_lost_reason(const dlock_lock *lock,
                                        const char **why);

/*
 * On how many servers the lock was last found held, and in *servers (when
 * not NULL) how many the client has. With Redlock: the servers that
 * granted its acquire, then, after each renewal (the watchdog's or
 * dlock_lock_extend), those that confirmed it, the servers it took back
 * included: a renewal that a majority confirms puts the lock again on
 * every server where it is free (one that missed the acquire, or lost
 * the lock in a restart without its data), never where another owner
 * holds it. A Redlock acquire returns once a majority granted; the other
 * servers are still asked and follow within their round trip, so the
 * count right after an acquire may be that majority. A lock on a bare
 * majority survives the loss of none of those servers; dlock_lock_extend
 * leaves a warning in dlock_errmsg() while not every server holds it.
 * One server or a Redis Cluster: 1 of 1. Returns the count, or
 * DLOCK_EINVAL for a NULL lock.
 */
DLOCK_EXPORT int dlock_lock_nodes_holding(const dlock_lock *lock, int *servers);

/* The lock's name as given to acquire. */
DLOCK_EXPORT const char *dlock_lock_name(const dlock_lock *lock);

/* The owner id this lock is held under on the servers:
 * "<client id>:<thread id>:<hold number>" (reentrant acquisitions share
 * it; that of the attempt that got the lock). */
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

/* ====================================================================
 * 4. Semaphores and read-write locks
 * ==================================================================== */

/*
 * Semaphores and read-write locks
 * -------------------------------
 * A semaphore permit and a read-write lock's reader are held through a
 * dlock_lock handle, as a lock is: dlock_lock_release(), _extend(),
 * _detach(), _token(), _validity_ms(), _status(), _name(), _owner(),
 * dlock_lock_adopt() and the watchdog (dlock_acquire_options.watchdog and
 * on_lost) work on them as on a lock. Neither is reentrant: every acquire
 * is a hold of its own, with its own owner id, lease and fencing token.
 * Every lease is counted by the server's clock: a holder that dies frees
 * its permit (or read lease) when its lease runs out, and the next
 * acquire reaps it.
 *
 * A name is one kind at a time: a lock (its readers and writers are the
 * read-write lock), or a semaphore. Using a name as the other kind is
 * refused with DLOCK_EINVAL ("... is a semaphore", "... is a lock") for
 * as long as the servers remember the name (7 days after its last use).
 * A name whose key holds a value dlock did not write (another tool's) is
 * refused with DLOCK_EINVAL too ("... not dlock's", naming its Redis
 * type), and the value is left as it is.
 */

/* The largest semaphore limit. */
#define DLOCK_SEM_LIMIT_MAX 1000000

/*
 * Acquire a permit of the counting semaphore NAME: at most LIMIT holders
 * (1 to DLOCK_SEM_LIMIT_MAX) hold one at once. The limit is stored with
 * the semaphore by its first acquire; an acquire with another limit is
 * refused (DLOCK_EINVAL, the message names the stored one): change it
 * with dlock_sem_set_limit(). opts as for dlock_lock_acquire_ex (NULL:
 * try once, 30 s lease, no watchdog). The permit's fencing token is
 * strictly greater than every earlier permit's of NAME: than that of
 * every permit granted before this call's last request to the server was
 * sent (a permit handed to a waiter that could not take it in time is
 * confirmed by that request, with a new token).
 * Waiting wakes no herd: a freed permit wakes one waiter. With the
 * client's DLOCK_WAIT_NOTIFY the woken waiter tries again (a newcomer may
 * take the permit first); with DLOCK_WAIT_FAIR waiters are served in FIFO
 * order, the freed permit handed to the oldest live one (as the fair lock
 * does); DLOCK_WAIT_SPIN polls.
 * Returns DLOCK_OK with *out set, or DLOCK_BUSY (wait_ms == 0 and no
 * permit free), DLOCK_LOCK_DELAY (wait_ms == 0 and the master changed
 * within the lock-delay, as for a lock; a waiting acquire waits it out),
 * DLOCK_NOT_REPLICATED (wait_replicas: the permit, also one handed over,
 * reached too few replicas; it is given back), DLOCK_TIMEDOUT,
 * DLOCK_CANCELED, DLOCK_EINVAL (bad limit,
 * another limit stored, NAME used as a lock, or a client with several
 * servers: a semaphore over Redlock's majorities could admit more than
 * LIMIT holders, see docs/design.md), or an error class.
 */
DLOCK_EXPORT int dlock_sem_acquire(dlock_lock **out, dlock_client *client,
                                   const char *name, int64_t limit,
                                   const dlock_acquire_options *opts);

/*
 * Set the limit of semaphore NAME to LIMIT (1 to DLOCK_SEM_LIMIT_MAX),
 * creating it if NAME is unused. A raised limit passes the new permits
 * to waiters at once; holders above a lowered limit keep their permits,
 * and new ones are granted only below it. Acquires waiting meanwhile
 * (with the old limit) wait on under the new one: the next free permit
 * is theirs in turn; only a new acquire with another limit is refused. The previous limit is stored in
 * *old_limit when not NULL (0: there was none). Returns DLOCK_OK,
 * DLOCK_EINVAL (bad limit, NAME used as a lock, several servers) or an
 * error class.
 */
DLOCK_EXPORT int dlock_sem_set_limit(dlock_client *client, const char *name,
                                     int64_t limit, int64_t *old_limit);

/* Flags of dlock_rw_acquire_shared(). */
#define DLOCK_RW_PREFER_READERS 0x1 /* enter while a writer waits */

/*
 * Acquire the read-write lock NAME shared (as a reader). Readers hold it
 * together; a writer is whoever holds NAME with dlock_lock_acquire(),
 * which waits for the readers to leave. Writer preference by default: a
 * waiting writer keeps new readers out until it has had the lock or
 * given up (a writer that died while waiting keeps them out at most the
 * readers' longest lease + 1 s); DLOCK_RW_PREFER_READERS lets this reader in
 * regardless (writers may then starve). A thread that reads NAME already
 * always gets in (waiting for the writer would deadlock it). Every reader
 * gets a fencing token from the same sequence as the writers', so a
 * resource can order them. opts as for dlock_lock_acquire_ex. Readers
 * have no queue: with the client's DLOCK_WAIT_FAIR (the default) they
 * wait by notification, and a last reader leaving wakes the first
 * writer queued in fair mode. Works
 * with Redlock (a reader's majority and a writer's majority share a node
 * that refuses one of them).
 * Returns as dlock_lock_acquire_ex() (with wait_replicas also
 * DLOCK_NOT_REPLICATED: the read lease reached too few replicas and is
 * given back), and DLOCK_EINVAL also when NAME is
 * a semaphore, or this thread holds NAME exclusively (use
 * dlock_rw_downgrade()). Upgrading is refused: dlock_lock_acquire() of a
 * NAME this thread reads returns DLOCK_EINVAL (two readers upgrading wait
 * for each other forever); release the read lock first.
 */
DLOCK_EXPORT int dlock_rw_acquire_shared(dlock_lock **out, dlock_client *client,
                                         const char *name, unsigned flags,
                                         const dlock_acquire_options *opts);

/*
 * Downgrade an exclusive hold of NAME to a shared one in one step: no
 * writer can get in between, readers waiting get in at once. LOCK is
 * freed whatever the outcome; on DLOCK_OK *out is the reader's handle,
 * with the same owner id, token, lease and watchdog. Returns DLOCK_OK,
 * DLOCK_EINVAL (LOCK is not an exclusive hold, or was re-entered: the
 * other levels would lose their lock), DLOCK_NOT_OWNER (the lease had run
 * out; nothing is held), DLOCK_LOST, DLOCK_NOT_REPLICATED (wait_replicas:
 * the read lease reached too few replicas) or an error class (then both
 * the write and the read hold are given back: nothing is held).
 */
DLOCK_EXPORT int dlock_rw_downgrade(dlock_lock **out, dlock_lock *lock);

/* Kinds of a name, for dlock_shared_inspect(). */
#define DLOCK_KIND_NONE 0      /* the servers know nothing of it */
#define DLOCK_KIND_LOCK 1      /* a lock (and read-write lock) */
#define DLOCK_KIND_SEMAPHORE 2 /* a semaphore */

/* A holder of a permit or a read lease. */
typedef struct dlock_holder {
    char owner[DLOCK_OWNER_MAX]; /* its owner id */
    int64_t ttl_ms;              /* its lease left */
    uint64_t token;              /* its fencing token */
} dlock_holder;

/* What the server says about a semaphore or a lock's readers. */
typedef struct dlock_shared_info {
    int kind;                  /* DLOCK_KIND_* */
    int64_t limit;             /* the semaphore's limit (0: a lock) */
    int64_t holders;           /* live permits, or readers of a lock */
    size_t listed;             /* holders written to the caller's array */
    int64_t waiters;           /* semaphore: queued waiters (all but spin
                                  waiters); -1 for a lock: not counted */
    int64_t writer_waiting_ms; /* a waiting writer keeps new readers out
                                  for this long yet; 0: none */
    uint64_t last_token;       /* the last fencing token granted */
} dlock_shared_info;

/* Fill *out for NAME, and up to nholders entries of holders (may be NULL
 * when nholders is 0), earliest lease end first. One server only: with
 * several it asks the first. Returns DLOCK_OK, DLOCK_EINVAL or an error
 * class. */
DLOCK_EXPORT int dlock_shared_inspect(dlock_client *client, const char *name,
                                      dlock_shared_info *out,
                                      dlock_holder *holders, size_t nholders);

/* ====================================================================
 * 5. Fencing tokens and fenced values
 * ==================================================================== */

/*
 * Fenced write: store VALUE under the Redis key KEY (un-prefixed, as the
 * caller names it) only if TOKEN is >= the highest token any fenced write
 * (or dlock_fenced_read) of KEY has carried, and record TOKEN. What KEY
 * holds follows the client's layout (dlock_client_set_layout): with the
 * hash layout (the default) a hash with fields "value" and "fence"; with
 * the string layout one string, the fence in decimal, a space, then the
 * value's bytes ("<fence> <value>"; "<fence>" alone: a fence and no
 * value, left by dlock_fenced_read), written with one SET and read with
 * one GET. Clients of one KEY must use one layout: a string-layout call
 * on a key holding anything else (the hash layout's hash, a string not
 * of that form) returns DLOCK_EINVAL with a message and changes nothing;
 * a hash-layout call on a string gets the server's WRONGTYPE (an error
 * class). Returns DLOCK_OK, DLOCK_STALE (older token: nothing changed),
 * DLOCK_EINVAL or an error class. With several servers the write goes to
 * the first one: the fenced value does not get Redlock's tolerance of
 * failed servers.
 */
DLOCK_EXPORT int dlock_fenced_set(dlock_client *client, const char *key,
                                  uint64_t token, const void *value,
                                  size_t len);

/* Read a fenced value: *value (malloc'd, NUL-terminated, free() it) and
 * *len, and the highest token seen in *fence (0 if never written).
 * *value is NULL when KEY has no value. One plain command (HMGET; GET
 * with the string layout), no script. Returns DLOCK_OK, DLOCK_EINVAL
 * (also: KEY is not a fenced value of the string layout's form, with
 * that layout), DLOCK_EPROTO or an error class (KEY is not a hash, with
 * the hash layout: the server's WRONGTYPE). */
DLOCK_EXPORT int dlock_fenced_get(dlock_client *client, const char *key,
                                  char **value, size_t *len, uint64_t *fence);

/*
 * Fenced read: the read of a read-modify-write under a lock. Read the
 * fenced value KEY (as dlock_fenced_get) and, in the same step, make
 * TOKEN (the lock's, 1 to 2^53) the highest token KEY has seen, so that
 * from then on dlock_fenced_set refuses every older token. Without it a
 * holder paused past its lease can still write between a newer holder's
 * read and that holder's write (nothing newer has been written yet), and
 * the newer holder's write then loses that update; with it the paused
 * holder's write is refused (DLOCK_STALE). Read and write with the same
 * token. *value (malloc'd, NUL-terminated, free() it) and *len: the
 * value, *value NULL when KEY has none; *fence: the highest token seen
 * (TOKEN when read). With the string layout raising the fence rewrites
 * KEY's string (its TTL kept). Returns DLOCK_OK; DLOCK_STALE (TOKEN is older than
 * *fence: a newer holder has read or written; nothing read, nothing
 * changed); DLOCK_NOT_REPLICATED (with wait_replicas: read and raised on
 * the master, *value filled, but fewer replicas acknowledged it); or
 * DLOCK_EINVAL or an error class (*value NULL). Like the other fenced
 * calls it goes to the first server only.
 */
DLOCK_EXPORT int dlock_fenced_read(dlock_client *client, const char *key,
                                   uint64_t token, char **value, size_t *len,
                                   uint64_t *fence);

/*
 * Store VALUE under KEY (a fenced value, as dlock_fenced_set) with the
 * lock's token, then release the lock, in ONE script on the server
 * (atomic): the de-duplication pattern "store the result and give the
 * lock back", where waiters woken by the release find the result at
 * once. The value is written only while L is still this owner's on the
 * server, with its token (issued now if it was not: the string layout's
 * lazy token), and only if that token is not older than KEY's fence. L
 * must be an exclusive lock held once (not re-entered) on a client over
 * one server (a plain URL or a Sentinel group; KEY on that server) with
 * the string layout (DLOCK_LAYOUT_STRING); else DLOCK_EINVAL and nothing
 * is done (L still held: use dlock_fenced_set, then dlock_lock_release).
 * Otherwise L is freed, as by dlock_lock_release, and the result is
 * DLOCK_OK (stored, released), DLOCK_STALE (KEY's fence is newer: not
 * stored, released), DLOCK_EINVAL after the call began (KEY holds no
 * fenced value of the string layout's form, e.g. a hash-layout client's
 * hash: not stored, released), DLOCK_NOT_OWNER or DLOCK_LOST (the lease was lost:
 * nothing stored), DLOCK_NOT_REPLICATED (wait_replicas: done, too few
 * replicas acknowledged) or an error class (not known whether stored;
 * a release is sent to give the lock back). The event loop's twin is
 * dlock_loop_fenced_set_release (dlock_loop.h).
 */
DLOCK_EXPORT int dlock_lock_fenced_set_release(dlock_lock *lock,
                                               const char *key,
                                               const void *value, size_t len);

/*
 * Check a caller's fencing token against the lock NAME now, for a resource
 * outside Redis that must verify who may act (Chubby's CheckSequencer,
 * etcd's IsOwner). Returns DLOCK_OK when NAME is held and TOKEN is the
 * token of its current hold, or of one of its live readers or semaphore
 * permits (each has its own; with Redlock: on a majority of the servers);
 * DLOCK_STALE when a later token has been granted since (TOKEN's hold is
 * over); DLOCK_NOT_OWNER when the lock is free or TOKEN is not one the
 * servers granted (a newer token than theirs); DLOCK_EINVAL (token 0, bad
 * name), DLOCK_NO_QUORUM or an error class. A check is a snapshot: the
 * hold can end right after it; a resource that needs more writes with the
 * token (dlock_fenced_set, or its own "fence <= token" condition).
 */
DLOCK_EXPORT int dlock_lock_check(dlock_client *client, const char *name,
                                  uint64_t token);

/* ====================================================================
 * 6. Leader election
 * ==================================================================== */

/*
 * Leader election
 * ---------------
 * An election is a lock NAME whose holder is the leader: campaigning is
 * acquiring it (with the watchdog), the epoch is its fencing token
 * (strictly greater than every earlier leader's), and losing the lease is
 * losing the leadership (on_lost, dlock_election_status() DLOCK_LOST). The
 * leader also writes its VALUE (such as "host:port") and the server's
 * time when it won into the hash "<prefix>:{NAME}:l", and announces every
 * change on the lock's channel, so that anyone can ask who leads
 * (dlock_leader) and wait for a change (dlock_leader_wait). The hash is
 * believed only while its writer still holds the lock: a leader that died
 * is no leader any more the moment its lease runs out.
 */
typedef struct dlock_election dlock_election;

/* The longest leader value in bytes (without the NUL). */
#define DLOCK_VALUE_MAX 1024

/*
 * Campaign for NAME: block until this thread leads (opts->wait_ms: 0 try
 * once, > 0 at most that long, < 0 forever; NULL: wait forever with a 30 s
 * lease), then proclaim VALUE (NULL: "", at most DLOCK_VALUE_MAX bytes).
 * The watchdog always renews the leadership; opts->on_lost is called when
 * it is lost. Returns DLOCK_OK with *out set, or as dlock_lock_acquire
 * (DLOCK_BUSY, DLOCK_TIMEDOUT, DLOCK_CANCELED...); when the proclaim
 * fails after the win, the lock is released again and its status
 * returned. The handle is used by the thread that campaigned; a thread
 * that leads NAME already re-enters the lock (one campaign per thread and
 * name is what makes sense).
 */
DLOCK_EXPORT int dlock_campaign(dlock_election **out, dlock_client *client,
                                const char *name, const char *value,
                                const dlock_acquire_options *opts);

/* While leading, change the value the leader shows (its epoch and since
 * stay). DLOCK_OK, DLOCK_NOT_OWNER when the leadership was lost (with
 * Redlock: fewer than a majority still had it), DLOCK_EINVAL, or an
 * error class. */
DLOCK_EXPORT int dlock_election_proclaim(dlock_election *e, const char *value);

/* Give the leadership up and free the handle, whatever the outcome.
 * Returns as dlock_lock_release() (DLOCK_LOST when it had already been
 * lost). Accepts NULL (DLOCK_EINVAL). */
DLOCK_EXPORT int dlock_election_resign(dlock_election *e);

/* DLOCK_OK while leading, DLOCK_LOST / DLOCK_NOT_OWNER as
 * dlock_lock_status(). */
DLOCK_EXPORT int dlock_election_status(const dlock_election *e);

/* The leadership's epoch: its fencing token. */
DLOCK_EXPORT uint64_t dlock_election_epoch(const dlock_election *e);

/* The lock under the leadership (validity, owner, name); it belongs to
 * the election: do not release or detach it. */
DLOCK_EXPORT dlock_lock *dlock_election_lock(const dlock_election *e);

/* Who leads NAME, as the servers tell. */
typedef struct dlock_leader_info {
    int leading; /* 1 when someone leads now */
    /* 1 when the leader has written its value (0: it has just won, or
     * NAME is held by a plain lock rather than a campaign) */
    int proclaimed;
    char owner[DLOCK_OWNER_MAX];     /* the leader's owner id, "" if none */
    uint64_t epoch;                  /* its fencing token, 0 when none */
    char value[DLOCK_VALUE_MAX + 1]; /* its value, NUL-terminated */
    /* when it won, Unix ms by the server's clock; 0 when unknown */
    int64_t since_ms;
    int64_t ttl_ms; /* its lease left, -1 when none */
} dlock_leader_info;

/* Fill *out with NAME's leader now. With Redlock a leader is one that a
 * majority of the servers agree on. Returns DLOCK_OK (out->leading says
 * whether anyone leads), DLOCK_EINVAL, DLOCK_NO_QUORUM or an error
 * class. */
DLOCK_EXPORT int dlock_leader(dlock_client *client, const char *name,
                              dlock_leader_info *out);

/*
 * Observe: wait until NAME's leader differs from *known (another owner or
 * epoch, another value, or leading changed) and fill *out with the new
 * one. known may be NULL: *out is then filled at once. wait_ms: < 0
 * forever, else at most that long. Sleeps on the lock's pub/sub channel
 * (a release, a win and a proclaim are announced) and looks again at the
 * latest when the leader's lease would run out (a leader that died
 * announces nothing) and at least every second. Changes quicker than a
 * round trip can be seen as one (the epochs then jump by more than one).
 * Returns DLOCK_OK (changed), DLOCK_TIMEDOUT (no change: *out is the
 * current leader), DLOCK_CANCELED (dlock_client_cancel), or an error.
 */
DLOCK_EXPORT int dlock_leader_wait(dlock_client *client, const char *name,
                                   const dlock_leader_info *known,
                                   int64_t wait_ms, dlock_leader_info *out);

/* ====================================================================
 * 7. Several locks at once
 * ==================================================================== */

/*
 * Several locks at once
 * ---------------------
 * All or nothing, and free of deadlock whatever order callers give the
 * names in: the locks are taken one after the other in one global order
 * (the names sorted bytewise, shorter first on a common prefix), each
 * with the time left of opts->wait_ms, and when one cannot be had, those
 * already taken are released again (in reverse order) before the call
 * returns. Two callers that both use this call can therefore never each
 * hold a lock the other waits for. (A thread that already holds one of
 * the names from elsewhere re-enters it; mixing such holds with this call
 * can deadlock as with any locks.)
 */

/* The most names one dlock_lock_acquire_all() takes. */
#define DLOCK_MULTI_MAX 64

/*
 * Acquire the N locks NAMES[0..n-1] (1 to DLOCK_MULTI_MAX distinct names,
 * each as for dlock_lock_acquire) with the options opts (may be NULL: try
 * once, 30 s lease). opts->wait_ms bounds the whole call. On DLOCK_OK,
 * out[i] is the handle of NAMES[i], each with its own fencing token,
 * renewal (opts->watchdog) and lost callback (opts->on_lost is called
 * with the handle of the lock that was lost): release them with
 * dlock_lock_release_all() or one by one. On failure every out[i] is
 * NULL, no lock of the call is left held (a rollback release that cannot
 * reach a server leaves that lock to its lease), and the status is the
 * failing acquire's (DLOCK_BUSY, DLOCK_TIMEDOUT...) with the name in
 * dlock_errmsg(). A repeated name is DLOCK_EINVAL. Without the watchdog,
 * the leases of the first locks run while the call waits for the later
 * ones: once all are taken the call checks each, and if one has run out
 * (or was lost: the process paused) it gives all back and takes them
 * again while the wait allows, else returns DLOCK_TIMEDOUT. So on
 * DLOCK_OK every lock is valid.
 */
DLOCK_EXPORT int dlock_lock_acquire_all(dlock_lock **out, dlock_client *client,
                                        const char *const *names, size_t n,
                                        const dlock_acquire_options *opts);

/* Release the N handles LOCKS[0..n-1] (NULL entries are skipped) in the
 * reverse of the global order, free them and set every entry to NULL.
 * Returns DLOCK_OK when every release did, else the first failure in
 * LOCKS's order (DLOCK_NOT_OWNER, DLOCK_LOST, an error class). */
DLOCK_EXPORT int dlock_lock_release_all(dlock_lock **locks, size_t n);

/* ====================================================================
 * 8. The operator's view: inspect, adopt, check, topology, list
 * ==================================================================== */

/* What the servers say about a lock, for tools such as `dlock status`. */
typedef struct dlock_info {
    int held;                    /* 1 if some owner holds it */
    char owner[DLOCK_OWNER_MAX]; /* the owner id, "" when free */
    int64_t reentry;             /* the owner's reentry count */
    int64_t ttl_ms;              /* remaining lease, -1 when free */
    uint64_t last_token;         /* the last fencing token granted (0: never) */
    /* Waiters as far as Redis can tell: notify_waiters + fair_queue, or
     * -1 when notify_waiters is unknown. Spin-mode waiters are in no
     * Redis structure and are never counted. */
    int64_t waiters;
    int nodes_holding; /* Redlock: nodes on which it is held */

    /* Holder info, when the holder's client records it (holder_info in
     * dlock_options): has_holder = 1 and the fields below. Info left by
     * an earlier hold is never shown as the current holder's. */
    int has_holder;
    char holder_host[DLOCK_HOST_MAX];   /* host name */
    int64_t holder_pid;                 /* process id on that host */
    char holder_label[DLOCK_LABEL_MAX]; /* command line or label, or "" */
    char holder_version[32];            /* the holder's libdlock version */
    int64_t held_ms; /* since the hold began, by the server's clock;
                        -1 unknown */
    /* Appended fields. dlock_info has no version field: the library
     * fills the whole struct of its own header, so a program must be
     * built against the header of the library it runs with. */
    /* Processes waiting by notification (the default strategy): the
     * subscribers of the lock's release channel (PUBSUB NUMSUB; with
     * Redlock the most any server counts). One per process however many
     * of its threads wait; a process stays subscribed up to 2 s after
     * its last waiter got the lock or gave up, so it may count a process
     * that has just stopped waiting. -1 when no server could be asked
     * (PUBSUB refused by an ACL, no answer in time). */
    int64_t notify_waiters;
    /* Waiters queued in fair mode, one per waiting client (process)
     * however many of its threads wait (they take turns in-process, in
     * arrival order), -1 when unknown. */
    int64_t fair_queue;
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
 *  - a replica (ROLE): read-only, every acquire is refused (READONLY);
 *    writable (replica-read-only no), a lock taken there is not seen by
 *    the master's clients and vanishes at the next resync;
 *  - two servers found to be one (see servers in dlock_options);
 *  - a server that cannot be reached, or that refuses CONFIG GET or ROLE
 *    (ACL, renamed command): not checked, said so;
 *  - a user that may not use the lock's pub/sub channels (ACL NOPERM,
 *    Redis 7's default for new users): releases are not announced and
 *    waiters poll; the finding names the rule that allows them
 *    (&<prefix>:* or allchannels).
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

/* One lock found by dlock_list(). */
typedef struct dlock_list_entry {
    const char *kind; /* "lock" (later kinds: "semaphore", "rwlock") */
    const char *name; /* the lock's name */
    dlock_info info;  /* as dlock_lock_inspect() gives it */
} dlock_list_entry;

/* Called by dlock_list() for each lock found, on the calling thread; the
 * entry lives until it returns. Return 0 to go on, non-zero to stop. */
typedef int (*dlock_list_cb)(const dlock_list_entry *entry, void *userdata);

/*
 * List every held lock whose name matches PATTERN (a Redis glob: * ? [..]
 * and \ escapes; NULL means "*"), sorted by name within each kind, with
 * what dlock_lock_inspect() says of it (holder, TTL, token, fair-mode
 * waiters, holder info). Keys are found with SCAN on every server of the
 * client (a lock of a Redlock is listed once), so it does not block
 * Redis, but a lock taken or released during the scan may or may not be
 * listed. Each lock found costs one inspect round trip. Returns how many
 * were passed to cb, or DLOCK_EINVAL, DLOCK_NO_QUORUM (Redlock: fewer than
 * a majority could be scanned or inspected) or an error class.
 */
DLOCK_EXPORT int dlock_list(dlock_client *client, const char *pattern,
                            dlock_list_cb cb, void *userdata);

/* ====================================================================
 * 9. Metrics and events
 * ==================================================================== */

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

/*
 * Metrics: latency histograms beside the counters of dlock_client_stats(),
 * for export to Prometheus or OpenTelemetry (`dlock run --metrics-file`
 * writes them in Prometheus's text format).
 *
 * Buckets are fixed and log-scale: 1, 2.5 and 5 per decade from 100 us to
 * 5000 s (dlock_histogram_bound_us), then one for everything above.
 * bucket[i] counts values v with bound(i-1) < v <= bound(i) (not
 * cumulative; Prometheus's le buckets are the running sums).
 */
#define DLOCK_HIST_BUCKETS 25

typedef struct dlock_histogram {
    uint64_t count;  /* values recorded: the sum of bucket[] */
    uint64_t sum_us; /* their sum, microseconds */
    uint64_t bucket[DLOCK_HIST_BUCKETS];
} dlock_histogram;

/* The upper bound of bucket i in microseconds, or -1 for the last bucket
 * (no bound: +Inf) and for i out of range. */
DLOCK_EXPORT int64_t dlock_histogram_bound_us(int i);

typedef struct dlock_metrics {
    dlock_stats stats; /* as dlock_client_stats() */
    /* Successful acquires: time in the acquire call, waiting included. */
    dlock_histogram acquire_wait;
    /* Holds released (last level): from the acquisition to the release. */
    dlock_histogram hold;
    /* Renewal calls (watchdog rounds, dlock_lock_extend): round trip. */
    dlock_histogram renewal;
} dlock_metrics;

/* A snapshot of the client's counters and histograms. Lock-free: values
 * recorded meanwhile may be in one histogram's buckets and not yet in its
 * sum. Accepts NULL client (all zero). */
DLOCK_EXPORT void dlock_client_metrics(const dlock_client *client,
                                       dlock_metrics *out);

/*
 * Events: with on_event set in dlock_options, the client calls it for
 * each of these, on the thread where it happens, with no library lock
 * held. Keep it short; it may call dlock_client_metrics() and
 * dlock_client_stats(), and must not release or acquire locks of this
 * client.
 */
typedef enum dlock_event_type {
    /* An acquire succeeded (the acquiring thread). duration: time in the
     * acquire call, waiting included. token: the lock's (0 for a hold
     * of the string layout whose token is not issued yet: see
     * dlock_lock_token). */
    DLOCK_EVENT_ACQUIRED = 1,
    /* An acquire that was not to wait found the lock held (the acquiring
     * thread). duration: time in the call. */
    DLOCK_EVENT_BUSY = 2,
    /* An acquire waited and gave up: status DLOCK_TIMEDOUT or
     * DLOCK_CANCELED (the acquiring thread). duration: time waited. */
    DLOCK_EVENT_WAITED = 3,
    /* A lease was renewed: by the watchdog (its thread) or
     * dlock_lock_extend (the caller's). duration: the round trip. */
    DLOCK_EVENT_RENEWED = 4,
    /* A lease was found lost (the watchdog thread, before the lost
     * callback). duration: how long it had been held. */
    DLOCK_EVENT_LOST = 5,
    /* A hold was released, last level (the releasing thread). status:
     * the release's result. duration: how long it was held. */
    DLOCK_EVENT_RELEASED = 6
} dlock_event_type;

typedef struct dlock_event {
    dlock_event_type type;
    const char *name;    /* the lock's name; valid during the call */
    int status;          /* DLOCK_OK or the outcome named above */
    int64_t duration_us; /* see the type */
    uint64_t token;      /* the fencing token, 0 when none */
} dlock_event;

/* The callback's type (dlock_options.on_event). */
typedef void (*dlock_event_cb)(const dlock_event *ev, void *userdata);

/* "acquired", "busy", "waited", "renewed", "lost", "released", or
 * "unknown". */
DLOCK_EXPORT const char *dlock_event_name(int type);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
