/*
 * dlock_loop.h - libdlock's event-loop API (issue 30): locks without a
 * thread per waiter, driven from the application's own event loop.
 *
 * The model (hiredis async, c-ares, curl multi): one dlock_loop per event
 * loop, made from a dlock_client (a client may have several loops). The
 * application watches ONE descriptor, dlock_loop_fd() (readable when the
 * loop has work), arms a timer for dlock_loop_timeout_ms(), and calls
 * dlock_loop_process() when either fires. process never blocks: it does
 * what the sockets and the clock allow, and runs the completion callbacks
 * of the operations that finished, on the calling thread.
 *
 * Every operation call (dlock_loop_lock, dlock_loop_release, ...) returns
 * at once. Its callback runs exactly once, from dlock_loop_process() (or
 * from dlock_op_cancel() / dlock_loop_free(), with DLOCK_CANCELED), never
 * from inside the call that started it. The dlock_op is freed when its
 * callback returns.
 *
 * Owner per hold, never per thread: every acquire through a loop is a new
 * owner on the servers; a second acquire of a name the loop already holds
 * is refused at once (DLOCK_BUSY), never re-entered. A hold (dlock_hold)
 * belongs to its loop: the loop renews its lease on its timer inside
 * process, batched (one extend call per round for every hold due), and a
 * lease found lost is reported through the hold's on_lost callback from
 * process (never silently): the key is gone or has another owner, or the
 * loop did not run process until the lease was over (a stalled loop).
 *
 * Connections: per loop, one pipelined command connection to the server
 * (many calls in flight, replies matched in order), plus one subscriber
 * connection while something waits (release notifications and fair
 * handoffs arrive there, so wake-ups come in on the loop's fd).
 *
 * Thread rules: a loop, its operations and its holds are used from one
 * thread at a time (the thread that runs its event loop; moving a loop to
 * another thread needs the application's own hand-over). Several loops of
 * one client may run on different threads. dlock_loop_fd,
 * dlock_loop_timeout_ms and dlock_loop_process follow the same rule.
 *
 * What is implemented (the rest is declared later, when it is):
 *  - one server (redis://, rediss://, unix://): everything below;
 *  - several servers (Redlock), Sentinel, Cluster: locks and readers
 *    (and permits but over Redlock, refused as by dlock_sem_acquire):
 *    try, wait, release, extend, cancel (what the attempt may hold is
 *    given back, by the client's watchdog thread; a waiter's queue place
 *    and writer's mark on every node, at once), renewal and loss,
 *    several locks at once, holder info. A wait there is the blocking
 *    API's (the same policy): woken by release notifications, or in the
 *    fair FIFO queue with its handoffs (Redlock: the 'w ID OWNER'
 *    majority wake), riding out outages and failovers. Its
 *    subscriptions are the client's notifier's (one subscriber
 *    connection per server and client, on the notifier thread); each
 *    waiter's wake-up is an eventfd in the loop's epoll set. Fenced set
 *    / get / read go to the name's master (Redlock: the first server,
 *    as dlock_fenced_set); election works on all three (over Redlock
 *    with dlock_leader's majority rules).
 *    Opening connections does not block the loop's thread there (but
 *    the lookup of a host name that is not an IP address, bounded by
 *    the connect timeout): on
 *    Sentinel locating the master (the sentinels' answers, the
 *    master's check) and on Cluster refreshing the slot map are steps
 *    the loop drives too, with the same deadlines as the blocking API;
 *  - exclusive locks: try, and wait with DLOCK_WAIT_NOTIFY, DLOCK_WAIT_FAIR
 *    and DLOCK_WAIT_SPIN; release, extend, cancel; renewal and loss;
 *  - semaphore permits (dlock_loop_sem_acquire);
 *  - read-write locks: readers (dlock_loop_read_acquire, _ex with reader
 *    preference), a writer is a lock (a waiting writer keeps new readers
 *    out), downgrade (dlock_loop_downgrade);
 *  - election: campaign, proclaim, who leads (dlock_loop_leader), the
 *    wait for a change (dlock_loop_leader_wait), resign (release);
 *  - several locks at once (dlock_loop_lock_all);
 *  - fenced set / get / read (dlock_loop_fenced_read);
 *  - adapters: dlock_loop_uv.h (libuv), dlock_loop_event.h (libevent);
 *  - the client's holder_info (one server): a lock taken through the
 *    loop records its holder (holder_set.lua after the grant) and its
 *    renewals renew that record (holder_extend.lua);
 *  - the dlock tool's run, acquire and elect wait through a loop (one
 *    server), and leader --watch;
 *  - the client's options on one server as the blocking API honours
 *    them: wait_replicas (WAIT after each lock write: a grant, an
 *    extend, a renewal round, a downgrade, a fenced set or read; too few
 *    replicas: DLOCK_NOT_REPLICATED, a grant given back, a wait riding
 *    it out as an outage), lock_delay_ms (after the server's
 *    identity changed no grant for the delay: DLOCK_LOCK_DELAY for a
 *    try, a wait sleeps it out or ends DLOCK_TIMEDOUT at its deadline),
 *    on_event and the metrics
 *    (dlock_client_metrics counts a loop's acquires, busy answers, waits,
 *    renewals, losses and releases; on_event runs on the loop's thread);
 *  - the client's watchdog thread as the renewer of a loop's holds
 *    (dlock_loop_set_watchdog), on every topology;
 *  - downgrade on several servers (a majority downgraded, as
 *    dlock_rw_downgrade), Sentinel and Cluster (the name's master). There
 *    an extend and a downgrade of one hold may not be out together (they
 *    go on different connections): the second is refused (DLOCK_EINVAL).
 */
#ifndef DLOCK_LOOP_H
#define DLOCK_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlock_loop dlock_loop;
typedef struct dlock_op dlock_op;
typedef struct dlock_hold dlock_hold;

/*
 * An operation's completion: status DLOCK_OK or why not (the codes of
 * dlock.h: DLOCK_BUSY, DLOCK_TIMEDOUT, DLOCK_CANCELED, DLOCK_NOT_OWNER,
 * an error class); dlock_op_errmsg(op) says more (valid until the
 * callback returns). hold: an acquire's new hold on success (the
 * application's until it releases it through the loop), the hold acted
 * on for release and extend (after a release's callback it is freed,
 * whatever the status), else NULL. The callback may start new operations
 * and cancel others; it must not free the loop.
 */
typedef void (*dlock_op_cb)(dlock_op *op, int status, dlock_hold *hold,
                            void *userdata);

/* A hold's lease was found lost (status DLOCK_NOT_OWNER: the servers say
 * it is no longer ours; DLOCK_LOST: renewals failed, or the loop did not
 * run, until the lease was over). Called from dlock_loop_process. The
 * hold stays valid: release it (the release completes with
 * DLOCK_LOST) to free it. */
typedef void (*dlock_hold_lost_cb)(dlock_hold *hold, int status,
                                   void *userdata);

/*
 * Make a loop over client's servers. Opens nothing yet (connections are
 * opened when the first operation needs them, without blocking).
 * Returns DLOCK_OK (*out set), DLOCK_EINVAL (a NULL argument; the
 * message is in
 * dlock_errmsg(client)), DLOCK_EIO (epoll or eventfd failed) or
 * DLOCK_ENOMEM. The client must outlive the loop.
 */
DLOCK_EXPORT int dlock_loop_new(dlock_loop **out, dlock_client *client);

/* Free the loop: operations still running complete with DLOCK_CANCELED
 * (their callbacks run here; a waiter leaves its fair queue place with a
 * request sent without waiting for the answer), connections are closed.
 * Holds still held are NOT released: renewal stops and their leases run
 * out; their memory is freed. Accepts NULL. */
DLOCK_EXPORT void dlock_loop_free(dlock_loop *loop);

/*
 * Renew the holds this loop grants from now on (those with renew = 1)
 * from the client's watchdog thread instead of the loop's clock: for a
 * loop that may stall past a lease (a callback that blocks, a process
 * call that comes late). Each such hold is also a record of the client's
 * watchdog (as dlock_lock_adopt makes one: same owner and token, never
 * re-entered), renewed at a third of its lease on the watchdog's thread
 * with the lease it was granted (dlock_loop_extend changes the servers'
 * lease once, not the watchdog's); dlock_hold_status and
 * dlock_hold_validity_ms read what the watchdog found; a loss is still
 * reported through on_lost from process (at the latest a third of a
 * lease after the watchdog found it). Release and downgrade go through
 * the loop as before (the watchdog stops first: a downgraded reader is
 * renewed by the loop). on 0: holds granted later are the loop's again.
 * DLOCK_OK, or DLOCK_EINVAL (a NULL loop; several servers, Sentinel or
 * Cluster: not yet).
 */
DLOCK_EXPORT int dlock_loop_set_watchdog(dlock_loop *loop, int on);

/* The descriptor to watch for readability (an epoll fd over the loop's
 * connections and its wake-up eventfd). Stable for the loop's life. */
DLOCK_EXPORT int dlock_loop_fd(const dlock_loop *loop);

/* Milliseconds until dlock_loop_process must be called even if the fd
 * is not readable: 0 now, -1 no timer (nothing to renew, time or wait). */
DLOCK_EXPORT int64_t dlock_loop_timeout_ms(const dlock_loop *loop);

/*
 * Do what is ready: read and write the connections, run what the clock
 * asks (waits' deadlines, fair queue refreshes, renewals, command
 * timeouts), and run the callbacks of the operations that completed.
 * Never blocks. Returns DLOCK_OK, or DLOCK_EINVAL for a NULL loop. Call
 * it again when dlock_loop_fd is readable or dlock_loop_timeout_ms has
 * passed; calling it when nothing is ready is harmless.
 */
DLOCK_EXPORT int dlock_loop_process(dlock_loop *loop);

/* 2 added lazy_token; a struct of version 1 (without it) is accepted. */
#define DLOCK_LOOP_ACQUIRE_VERSION 2

/* How an acquire through a loop behaves. dlock_loop_acquire_init fills
 * the defaults. */
typedef struct dlock_loop_acquire {
    unsigned version; /* DLOCK_LOOP_ACQUIRE_VERSION */
    /* 0: try once; > 0: wait at most this long; < 0: wait until it is
     * had or cancelled. Default 0. */
    int64_t wait_ms;
    /* The lease, > 0; default 30000. */
    int64_t lease_ms;
    /* 1 (default): the loop renews the lease (at a third of it) until the
     * hold is released; 0: the lease runs out unless extended. */
    int renew;
    /* How to wait; default the client's wait_strategy. */
    dlock_wait_strategy strategy;
    /* Told when a renewed lease is found lost (from process). */
    dlock_hold_lost_cb on_lost;
    void *on_lost_userdata;
    /* 1: the hold's fencing token may be issued after the grant (since
     * version 2; default 0). With the string layout
     * (DLOCK_LAYOUT_STRING) on a loop over one server without fence
     * retention, a lock's first try is then a plain SET NX PX (no script
     * on the server; a name found taken is tried again with the script),
     * and the hold's token is 0 ("not issued yet": dlock_hold_token
     * returns 0) until dlock_loop_fenced_set_release or dlock_loop_token
     * issues it. Use it when the token is needed only there (a gateway's
     * store-and-release), or rarely (ask dlock_loop_token first). Ignored
     * elsewhere (the token is issued with the grant). */
    int lazy_token;
} dlock_loop_acquire;

DLOCK_EXPORT void dlock_loop_acquire_init(dlock_loop_acquire *opts,
                                          const dlock_client *client);

/*
 * Start acquiring the exclusive lock NAME (rules of dlock_lock_acquire).
 * opts may be NULL (defaults). Returns DLOCK_OK: the operation runs and
 * cb(op, status, hold, userdata) will be called once; *out (when out is
 * not NULL) is the operation, valid until its callback returns. Or, with
 * nothing started and cb never called: DLOCK_EINVAL (bad argument,
 * message in dlock_errmsg(client)), DLOCK_ENOMEM. Completion statuses:
 * DLOCK_OK (hold set), DLOCK_BUSY (a try found it held, or this loop
 * already holds or is acquiring NAME), DLOCK_TIMEDOUT, DLOCK_CANCELED,
 * DLOCK_NOT_REPLICATED (wait_replicas: the grant reached too few replicas
 * and was given back), DLOCK_LOCK_DELAY (lock_delay_ms: the server's
 * identity changed; a wait sleeps the delay out, DLOCK_TIMEDOUT if its
 * deadline comes first), or an error class (a
 * wait ends as the blocking acquire's, on every topology: at once on an
 * error that waiting will not cure; an outage, servers out of reach, late
 * or not ready, it rides out for the client's outage ride in a row at
 * most, dlock_client_set_outage_ride_ms, and ends with the outage's
 * status then or at its deadline). A failed acquire gives back what it may have taken (a request
 * whose answer was lost is followed by a release).
 */
DLOCK_EXPORT int dlock_loop_lock(dlock_op **out, dlock_loop *loop,
                                 const char *name,
                                 const dlock_loop_acquire *opts, dlock_op_cb cb,
                                 void *userdata);

/*
 * Start acquiring a permit of the counting semaphore NAME (at most LIMIT
 * holders; dlock_sem_acquire's rules). opts as for dlock_loop_lock; a
 * wait queues (DLOCK_WAIT_FAIR: freed permits are handed over in FIFO
 * order; DLOCK_WAIT_NOTIFY: a release wakes one waiter to try again;
 * DLOCK_WAIT_SPIN: no queue, it tries again with backoff). Unlike a
 * lock, one loop may hold several permits of one name: each is its own
 * owner. Completion statuses: those of dlock_loop_lock, and DLOCK_EINVAL
 * when the semaphore exists with another limit, the name is another kind
 * of lock or its key holds a value dlock did not write. Release and extend the permit with dlock_loop_release /
 * dlock_loop_extend; the loop renews it as a lock.
 */
DLOCK_EXPORT int dlock_loop_sem_acquire(dlock_op **out, dlock_loop *loop,
                                        const char *name, int64_t limit,
                                        const dlock_loop_acquire *opts,
                                        dlock_op_cb cb, void *userdata);

/*
 * Start acquiring NAME as a reader of a read-write lock (the rules of
 * dlock_rw_acquire_shared): readers share it, a writer is an exclusive
 * dlock_loop_lock of the same name. opts as for dlock_loop_lock; a
 * reader waits by notification (or spin), never in a queue. Unlike a
 * lock, one loop may hold several read holds of one name. Release and
 * extend it with dlock_loop_release / dlock_loop_extend; the loop renews
 * it. A writer waiting through the loop (dlock_loop_lock with a wait)
 * keeps new readers out while it waits, and takes that mark with it when
 * it gives up (dlock_loop_read_acquire_ex with DLOCK_RW_PREFER_READERS
 * enters anyway); a writer's hold becomes a reader's with
 * dlock_loop_downgrade.
 */
DLOCK_EXPORT int dlock_loop_read_acquire(dlock_op **out, dlock_loop *loop,
                                         const char *name,
                                         const dlock_loop_acquire *opts,
                                         dlock_op_cb cb, void *userdata);

/* dlock_loop_read_acquire with flags (dlock_rw_acquire_shared's): 0, or
 * DLOCK_RW_PREFER_READERS to enter while a writer waits (writers may then
 * starve). Another flag: DLOCK_EINVAL. */
DLOCK_EXPORT int dlock_loop_read_acquire_ex(dlock_op **out, dlock_loop *loop,
                                            const char *name, unsigned flags,
                                            const dlock_loop_acquire *opts,
                                            dlock_op_cb cb, void *userdata);

/*
 * Downgrade the loop's exclusive hold of a name (a dlock_loop_lock's) to
 * a read hold in one step (dlock_rw_downgrade's rules: no writer can get
 * in between, readers waiting are woken). The same hold goes on as the
 * reader: the same owner, token, lease and renewal (the loop renews it as
 * a reader from now on); the name leaves the loop's table (a reader is
 * not exclusive). The callback gets the hold and DLOCK_OK; DLOCK_NOT_OWNER
 * (the lease had run out: the hold is lost); DLOCK_NOT_REPLICATED
 * (wait_replicas: the read lease reached too few replicas) or an error
 * class: then both the write and the read hold are given back and the
 * hold is lost (release it). Returns as dlock_loop_lock; DLOCK_EINVAL
 * also for a hold that is not an exclusive lock. Not yet on several
 * servers, Sentinel or Cluster (DLOCK_EINVAL).
 */
DLOCK_EXPORT int dlock_loop_downgrade(dlock_op **out, dlock_loop *loop,
                                      dlock_hold *hold, dlock_op_cb cb,
                                      void *userdata);

/*
 * Leader election (dlock_campaign's model): campaign for NAME = acquire
 * the lock NAME (opts as for dlock_loop_lock: wait_ms < 0 to wait until
 * elected) and, once won, proclaim VALUE (NULL: ""; at most
 * DLOCK_VALUE_MAX bytes) in "<prefix>:{NAME}:l", announced on the lock's
 * channel. The callback gets DLOCK_OK and the hold (the leadership: its
 * epoch is dlock_hold_token, renewed by the loop, a loss reported by
 * on_lost) once proclaimed; a win that cannot proclaim gives the lock
 * back and completes with the failure. Resign: dlock_loop_release.
 */
DLOCK_EXPORT int dlock_loop_campaign(dlock_op **out, dlock_loop *loop,
                                     const char *name, const char *value,
                                     const dlock_loop_acquire *opts,
                                     dlock_op_cb cb, void *userdata);

/* The leader changes its value: DLOCK_OK, DLOCK_NOT_OWNER (no longer
 * the leader) or an error class. hold: a campaign's (or any lock's) hold
 * of this loop. */
DLOCK_EXPORT int dlock_loop_proclaim(dlock_op **out, dlock_loop *loop,
                                     dlock_hold *hold, const char *value,
                                     dlock_op_cb cb, void *userdata);

/* Who leads NAME now (dlock_leader's answer): in the callback, read it
 * with dlock_op_leader. */
DLOCK_EXPORT int dlock_loop_leader(dlock_op **out, dlock_loop *loop,
                                   const char *name, dlock_op_cb cb,
                                   void *userdata);

/* Wait until who leads NAME differs from *known (another leader or
 * epoch, a new value, nobody): the callback gets DLOCK_OK with the new
 * answer (dlock_op_leader), or DLOCK_TIMEDOUT after wait_ms (< 0: no
 * bound; 0: answer at once). Woken by the lock's channel (releases,
 * proclaims), else when the leader's lease would end. */
DLOCK_EXPORT int dlock_loop_leader_wait(dlock_op **out, dlock_loop *loop,
                                        const char *name,
                                        const dlock_leader_info *known,
                                        int64_t wait_ms, dlock_op_cb cb,
                                        void *userdata);

/* In a dlock_loop_leader or dlock_loop_leader_wait callback: copy its
 * answer into *out. DLOCK_OK, or DLOCK_EINVAL for another operation. */
DLOCK_EXPORT int dlock_op_leader(const dlock_op *op, dlock_leader_info *out);

/*
 * Several locks at once, with dlock_lock_acquire_all's rules: the N
 * distinct NAMES (1 to DLOCK_MULTI_MAX) are taken one after the other in
 * one global order (free of deadlock between such calls), each with the
 * time left of opts->wait_ms; when one cannot be had, those taken are
 * released again and the operation completes with that lock's status
 * and message ("NAME: why"). On DLOCK_OK (hold is NULL in the callback)
 * the holds are read in the callback with dlock_op_holds, one per name in
 * the order of NAMES; each is then the caller's (release them one by one;
 * the loop renews each). A name the loop already holds makes it BUSY.
 */
DLOCK_EXPORT int dlock_loop_lock_all(dlock_op **out, dlock_loop *loop,
                                     const char *const *names, int n,
                                     const dlock_loop_acquire *opts,
                                     dlock_op_cb cb, void *userdata);

/* In a successful dlock_loop_lock_all callback: copy its n holds into
 * holds[0..n) (the order of NAMES) and return n; DLOCK_EINVAL otherwise. */
DLOCK_EXPORT int dlock_op_holds(const dlock_op *op, dlock_hold **holds);

/* Release the hold: one request; the callback gets DLOCK_OK, DLOCK_LOST
 * (already found lost), DLOCK_NOT_OWNER (expired or taken) or an error
 * class, and hold (freed when the callback returns, whatever the
 * outcome; renewal stops at once). The hold must not be used after this
 * call except in that callback. Returns as dlock_loop_lock. */
DLOCK_EXPORT int dlock_loop_release(dlock_op **out, dlock_loop *loop,
                                    dlock_hold *hold, dlock_op_cb cb,
                                    void *userdata);

/* Set the hold's lease to lease_ms from now (and the renewals' lease
 * from then on). The callback gets DLOCK_OK, DLOCK_NOT_OWNER (the hold
 * is then lost), DLOCK_NOT_REPLICATED (wait_replicas, one server: too few
 * replicas have the extension; the hold keeps the validity it had) or
 * an error class. Returns as dlock_loop_lock. */
DLOCK_EXPORT int dlock_loop_extend(dlock_op **out, dlock_loop *loop,
                                   dlock_hold *hold, int64_t lease_ms,
                                   dlock_op_cb cb, void *userdata);

/*
 * Fenced write through the loop (dlock_fenced_set's rules: KEY as the
 * caller names it; VALUE stored only if TOKEN >= every token a fenced
 * write of KEY carried; TOKEN 1 to 2^53, else DLOCK_EINVAL, as a lazy
 * hold's 0 before dlock_loop_token; the form by the client's layout).
 * Callback: DLOCK_OK, DLOCK_STALE (older token, nothing changed),
 * DLOCK_EINVAL (string layout: KEY holds something else, e.g. a
 * hash-layout client's hash; nothing changed), DLOCK_NOT_REPLICATED
 * (wait_replicas, one server: the value was written but too few replicas
 * acknowledged it) or an error class; hold is NULL.
 */
DLOCK_EXPORT int dlock_loop_fenced_set(dlock_op **out, dlock_loop *loop,
                                       const char *key, uint64_t token,
                                       const void *value, size_t len,
                                       dlock_op_cb cb, void *userdata);

/*
 * Store VALUE under KEY with the hold's token, then release the hold, in
 * ONE script on the server (atomic): the de-duplication pattern "store
 * the result and give the lock back", where waiters woken by the release
 * find the result at once. The value is written (dlock_fenced_set's
 * rules: KEY as the caller names it, the string layout's one string
 * "<fence> <value>", one SET) only while HOLD is still this owner's on the
 * server, with the hold's token (issued now if it was not:
 * dlock_loop_acquire.lazy_token); the release is dlock_loop_release's
 * (waiters woken or the lock handed over as by a release). The hold must
 * be an exclusive lock of a loop over one server with the string layout
 * (DLOCK_LAYOUT_STRING; KEY on that server): else DLOCK_EINVAL (use
 * dlock_loop_fenced_set and dlock_loop_release). The hold ends with the
 * call, as with dlock_loop_release (not to be used after it except in
 * the callback, which gets it). Callback statuses:
 *   DLOCK_OK            stored with the hold's token, released;
 *   DLOCK_STALE         not stored (KEY's fence is newer than the hold's
 *                       token: dlock_op_value's fence gives it), released;
 *   DLOCK_EINVAL        (in the callback) KEY holds no fenced value of the
 *                       string layout's form (a hash-layout client's
 *                       hash): not stored, released;
 *   DLOCK_NOT_OWNER     the lease had expired or another owner holds the
 *                       name: nothing stored, nothing released;
 *   DLOCK_LOST          the loop had found the lease lost: nothing sent;
 *   DLOCK_NOT_REPLICATED (wait_replicas) stored and released, too few
 *                       replicas acknowledged;
 *   an error class      not known whether stored; the loop gives the
 *                       hold back with a release whose answer it ignores.
 * Returns as dlock_loop_lock.
 */
DLOCK_EXPORT int dlock_loop_fenced_set_release(dlock_op **out, dlock_loop *loop,
                                               dlock_hold *hold,
                                               const char *key,
                                               const void *value, size_t len,
                                               dlock_op_cb cb, void *userdata);

/*
 * Make sure HOLD's fencing token is issued: a hold acquired with
 * dlock_loop_acquire.lazy_token by a plain SET has none yet (0); this
 * asks the server to issue it (s_stamp.lua: the server's time in us,
 * written into the lock's value while HOLD is still the owner's). The
 * callback gets DLOCK_OK (dlock_hold_token(hold) is now the token; at
 * once, from process, when it was already known), DLOCK_NOT_OWNER (the
 * lease expired or another owner has the name: no token), DLOCK_LOST
 * (found lost before) or an error class (a later call asks again).
 * Returns as dlock_loop_lock.
 */
DLOCK_EXPORT int dlock_loop_token(dlock_op **out, dlock_loop *loop,
                                  dlock_hold *hold, dlock_op_cb cb,
                                  void *userdata);

/* Fenced read through the loop (dlock_fenced_get's rules and form, by
 * the client's layout: one plain HMGET, or GET with the string layout;
 * an engine loop sends them as scripts). In the callback, dlock_op_value
 * gives the value read (NULL: none) and its length, and the highest
 * token seen. */
DLOCK_EXPORT int dlock_loop_fenced_get(dlock_op **out, dlock_loop *loop,
                                       const char *key, dlock_op_cb cb,
                                       void *userdata);

/*
 * Fenced read through the loop (dlock_fenced_read's rules): read KEY's
 * value under TOKEN (1 to 2^53) and make TOKEN the key's floor, so that a
 * fenced set with an older token is refused from then on: the read of a
 * read-modify-write, or a new holder's look before it acts, which shuts
 * out a previous holder paused past its lease (its later fenced set gets
 * DLOCK_STALE). Callback: DLOCK_OK (dlock_op_value gives the value, NULL
 * when none, and the fence, now TOKEN), DLOCK_STALE (TOKEN is older than
 * the fence, which dlock_op_value's fence gives; nothing changed),
 * DLOCK_EINVAL (as dlock_loop_fenced_set's) or an error class; hold is
 * NULL. With wait_replicas (one server): WAIT after
 * the read, DLOCK_NOT_REPLICATED when too few replicas have the raised
 * fence (the value is still given).
 */
DLOCK_EXPORT int dlock_loop_fenced_read(dlock_op **out, dlock_loop *loop,
                                        const char *key, uint64_t token,
                                        dlock_op_cb cb, void *userdata);

/* In a fenced get's or read's callback: the value (NUL-terminated, owned
 * by the op: copy it), its length and the fence (0 when never written).
 * NULL for other operations or when KEY has no value. In a
 * dlock_loop_fenced_set_release's callback: NULL, and *fence is the
 * token written (DLOCK_OK) or the newer fence (DLOCK_STALE). */
DLOCK_EXPORT const char *dlock_op_value(const dlock_op *op, size_t *len,
                                        uint64_t *fence);

/*
 * Cancel an operation that has not completed: its callback runs now,
 * from this call, with DLOCK_CANCELED, and what it may hold is given
 * back by requests sent without waiting (a fair waiter's queue place; a
 * lock handed to it or an acquire in flight is released). A release or
 * extend already sent still reaches the server; only its callback is
 * run early. op must be a live operation of a loop used from this
 * thread (not one whose callback has run).
 */
DLOCK_EXPORT void dlock_op_cancel(dlock_op *op);

/* The operation's message: why it failed, or "" (valid until its
 * callback returns). */
DLOCK_EXPORT const char *dlock_op_errmsg(const dlock_op *op);

/* The name given to acquire. */
DLOCK_EXPORT const char *dlock_hold_name(const dlock_hold *hold);
/* The fencing token (see dlock_lock_token); 0 for a hold acquired with
 * dlock_loop_acquire.lazy_token whose token is not issued yet. */
DLOCK_EXPORT uint64_t dlock_hold_token(const dlock_hold *hold);
/* The owner id on the servers: "<client id>:0:<hold number>". */
DLOCK_EXPORT const char *dlock_hold_owner(const dlock_hold *hold);
/* Milliseconds of validity left (0 once expired or lost). */
DLOCK_EXPORT int64_t dlock_hold_validity_ms(const dlock_hold *hold);
/* DLOCK_OK while believed held, DLOCK_LOST / DLOCK_NOT_OWNER once lost. */
DLOCK_EXPORT int dlock_hold_status(const dlock_hold *hold);

/* The hold's status (as dlock_hold_status) and, once lost, *why (when
 * why is not NULL): "the servers say it is no longer this owner's..."
 * (DLOCK_NOT_OWNER) or "renewals failed: " and the last renewal's
 * failure (DLOCK_LOST); "" while held. Valid while the hold is. */
DLOCK_EXPORT int dlock_hold_lost_reason(const dlock_hold *hold,
                                        const char **why);

/* How much work the loop still has out: its live operations plus the
 * requests sent and not yet answered (give-backs of cancelled waits
 * among them). A program about to exit calls process until it is 0 (or
 * a bound of its own), so that what a cancel gives back reaches the
 * server; each request ends by the client's command timeout at most. */
DLOCK_EXPORT int dlock_loop_pending(const dlock_loop *loop);

/* While an acquire waits on: the status of its last attempt that failed
 * (the servers out of reach, not ready...: the wait rides it out), and
 * in *msg (when not NULL) its message, valid until the next process; 0
 * (DLOCK_OK) when none failed. Lets a program say that it keeps trying. */
DLOCK_EXPORT int dlock_op_last_failure(const dlock_op *op, const char **msg);

/* A warning about how the loop has to work, or "": the server refused
 * the loop's SUBSCRIBE (an ACL without the lock's pub/sub channels,
 * NOPERM), so its waiters poll instead of being notified; the text names
 * the ACL rule that allows them. Valid until the next call. */
DLOCK_EXPORT const char *dlock_loop_warning(dlock_loop *loop);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_LOOP_H */
