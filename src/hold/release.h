/*
 * release.h - giving back what a hold has on the servers (release.c): the
 * release script of a hold's kind run on its nodes, and the undo of what
 * an acquire may have taken, retried from the watchdog thread (the undo
 * queue, client->undos) where a node did not answer. The release
 * command of each kind is here, below the kind table (kind.c), whose
 * waiters that leave a queue give back through this file. Above held.h.
 */
#ifndef DLOCK_HOLD_RELEASE_H
#define DLOCK_HOLD_RELEASE_H

#include <stdint.h>

#include "hold/core.h"
#include "hold/held.h"

/* What a release gives back: (owner, depth, token); ticket > 0, a
 * Redlock fair waiter's undo, back into the queue at that place; relid,
 * the request's id, the same on every node. */
typedef struct dlock__release {
    const char *owner;
    int depth;
    uint64_t token;
    uint64_t ticket;
    const char *relid;
    size_t relidlen;
} dlock__release;

/* Add the keys of a lock's scripts to b: the lock, its fence, its fair
 * queue and the queue's deadlines (the first nkeys of them). */
void dlock__lock_keys(dlock__cmdbuf *b, const dlock__keys *k, int nkeys);

/* The release command of r on keys k of each kind (the kind table,
 * kind.c, names them): release.lua (with one server the lock is handed
 * to the first live fair waiter; with several, that waiter is only
 * woken), sem_release.lua (the freed permit goes to the first live
 * waiter, handed over in FIFO mode, else woken), rw_release.lua (the last
 * reader out wakes a fair writer). */
void dlock__lock_release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__keys *k, const dlock__release *r);
void dlock__permit_release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                               const dlock__keys *k, const dlock__release *r);
void dlock__reader_release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                               const dlock__keys *k, const dlock__release *r);

/* sem_release.lua for a semaphore's waiter that gives up (OWNER): it
 * leaves the queue, and a permit handed to it meanwhile is released and
 * passed on. */
void dlock__permit_leave_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__keys *k, const char *owner);

/* The release command of r on keys k, by k's kind (one of the three). */
void dlock__release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__keys *k, const dlock__release *r);

/* Bytes of dlock__set_release_cmd's WANT buffer. */
#define DLOCK__SETREL_WANT (DLOCK_OWNER_MAX + 24)

/* s_set_release.lua for OWNER's exclusive lock k of the string layout,
 * held once with TOKEN (0: not issued yet, the script issues it): store
 * VALUE (LEN bytes) under KEY (KL bytes) with the lock's token, then
 * release the lock as s_release.lua's release does, in one script. KEYS:
 * the lock key (and its fence hash with retention), KEY; ARGV: the lock's
 * value as the hold left it ("<owner> 1 <token>", built in WANT, which
 * must outlive the command), VALUE: two arguments, where the release's
 * are three (each argument costs the server an interned Lua string). The
 * store and release of dlock_lock_fenced_set_release and
 * dlock_loop_fenced_set_release (one server or Sentinel: no SPUBLISH
 * flag). */
void dlock__set_release_cmd(dlock__cmdbuf *b, dlock_client *c,
                            const dlock__keys *k, const char *owner,
                            uint64_t token, char want[DLOCK__SETREL_WANT],
                            const char *key, size_t kl, const void *value,
                            size_t len);

/* The status of s_set_release.lua's answer r {stored, t, r} (or the
 * common case's string "<stored> <t> 1", or its bare token "<t>" when
 * stored and released): DLOCK_OK
 * (stored with token *t, released), DLOCK_STALE (not stored: *t the newer
 * fence; released), DLOCK_NOT_OWNER (nothing stored or released),
 * DLOCK_EINVAL (not stored: the value's key holds no fenced value of the
 * string layout, DLOCK__FENCED_OTHER; released) or DLOCK_EPROTO (not
 * that shape). */
int dlock__set_release_verdict(const redisReply *r, long long *t);

/* The string layout's fenced value is one string (s_fenced.luainc):
 * "<fence>" or "<fence> <value>", the fence in decimal without leading
 * zeros. Split S (N bytes)
 * into *fence and the value (*value, *vlen; *value NULL when there is
 * none). Returns 1, or 0 when S is not of that form. */
int dlock__fenced_split(const char *s, size_t n, uint64_t *fence,
                        const char **value, size_t *vlen);

/* What a fenced call of the string layout says of a key holding
 * something else (a hash: the hash layout's fenced value). */
#define DLOCK__FENCED_OTHER                                                    \
    "holds no fenced value of the string layout (a hash is the hash "          \
    "layout's: clients of one key must use one layout, "                       \
    "dlock_client_set_layout)"

/* Run the release script of k's kind (dlock__release_cmd) for (owner,
 * expected depth, token) on the nodes in mask (over pins[i] where set: a
 * hold's pinned connections), waiting until deadline_ms; the answers are left in res
 * for the caller to read and clear. early: a release, done once a
 * majority confirmed (an undo waits for every node: each answer settles
 * one). eval: send the script's source (an undo retried after a send
 * that got no answer). ticket > 0: a Redlock fair waiter's undo, back
 * into the queue at that place. */
void dlock__release_run(dlock_client *c, const dlock__keys *k,
                        const char *owner, uint64_t mask, int depth,
                        uint64_t token, int eval, uint64_t ticket,
                        dlock__conn **pins, int early, int64_t deadline_ms,
                        dlock__result *res);

/* Send release.lua for (owner, depth, token) on lock k to the nodes in
 * mask (over pins[i] where set; pins may be NULL); returns the nodes that
 * did not answer. ticket > 0: a Redlock
 * fair waiter goes back into the queue at that place. eval: send the
 * script's source, not its SHA (a retry of an undo whose first send got
 * no answer: a late NOSCRIPT nobody reads would lose it). */
uint64_t dlock__undo_send(dlock_client *c, const dlock__keys *k,
                          const char *owner, uint64_t mask, int depth,
                          uint64_t token, uint64_t ticket, int eval,
                          dlock__conn **pins);

/* Give back what an acquire of h may have taken (depth, token) on the
 * nodes in mask: at once (waiting for answers no longer than the attempt's
 * end, h->attempt_end_ms), and for nodes that do not answer, again from
 * the watchdog thread with the script's source until they answer or
 * lease_ms has passed. eval: send the source at once too; needed when a
 * node did not answer the acquire (it may be stalled: the undo must not
 * depend on a reply read later, and this process may be gone by then);
 * nodes that answered get the SHA (a NOSCRIPT answer is retried with the
 * source on the spot; no answer in time, by the watchdog). ticket: as
 * for dlock__undo_send (the retries do not requeue: the waiter's next
 * refresh does). Goes over h's pinned connections (h->pins: behind the
 * acquire it undoes), which it gives back. Returns the nodes that did
 * not answer at once: there the give-back may still arrive later (the
 * watchdog's retries, or a request given up on), and the caller must not
 * let a later attempt use h->owner (dlock__give_back in withdraw.h). */
uint64_t dlock__undo_acquire(dlock_client *c, dlock__held *h, uint64_t mask,
                             int depth, uint64_t token, int64_t lease_ms,
                             uint64_t ticket, int eval);

/* Queue a give-back of h's acquire (depth, token) on the nodes in mask
 * for the watchdog thread, which retries it with the script's source
 * until they answer or until_ms (monotonic: the lease has run out by
 * then). Never blocks on the servers (an attempt cut short uses it:
 * hold/attempt.h). */
void dlock__undo_queue(dlock_client *c, const dlock__held *h, uint64_t mask,
                       int depth, uint64_t token, int64_t until_ms);

/* Redlock: a release is settled once a majority confirmed it (answers
 * 1 to 4): a dlock__cmd.enough. ud: the quorum (an int). */
int dlock__release_enough(const dlock__result *res, uint64_t waiting, int n,
                          const void *ud);

#endif /* DLOCK_HOLD_RELEASE_H */
