/*
 * lock.c - the lock itself: acquire (with waiting), release, extend,
 * fencing tokens, fenced writes and inspection.
 *
 * One code path serves a single server and Redlock: every step runs a
 * script on all nodes through dlock__exec() and counts the answers. With
 * one node the quorum is 1.
 *
 * The client keeps a registry of the locks its owners hold (one
 * dlock__held per lock and owner, shared by the handles of reentrant
 * acquisitions). It gives reentrancy its expected depth, which makes every
 * script idempotent (a retry after a lost reply cannot count twice), and
 * gives the watchdog the list of leases to renew.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* The fence hash outlives the last acquisition by this long (7 days);
 * see docs/design.md, "Fencing tokens". */
#define FENCE_RETENTION_MS (7LL * 24 * 3600 * 1000)
/* Fair mode: a queued waiter drops out this long after its last refresh,
 * and refreshes at a third of it. */
#define FAIR_WAITER_TTL_MS 3000
/* Fair mode: a lock handed to a waiter has this lease (at most) until the
 * new owner confirms it; the bound on how long a waiter that died while
 * being handed the lock can hold the others up. */
#define FAIR_HANDOFF_MS 2000

/* The lease a fair handoff gives until the new owner confirms. */
static int64_t fair_handoff_lease(int64_t lease_ms)
{
    return lease_ms < FAIR_HANDOFF_MS ? lease_ms : FAIR_HANDOFF_MS;
}

static int64_t drift_of(const dlock_client *c, int64_t lease_ms)
{
    return dlock__drift_ms(lease_ms, c->opts.drift_ppm, c->opts.drift_fixed_ms);
}

/* Check a lock name; DLOCK_OK or DLOCK_EINVAL with the message set. */
static int check_name(const dlock_client *c, const char *name)
{
    size_t n;
    if (name == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "lock name is NULL");
    n = strlen(name);
    if (n == 0 || n > DLOCK_NAME_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lock name must be 1 to %d bytes (got %zu)",
                                DLOCK_NAME_MAX, n);
    return DLOCK_OK;
}

/* Write "<prefix>:{<name>}<suffix>" at *cur (NUL-terminated), advance
 * *cur past it, and return where it starts; its length in *outlen. */
static char *put_key(char **cur, const dlock_client *c, const char *name,
                     size_t nlen, const char *suffix, size_t *outlen)
{
    char *k = *cur;
    size_t slen = strlen(suffix);
    memcpy(k, c->key_prefix, c->prefixlen);
    memcpy(k + c->prefixlen, ":{", 2);
    memcpy(k + c->prefixlen + 2, name, nlen);
    k[c->prefixlen + 2 + nlen] = '}';
    memcpy(k + c->prefixlen + 3 + nlen, suffix, slen + 1);
    *outlen = c->prefixlen + 3 + nlen + slen;
    *cur = k + *outlen + 1;
    return k;
}

/* Free a held record: its strings live in the same allocation. */
void dlock__held_free(dlock__held *h)
{
    free(h);
}

/* A new, unregistered held record for NAME and OWNER: one allocation for
 * the record and all its key and channel names (this is on every fresh
 * acquire's path). */
static dlock__held *held_new(dlock_client *c, const char *name,
                             const char *owner)
{
    size_t nlen = strlen(name);
    size_t base = c->prefixlen + 3 + nlen + 1; /* "<prefix>:{<name>}" + NUL */
    /* name, key, :f, :c, :q, :qt, :c:<client id> */
    size_t strs = (nlen + 1) + base + (base + 2) + (base + 2) + (base + 2) +
                  (base + 3) + (base + 2 + 33);
    dlock__held *h = calloc(1, sizeof *h + strs);
    char *cur;
    if (h == NULL)
        return NULL;
    cur = (char *)(h + 1);
    h->namelen = nlen;
    h->name = cur;
    memcpy(cur, name, nlen + 1);
    cur += nlen + 1;
    h->key = put_key(&cur, c, name, nlen, "", &h->keylen);
    h->fkey = put_key(&cur, c, name, nlen, ":f", &h->fkeylen);
    h->chan = put_key(&cur, c, name, nlen, ":c", &h->chanlen);
    h->qkey = put_key(&cur, c, name, nlen, ":q", &h->qkeylen);
    h->qtkey = put_key(&cur, c, name, nlen, ":qt", &h->qtkeylen);
    /* Fair handoffs are published on "<channel>:<client id>": only the
     * process of the waiter that got the lock is woken. */
    h->hchan = put_key(&cur, c, name, nlen, ":c:", &h->hchanlen);
    memcpy(h->hchan + h->hchanlen, c->idhex, 33);
    h->hchanlen += 32;
    snprintf(h->owner, sizeof h->owner, "%s", owner);
    atomic_store(&h->state, DLOCK_OK);
    return h;
}

/* The registered hold of NAME by thread SELF, or NULL. Caller holds
 * held_mu. */
static dlock__held *held_find(dlock_client *c, const char *name, pthread_t self)
{
    dlock__held *h;
    for (h = c->held; h != NULL; h = h->next)
        if (!h->adopted && pthread_equal(h->thread, self) &&
            strcmp(h->name, name) == 0)
            return h;
    return NULL;
}

/* Unlink h from the registry. Caller holds held_mu. */
static void held_unlink(dlock_client *c, dlock__held *h)
{
    dlock__held **pp;
    for (pp = &c->held; *pp != NULL; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            return;
        }
}

/* Classify one node's acquire reply: 1 granted, 0 busy, -1 depth
 * mismatch, DLOCK_EPROTO for a reply of the wrong shape. */
static int acquire_kind(const redisReply *r)
{
    long long k;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return DLOCK_EPROTO;
    k = r->element[0]->integer;
    if (k == 1 && r->elements == 3)
        return 1;
    if (k == 0 || k == -1)
        return (int)k;
    return DLOCK_EPROTO;
}

typedef struct attempt {
    uint64_t token;
    int depth;
    int64_t pttl; /* BUSY: how long the holder's lease still runs */
    int64_t valid_until;
    uint64_t nodes; /* nodes that granted */
    int split;      /* Redlock: some nodes granted, too few (undone) */
} attempt;

/* The four keys of a lock's acquire, release and fair-leave scripts:
 * the lock, its fence, its fair queue and the queue's deadlines. */
static void lock_keys(dlock__cmdbuf *b, const dlock__held *h, int nkeys)
{
    dlock__cmd_key(b, h->key, h->keylen);
    dlock__cmd_key(b, h->fkey, h->fkeylen);
    if (nkeys > 2) {
        dlock__cmd_key(b, h->qkey, h->qkeylen);
        dlock__cmd_key(b, h->qtkey, h->qtkeylen);
    }
}

/* Run release.lua for (h's owner, expected depth, token) on the nodes in
 * mask; the answers are left in res for the caller to read and clear.
 * undo: give back a maybe-taken lock, sent with the script's source. */
static void run_release(dlock_client *c, const dlock__held *h, uint64_t mask,
                        int depth, uint64_t token, int undo, dlock__result *res)
{
    dlock__cmdbuf b;
    char relid[64];
    size_t n;

    /* "<client id>:<n>": the same on every node for this request. */
    memcpy(relid, c->idhex, 32);
    relid[32] = ':';
    n = 33 + dlock__fmt_u64(relid + 33, atomic_fetch_add(&c->release_seq, 1));
    relid[n] = '\0';
    dlock__cmd_begin(&b, DLOCK__S_RELEASE);
    lock_keys(&b, h, 4);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(&b, depth);
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg(&b, h->chan, h->chanlen);
    dlock__cmd_arg_i64(&b, FAIR_HANDOFF_MS);
    dlock__cmd_arg_i64(&b, FENCE_RETENTION_MS);
    dlock__cmd_arg(&b, relid, n);
    b.cmd.eval = undo;
    dlock__run(c, mask, &b.cmd, dlock__deadline(c, 0), res);
}

/* See internal.h. */
uint64_t dlock__undo(dlock_client *c, dlock__held *h, uint64_t mask, int depth,
                     uint64_t token)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    int i;

    if (mask == 0)
        return 0;
    run_release(c, h, mask, depth, token, 1, res);
    /* Any answer settles a node (released, or nothing to release). */
    for (i = 0; i < c->ns.n; i++)
        if ((mask & (1ULL << i)) && res[i].status != DLOCK_EIO &&
            res[i].status != DLOCK_ETIMEDOUT)
            mask &= ~(1ULL << i);
    dlock__results_clear(res, c->ns.n);
    return mask;
}

/* See internal.h. */
void dlock__undo_later(dlock_client *c, const dlock__held *h, uint64_t mask,
                       int depth, uint64_t token, int64_t until_ms)
{
    dlock__held *u = held_new(c, h->name, h->owner);
    if (u == NULL)
        return; /* the lease runs out by itself */
    u->nodes = mask;
    u->depth = depth;
    u->token = token;
    atomic_store(&u->valid_until_ms, until_ms);
    pthread_mutex_lock(&c->held_mu);
    u->next = c->undos;
    c->undos = u;
    pthread_mutex_unlock(&c->held_mu);
    dlock__watchdog_kick(c, 0); /* retry at once */
}

/* Give back what an acquire may have taken: at once, and, for nodes that
 * did not answer (down, stalled, unreachable), again from the watchdog
 * thread until they answer or the lease has run out anyway. */
static void undo_acquire(dlock_client *c, dlock__held *h, uint64_t mask,
                         int depth, uint64_t token, int64_t lease_ms)
{
    int64_t t0 = dlock__now_ms();
    uint64_t left = dlock__undo(c, h, mask, depth, token);
    if (left != 0)
        dlock__undo_later(c, h, left, depth, token, t0 + lease_ms);
}

/*
 * Redlock's fencing step: the granting nodes' counters may disagree, so
 * raise the counter to the highest token on the granting nodes; once a
 * majority holds it, any later winner's majority sees it. Returns
 * DLOCK_OK or DLOCK_NO_QUORUM.
 */
static int raise_fence(dlock_client *c, dlock__held *h, uint64_t mask,
                       uint64_t token)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int i, ok = 0;

    dlock__cmd_begin(&b, DLOCK__S_FENCE_RAISE);
    dlock__cmd_key(&b, h->fkey, h->fkeylen);
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg_i64(&b, FENCE_RETENTION_MS);
    dlock__run(c, mask, &b.cmd, dlock__deadline(c, h->lease_ms), res);
    for (i = 0; i < c->ns.n; i++)
        if ((mask & (1ULL << i)) && res[i].status == DLOCK_OK &&
            res[i].reply->type == REDIS_REPLY_INTEGER &&
            (uint64_t)res[i].reply->integer >= token)
            ok++;
    dlock__results_clear(res, c->ns.n);
    return ok >= c->ns.quorum ? DLOCK_OK : DLOCK_NO_QUORUM;
}

/*
 * One acquire attempt on every node. mode: FAIR_NONE (acquire.lua),
 * FAIR_TRY (fair_acquire.lua without queueing: respects the queue but
 * does not join it), FAIR_QUEUE (joins or refreshes its place). Fills *a. Returns DLOCK_OK, DLOCK_BUSY (a->pttl set), DLOCK_NOT_OWNER (our
 * earlier hold expired: reentrant acquire), DLOCK_NO_QUORUM or an error.
 */
enum { FAIR_NONE, FAIR_TRY, FAIR_QUEUE };

/* The acquire script's command for h in mode fair. Plain mode needs
 * neither the queue keys nor the fair arguments: they are left off the
 * hot path. */
static void acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__held *h, int64_t lease_ms, int fair)
{
    int64_t hint = 0;
    if (c->ns.n > 1) {
        /* Propose a token a little above the wall clock so that nodes
         * whose counters agree with the clock return the same token and
         * no raise round is needed. Safety never rests on it: a node
         * grants max(its counter + 1, its time, this). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        hint = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + 1000000;
    }
    dlock__cmd_begin(b, DLOCK__S_ACQUIRE);
    lock_keys(b, h, fair ? 4 : 2);
    dlock__cmd_arg(b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(b, lease_ms);
    dlock__cmd_arg_i64(b, h->depth);
    dlock__cmd_arg_i64(b, FENCE_RETENTION_MS);
    dlock__cmd_arg_i64(b, hint);
    if (fair) {
        dlock__cmd_arg_i64(b, FAIR_WAITER_TTL_MS);
        dlock__cmd_arg(b, fair == FAIR_QUEUE ? "2" : "1", 1);
    }
}

static int try_acquire(dlock_client *c, dlock__held *h, int64_t lease_ms,
                       int fair, attempt *a)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int64_t t0, elapsed, validity;
    int i, granted = 0, busy = 0, gone = 0, rc = DLOCK_OK;
    uint64_t gmask = 0, tmax = 0;
    int tokens_differ = 0, first = 1;

    memset(a, 0, sizeof *a);
    a->pttl = -1;
    acquire_cmd(&b, c, h, lease_ms, fair);

    t0 = dlock__now_ms();
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, lease_ms),
               res);
    for (i = 0; i < c->ns.n; i++) {
        int k;
        if (res[i].status != DLOCK_OK)
            continue;
        k = acquire_kind(res[i].reply);
        if (k == 1) {
            uint64_t t = (uint64_t)dlock__elem_int(res[i].reply, 1);
            granted++;
            gmask |= 1ULL << i;
            if (!first && t != tmax)
                tokens_differ = 1;
            if (first || t > tmax)
                tmax = t;
            first = 0;
            a->depth = (int)dlock__elem_int(res[i].reply, 2);
        } else if (k == 0) {
            int64_t p = dlock__elem_int(res[i].reply, 1);
            busy++;
            if (p > 0 && (a->pttl < 0 || p < a->pttl))
                a->pttl = p;
        } else if (k == -1) {
            gone++;
        } else {
            dlock__malformed(&c->ns, res, i, "the acquire script");
        }
    }
    elapsed = dlock__now_ms() - t0;
    validity = lease_ms - elapsed - drift_of(c, lease_ms);

    if (granted >= c->ns.quorum && validity > 0) {
        if (c->ns.n > 1 && tokens_differ &&
            raise_fence(c, h, gmask, tmax) != DLOCK_OK) {
            rc = dlock__set_error(c, DLOCK_NO_QUORUM,
                                  "acquire %s: could not record the fencing "
                                  "token on a majority",
                                  h->name);
        } else {
            validity =
                lease_ms - (dlock__now_ms() - t0) - drift_of(c, lease_ms);
            if (validity > 0) {
                a->token = tmax;
                a->nodes = gmask;
                a->valid_until = t0 + lease_ms - drift_of(c, lease_ms);
                dlock__results_clear(res, c->ns.n);
                return DLOCK_OK;
            }
            rc = dlock__set_error(c, DLOCK_NO_QUORUM,
                                  "acquire %s: validity used up before the "
                                  "majority answered",
                                  h->name);
        }
    } else if (gone > 0 && h->depth > 0 && granted < c->ns.quorum) {
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "acquire %s: the earlier hold of this owner "
                              "has expired",
                              h->name);
    } else if (busy > 0 && granted + busy + gone >= c->ns.quorum) {
        rc = DLOCK_BUSY;
    } else if (granted >= c->ns.quorum) {
        rc = dlock__set_error(c, DLOCK_NO_QUORUM,
                              "acquire %s: validity used up (lease %" PRId64
                              " ms, took %" PRId64 " ms)",
                              h->name, lease_ms, elapsed);
    } else if (c->ns.n == 1) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "acquire");
    } else {
        rc = dlock__fail_step(c, res, dlock__all_nodes(c), DLOCK_NO_QUORUM,
                              "acquire");
    }
    /* Not acquired: give back partial grants and anything a lost reply may
     * have taken, on every node at once, so that the next attempt (ours or
     * another client's) is not blocked by leftovers. */
    a->split = c->ns.n > 1 && granted > 0;
    if (h->depth == 0 || granted > 0) {
        uint64_t undo = gmask;
        /* Nodes whose request may have arrived but whose answer did not;
         * a request that never left (refused connect) took nothing. */
        for (i = 0; i < c->ns.n; i++)
            if (res[i].status != DLOCK_OK && res[i].sent)
                undo |= 1ULL << i;
        if (rc == DLOCK_BUSY && c->ns.n == 1)
            undo = 0;
        dlock__results_clear(res, c->ns.n);
        undo_acquire(c, h, undo, h->depth + 1, tmax, lease_ms);
    } else {
        dlock__results_clear(res, c->ns.n);
    }
    return rc;
}

static int fair_leave(dlock_client *c, dlock__held *h, int rc);

/* The jittered spin delay for round n: uniform in [d/2, d], d doubling
 * from spin_min_ms to spin_max_ms. */
static int64_t spin_delay(const dlock_client *c, int round)
{
    return dlock__backoff_ms(c->opts.spin_min_ms, c->opts.spin_max_ms, round);
}

/* Sleep until `until` on the client's cancel condition. 0 slept,
 * DLOCK_CANCELED. */
static int spin_sleep(dlock_client *c, int64_t until, uint64_t gen)
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

/* The end of a wait: the earlier of the caller's deadline and `until`. */
static int64_t min_deadline(int64_t deadline, int64_t until)
{
    if (deadline < 0)
        return until;
    return until < deadline ? until : deadline;
}

/*
 * The waiting loop after a first attempt found the lock busy. Notify:
 * subscribe, then take turns as the process's one contender, sleeping
 * between turns until a release is announced or the holder's lease would
 * have run out. Spin: sleep with backoff, never past the lease or the
 * deadline. Fair: stay queued in Redis and wait for the handoff.
 */
static int wait_and_acquire(dlock_client *c, dlock__held *h, int64_t lease_ms,
                            int64_t deadline, attempt *a, int64_t pttl,
                            uint64_t gen)
{
    int strategy = c->opts.wait_strategy;
    dlock__waiter *w = NULL;
    int rc = DLOCK_BUSY, round = 0;
    const char *chan = strategy == DLOCK_WAIT_FAIR ? h->hchan : h->chan;
    size_t chanlen = strategy == DLOCK_WAIT_FAIR ? h->hchanlen : h->chanlen;

    if (strategy != DLOCK_WAIT_SPIN) {
        int64_t sub_dl = dlock__now_ms() + c->opts.command_timeout_ms;
        if (dlock__notify_begin(
                c, chan, chanlen, strategy == DLOCK_WAIT_FAIR ? h->owner : NULL,
                &w, min_deadline(deadline, sub_dl), gen) != DLOCK_OK) {
            /* No subscription (server refuses, timeout): spinning still
             * finds the lock, only later; a fair waiter still refreshes
             * its place, and a refresh finds a handoff made to it. */
            w = NULL;
            if (strategy == DLOCK_WAIT_NOTIFY)
                strategy = DLOCK_WAIT_SPIN;
        }
    }
    for (;;) {
        int64_t now = dlock__now_ms(), until;
        if (atomic_load(&c->cancel_gen) != gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (deadline >= 0 && now >= deadline) {
            rc = DLOCK_TIMEDOUT;
            break;
        }
        if (strategy == DLOCK_WAIT_NOTIFY) {
            int t = dlock__notify_turn(w, deadline);
            if (t != 1) {
                rc = t == 0 ? DLOCK_TIMEDOUT : t;
                break;
            }
        }
        rc = try_acquire(c, h, lease_ms,
                         strategy == DLOCK_WAIT_FAIR ? FAIR_QUEUE : FAIR_NONE,
                         a);
        if (rc != DLOCK_BUSY)
            break;
        atomic_fetch_add(&c->stats.busy, 1);
        atomic_fetch_add(&c->stats.waits, 1);
        if (a->pttl > 0)
            pttl = a->pttl;
        now = dlock__now_ms();
        if (strategy == DLOCK_WAIT_SPIN) {
            until = now + spin_delay(c, round++);
            if (pttl > 0 && now + pttl < until)
                until = now + pttl;
            rc = spin_sleep(c, min_deadline(deadline, until), gen);
        } else if (strategy == DLOCK_WAIT_FAIR) {
            until = now + (pttl > 0 ? pttl : FAIR_WAITER_TTL_MS / 3);
            if (until > now + FAIR_WAITER_TTL_MS / 3)
                until = now + FAIR_WAITER_TTL_MS / 3;
            if (w == NULL)
                rc = spin_sleep(c, min_deadline(deadline, until), gen);
            else
                rc = dlock__notify_wait_handoff(w,
                                                min_deadline(deadline, until));
            if (rc == 1) {
                /* Handed to us by the release script: the lease it set
                 * is short until we confirm (the watchdog does, at a third
                 * of that lease). */
                int64_t t = dlock__now_ms();
                int64_t hl = fair_handoff_lease(lease_ms);
                uint64_t tok = dlock__notify_handoff_token(w);
                memset(a, 0, sizeof *a);
                a->token = tok;
                a->depth = 1;
                a->nodes = 1;
                a->valid_until = t + hl - drift_of(c, hl);
                h->confirm_pending = 1;
                rc = DLOCK_OK;
                break;
            }
        } else if (a->split) {
            /* Redlock split vote: the contenders' undos wake everyone at
             * once, and retrying together splits again. Back off with
             * jitter instead of waiting for a message. */
            until = now + spin_delay(c, round++);
            rc = spin_sleep(c, min_deadline(deadline, until), gen);
        } else {
            until = now + (pttl > 0 ? pttl : c->opts.spin_max_ms);
            rc = dlock__notify_wait(w, min_deadline(deadline, until));
        }
        if (rc < 0)
            break;
    }
    if (strategy == DLOCK_WAIT_FAIR && rc != DLOCK_OK)
        rc = fair_leave(c, h, rc);
    dlock__notify_end(w);
    return rc;
}

/* Fair mode, giving up (deadline or cancel): leave the queue; if the lock
 * was handed to us in the meantime, pass it on. Returns rc unchanged. */
static int fair_leave(dlock_client *c, dlock__held *h, int rc)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    dlock__cmd_begin(&b, DLOCK__S_FAIR_LEAVE);
    lock_keys(&b, h, 4);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status == DLOCK_OK && dlock__elem_int(res[0].reply, 0) == 1) {
        uint64_t tok = (uint64_t)dlock__elem_int(res[0].reply, 1);
        dlock__results_clear(res, c->ns.n);
        undo_acquire(c, h, 1, 1, tok, FAIR_HANDOFF_MS);
        return rc;
    }
    dlock__results_clear(res, c->ns.n);
    return rc;
}

/* Fill *opts with the defaults. */
void dlock_acquire_options_init(dlock_acquire_options *opts)
{
    if (opts == NULL)
        return;
    memset(opts, 0, sizeof *opts);
    opts->version = DLOCK_ACQUIRE_OPTIONS_VERSION;
    opts->lease_ms = 30000;
}

/* A new handle for h (registered, or registered now). */
static int new_handle(dlock_client *c, dlock__held *h, dlock_lock **out)
{
    dlock_lock *l = calloc(1, sizeof *l);
    if (l == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    l->client = c;
    l->held = h;
    *out = l;
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_lock_acquire_ex(dlock_lock **out, dlock_client *c, const char *name,
                          const dlock_acquire_options *opts)
{
    dlock_acquire_options defaults;
    char owner[DLOCK_OWNER_MAX];
    dlock__held *h;
    attempt a = {0};
    int rc, fresh = 0;
    int64_t deadline, due;
    uint64_t gen;

    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "out is NULL");
    if (opts == NULL) {
        dlock_acquire_options_init(&defaults);
        opts = &defaults;
    }
    rc = check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (opts->version != DLOCK_ACQUIRE_OPTIONS_VERSION)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "acquire options version %u not supported",
                                opts->version);
    if (opts->lease_ms <= 0 || opts->lease_ms > 365LL * 24 * 3600 * 1000)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lease_ms must be > 0 and at most a year "
                                "(got %" PRId64 ")",
                                opts->lease_ms);
    if (c->ns.n > 1 && opts->lease_ms <= drift_of(c, opts->lease_ms))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lease_ms %" PRId64 " is not above the clock "
                                "drift allowance",
                                opts->lease_ms);

    gen = atomic_load(&c->cancel_gen);
    deadline = opts->wait_ms < 0 ? -1 : dlock__now_ms() + opts->wait_ms;
    pthread_mutex_lock(&c->held_mu);
    h = held_find(c, name, pthread_self());
    if (h != NULL && atomic_load(&h->state) != DLOCK_OK) {
        pthread_mutex_unlock(&c->held_mu);
        return dlock__set_error(c, DLOCK_LOST,
                                "acquire %s: this thread's earlier hold was "
                                "lost; release its handles first",
                                name);
    }
    pthread_mutex_unlock(&c->held_mu);
    if (h == NULL) {
        /* A fresh hold: a new owner id (see dlock__owner_id). */
        dlock__owner_id(c, owner, sizeof owner);
        h = held_new(c, name, owner);
        if (h == NULL)
            return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
        h->thread = pthread_self();
        fresh = 1;
    }
    /* Only this thread changes h->depth (the owner is this thread), so it
     * may be read here without the lock. */
    {
        char *msg = dlock__errbuf(c); /* a success leaves no stale message */
        if (msg != NULL)
            msg[0] = '\0';
    }
    /* Fair: the first attempt respects the queue but does not join it:
     * the waiting loop subscribes before it queues, or a quick handoff
     * could come before the subscription. Uncontended, that is one round
     * trip and no subscription. */
    if (c->opts.wait_strategy == DLOCK_WAIT_FAIR && fresh &&
        opts->wait_ms != 0 &&
        dlock__notify_subscribed(c, h->hchan, h->hchanlen)) {
        /* This process is contending for the lock again and is still
         * subscribed: queue at once, the try-only attempt would only add
         * a round trip. */
        rc = wait_and_acquire(c, h, opts->lease_ms, deadline, &a, -1, gen);
    } else {
        rc = try_acquire(c, h, opts->lease_ms,
                         c->opts.wait_strategy == DLOCK_WAIT_FAIR && fresh
                             ? FAIR_TRY
                             : FAIR_NONE,
                         &a);
    }
    if (rc == DLOCK_BUSY && opts->wait_ms != 0) {
        atomic_fetch_add(&c->stats.busy, 1);
        rc = wait_and_acquire(c, h, opts->lease_ms, deadline, &a, a.pttl, gen);
    } else if (rc == DLOCK_BUSY) {
        atomic_fetch_add(&c->stats.busy, 1);
    }
    if (rc != DLOCK_OK) {
        if (fresh)
            dlock__held_free(h);
        if (rc == DLOCK_BUSY)
            dlock__set_error(c, rc, "%s is held by another owner", name);
        else if (rc == DLOCK_TIMEDOUT)
            dlock__set_error(c, rc, "gave up waiting for %s", name);
        else if (rc == DLOCK_CANCELED)
            dlock__set_error(c, rc, "waiting for %s was cancelled", name);
        return rc;
    }
    pthread_mutex_lock(&c->held_mu);
    h->depth = a.depth;
    h->handles++;
    h->token = a.token;
    h->nodes |= a.nodes;
    h->lease_ms = opts->lease_ms;
    atomic_store(&h->valid_until_ms, a.valid_until);
    if (fresh) {
        h->watchdog = opts->watchdog;
        h->on_lost = opts->on_lost;
        h->on_lost_ud = opts->on_lost_userdata;
        h->id = ++c->held_seq;
        h->next = c->held;
        c->held = h;
    } else if (opts->watchdog && !h->watchdog) {
        h->watchdog = 1;
        h->on_lost = opts->on_lost;
        h->on_lost_ud = opts->on_lost_userdata;
    }
    /* A fair handoff's short lease is confirmed at half of it: a critical
     * section shorter than that never pays the round trip (and with the
     * 2 s handoff lease the watchdog, which looks every second, need not
     * be woken for it). A watchdog lock is renewed at a third. */
    due = dlock__now_ms() + (h->confirm_pending
                                 ? fair_handoff_lease(opts->lease_ms) / 2
                                 : opts->lease_ms / 3);
    h->next_renew_ms = due;
    pthread_mutex_unlock(&c->held_mu);
    atomic_fetch_add(&c->stats.acquisitions, 1);
    if (h->watchdog || h->confirm_pending)
        dlock__watchdog_kick(c, due);
    rc = new_handle(c, h, out);
    if (rc != DLOCK_OK)
        return rc; /* the lease runs out by itself */
    if (opts->watchdog) {
        pthread_mutex_lock(&c->held_mu);
        h->wd_handle = *out;
        pthread_mutex_unlock(&c->held_mu);
    }
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_lock_acquire(dlock_lock **out, dlock_client *c, const char *name,
                       int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    return dlock_lock_acquire_ex(out, c, name, &o);
}

/* Drop handle l of h: one reentry level given back (or all of them when
 * gone); unlink h from the registry when no level is left, and free it
 * once no handle and no watchdog round uses it. */
static void drop_handle(dlock_client *c, dlock__held *h, dlock_lock *l,
                        int gone)
{
    int free_it;
    pthread_mutex_lock(&c->held_mu);
    h->handles--;
    if (gone)
        h->depth = 0;
    else if (h->depth > 0)
        h->depth--;
    if (h->wd_handle == l)
        h->wd_handle = NULL;
    if (h->depth <= 0 && !h->orphaned) {
        held_unlink(c, h);
        h->orphaned = 1;
    }
    if (h->depth > 0)
        h->releasing = 0;
    free_it = h->orphaned && h->handles <= 0 && h->wd_refs == 0;
    pthread_mutex_unlock(&c->held_mu);
    free(l);
    if (free_it)
        dlock__held_free(h);
}

/* See dlock.h. */
int dlock_lock_release(dlock_lock *l)
{
    dlock_client *c;
    dlock__held *h;
    dlock__result res[DLOCK_MAX_SERVERS];
    int i, confirmed = 0, notowner = 0, rc, depth;

    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;

    pthread_mutex_lock(&c->held_mu);
    depth = h->depth;
    /* From here no renewal result or lost callback may concern this
     * lock (renewal is idempotent on the server: an extend that lands
     * after the delete finds no owner and changes nothing). */
    if (depth <= 1)
        h->releasing = 1;
    if (h->wd_handle == l)
        h->wd_handle = NULL;
    while (h->cb_running)
        pthread_cond_wait(&c->held_cv, &c->held_mu);
    pthread_mutex_unlock(&c->held_mu);
    if (atomic_load(&h->state) == DLOCK_LOST || h->orphaned || depth <= 0) {
        int st = atomic_load(&h->state);
        drop_handle(c, h, l, 1);
        return dlock__set_error(c,
                                st == DLOCK_LOST ? DLOCK_LOST : DLOCK_NOT_OWNER,
                                "release: the lock was already lost");
    }
    run_release(c, h, dlock__all_nodes(c), depth, h->token, 0, res);
    for (i = 0; i < c->ns.n; i++) {
        const redisReply *r = res[i].reply;
        if (res[i].status != DLOCK_OK)
            continue;
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > 3)
            dlock__malformed(&c->ns, res, i, "the release script");
        else if (r->integer > 0)
            confirmed++;
        else
            notowner++;
    }
    if (confirmed >= c->ns.quorum)
        rc = DLOCK_OK;
    else if (notowner > c->ns.n - c->ns.quorum ||
             (c->ns.n == 1 && notowner == 1))
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "release %s: not the owner (the lease expired "
                              "or another owner has the lock)",
                              h->name);
    else
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "release");
    dlock__results_clear(res, c->ns.n);
    drop_handle(c, h, l, rc != DLOCK_OK);
    return rc;
}

/* See dlock.h. The registry forgets this level: a later release by this
 * owner in this process would expect one level less. */
void dlock_lock_detach(dlock_lock *l)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->client->held_mu);
    l->held->releasing = 1;
    while (l->held->cb_running)
        pthread_cond_wait(&l->client->held_cv, &l->client->held_mu);
    pthread_mutex_unlock(&l->client->held_mu);
    drop_handle(l->client, l->held, l, 1);
}

/*
 * Extend the leases of locks h[0..n-1] (all on the same client) to their
 * lease_ms from now on every node holding them, in one script call per
 * node. ok[i] is set to DLOCK_OK, DLOCK_NOT_OWNER (a majority says it is
 * gone) or an error class; valid_until is updated on success. Used by
 * dlock_lock_extend and by the watchdog.
 */
void dlock__extend_many(dlock_client *c, dlock__held **hs,
                        const int64_t *leases, int n, int *ok)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    const char **keys = calloc((size_t)n, sizeof *keys);
    size_t *keylens = calloc((size_t)n, sizeof *keylens);
    const char **args = calloc((size_t)n * 2, sizeof *args);
    size_t *arglens = calloc((size_t)n * 2, sizeof *arglens);
    char(*sl)[24] = calloc((size_t)n, sizeof *sl);
    int64_t t0, maxlease = 0;
    int i, j;
    dlock__cmd cmd;

    if (keys == NULL || keylens == NULL || args == NULL || arglens == NULL ||
        sl == NULL) {
        for (i = 0; i < n; i++)
            ok[i] = DLOCK_ENOMEM;
        goto out;
    }
    for (i = 0; i < n; i++) {
        keys[i] = hs[i]->key;
        keylens[i] = hs[i]->keylen;
        dlock__fmt_i64(sl[i], leases[i]);
        args[2 * i] = hs[i]->owner;
        arglens[2 * i] = strlen(hs[i]->owner);
        args[2 * i + 1] = sl[i];
        arglens[2 * i + 1] = strlen(sl[i]);
        if (leases[i] > maxlease)
            maxlease = leases[i];
    }
    cmd = (dlock__cmd){.script = DLOCK__S_EXTEND,
                       .nkeys = n,
                       .keys = keys,
                       .keylens = keylens,
                       .nargs = 2 * n,
                       .args = args,
                       .arglens = arglens};
    t0 = dlock__now_ms();
    dlock__run(c, dlock__all_nodes(c), &cmd, dlock__deadline(c, maxlease), res);
    for (j = 0; j < c->ns.n; j++) {
        const redisReply *r = res[j].reply;
        size_t k;
        int bad = 0;
        if (res[j].status != DLOCK_OK)
            continue;
        bad = r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n;
        for (k = 0; !bad && k < r->elements; k++)
            bad = r->element[k]->type != REDIS_REPLY_INTEGER;
        if (bad)
            dlock__malformed(&c->ns, res, j, "the extend script");
    }
    for (i = 0; i < n; i++) {
        int yes = 0, no = 0;
        int64_t valid;
        for (j = 0; j < c->ns.n; j++) {
            const redisReply *r = res[j].reply;
            if (res[j].status != DLOCK_OK || r == NULL ||
                r->type != REDIS_REPLY_ARRAY || (size_t)i >= r->elements)
                continue;
            if (r->element[i]->type == REDIS_REPLY_INTEGER &&
                r->element[i]->integer == 1)
                yes++;
            else
                no++;
        }
        valid = t0 + leases[i] - drift_of(c, leases[i]);
        if (yes >= c->ns.quorum && valid > dlock__now_ms()) {
            atomic_store(&hs[i]->valid_until_ms, valid);
            ok[i] = DLOCK_OK;
        } else if (no > c->ns.n - c->ns.quorum) {
            ok[i] = DLOCK_NOT_OWNER;
        } else if (yes >= c->ns.quorum) {
            /* Extended, but the answer came too late to vouch for any
             * validity: not a success. */
            ok[i] = dlock__set_error(c, DLOCK_ETIMEDOUT,
                                     "extend %s: the answer took longer "
                                     "than the lease",
                                     hs[i]->name);
        } else {
            ok[i] = dlock__fail_step(
                c, res, dlock__all_nodes(c),
                c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM, "extend");
        }
    }
    dlock__results_clear(res, c->ns.n);
out:
    free(keys);
    free(keylens);
    free(args);
    free(arglens);
    free(sl);
}

/* See dlock.h. */
int dlock_lock_extend(dlock_lock *l, int64_t lease_ms)
{
    dlock_client *c;
    dlock__held *h;
    int ok;
    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;
    if (lease_ms <= 0)
        return dlock__set_error(c, DLOCK_EINVAL, "lease_ms must be > 0");
    if (atomic_load(&h->state) == DLOCK_LOST)
        return dlock__set_error(c, DLOCK_LOST, "extend: the lease was lost");
    dlock__extend_many(c, &h, &lease_ms, 1, &ok);
    if (ok == DLOCK_OK) {
        pthread_mutex_lock(&c->held_mu);
        h->lease_ms = lease_ms;
        h->next_renew_ms = dlock__now_ms() + lease_ms / 3;
        pthread_mutex_unlock(&c->held_mu);
    } else if (ok == DLOCK_NOT_OWNER) {
        dlock__set_error(c, ok, "extend %s: not the owner (expired or taken)",
                         h->name);
    }
    return ok;
}

/* See dlock.h. */
uint64_t dlock_lock_token(const dlock_lock *l)
{
    return l != NULL ? l->held->token : 0;
}

/* See dlock.h. */
int64_t dlock_lock_validity_ms(const dlock_lock *l)
{
    int64_t left;
    if (l == NULL || atomic_load(&l->held->state) != DLOCK_OK)
        return 0;
    left = atomic_load(&l->held->valid_until_ms) - dlock__now_ms();
    return left > 0 ? left : 0;
}

/* See dlock.h. */
int dlock_lock_status(const dlock_lock *l)
{
    if (l == NULL)
        return DLOCK_EINVAL;
    if (atomic_load(&l->held->state) == DLOCK_LOST)
        return DLOCK_LOST;
    return dlock_lock_validity_ms(l) > 0 ? DLOCK_OK : DLOCK_NOT_OWNER;
}

/* See dlock.h. */
const char *dlock_lock_name(const dlock_lock *l)
{
    return l != NULL ? l->held->name : "";
}

/* See dlock.h. */
const char *dlock_lock_owner(const dlock_lock *l)
{
    return l != NULL ? l->held->owner : "";
}

/* See dlock.h. */
int dlock_with_lock(dlock_client *c, const char *name,
                    const dlock_acquire_options *opts,
                    int (*fn)(dlock_lock *, void *), void *ud, int *fn_result)
{
    dlock_lock *l;
    int rc, r;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (fn == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "fn is NULL");
    rc = dlock_lock_acquire_ex(&l, c, name, opts);
    if (rc != DLOCK_OK)
        return rc;
    r = fn(l, ud);
    if (fn_result != NULL)
        *fn_result = r;
    return dlock_lock_release(l);
}

/* Check a resource key for the fenced calls. */
static int check_key(const dlock_client *c, const char *key)
{
    size_t n;
    if (key == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "key is NULL");
    n = strlen(key);
    if (n == 0 || n > DLOCK_KEY_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "key must be 1 to %d bytes (got %zu)",
                                DLOCK_KEY_MAX, n);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_fenced_set(dlock_client *c, const char *key, uint64_t token,
                     const void *value, size_t len)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL && len > 0)
        return dlock__set_error(c, DLOCK_EINVAL, "value is NULL");
    if (token == 0 || token > (1ULL << 53))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "token must be 1 to 2^53 (got %" PRIu64 ")",
                                token);
    dlock__cmd_begin(&b, DLOCK__S_FENCED_SET);
    dlock__cmd_key(&b, key, strlen(key));
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg(&b, value != NULL ? value : "", len);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced set");
    } else if (acquire_kind(res[0].reply) == 1 ||
               (res[0].reply->type == REDIS_REPLY_ARRAY &&
                dlock__elem_int(res[0].reply, 0) == 1)) {
        rc = DLOCK_OK;
    } else if (res[0].reply->type == REDIS_REPLY_ARRAY &&
               res[0].reply->elements == 2) {
        rc = dlock__set_error(c, DLOCK_STALE,
                              "fenced set %s: token %" PRIu64
                              " is older than %lld",
                              key, token, dlock__elem_int(res[0].reply, 1));
    } else {
        rc = dlock__set_error(c, DLOCK_EPROTO, "fenced set: unexpected reply");
    }
    dlock__results_clear(res, c->ns.n);
    return rc;
}

/* See dlock.h. */
int dlock_fenced_get(dlock_client *c, const char *key, char **value,
                     size_t *len, uint64_t *fence)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    const redisReply *r;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL || len == NULL || fence == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "NULL out-parameter");
    *value = NULL;
    *len = 0;
    *fence = 0;
    dlock__cmd_begin(&b, DLOCK__S_FENCED_GET);
    dlock__cmd_key(&b, key, strlen(key));
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced get");
        dlock__results_clear(res, c->ns.n);
        return rc;
    }
    r = res[0].reply;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        dlock__results_clear(res, c->ns.n);
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced get: unexpected reply");
    }
    if (r->element[0]->type == REDIS_REPLY_STRING) {
        *value = malloc(r->element[0]->len + 1);
        if (*value == NULL) {
            dlock__results_clear(res, c->ns.n);
            return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
        }
        memcpy(*value, r->element[0]->str, r->element[0]->len);
        (*value)[r->element[0]->len] = '\0';
        *len = r->element[0]->len;
    }
    if (r->element[1]->type == REDIS_REPLY_STRING)
        *fence = strtoull(r->element[1]->str, NULL, 10);
    dlock__results_clear(res, c->ns.n);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_lock_inspect(dlock_client *c, const char *name, dlock_info *out)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__held *h;
    dlock__cmdbuf b;
    int i, answered = 0, rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    out->ttl_ms = -1;
    out->waiters = -1;
    h = held_new(c, name, "");
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    dlock__cmd_begin(&b, DLOCK__S_INSPECT);
    dlock__cmd_key(&b, h->key, h->keylen);
    dlock__cmd_key(&b, h->fkey, h->fkeylen);
    dlock__cmd_key(&b, h->qkey, h->qkeylen);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    for (i = 0; i < c->ns.n; i++) {
        const redisReply *r = res[i].reply;
        const redisReply *f;
        long long pttl;
        uint64_t n;
        size_t k;
        int bad;
        if (res[i].status != DLOCK_OK)
            continue;
        /* {pttl, {owner, count, ...}, token, queue length}: check every
         * type before reading anything. */
        bad = r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
              r->element[0]->type != REDIS_REPLY_INTEGER ||
              r->element[1]->type != REDIS_REPLY_ARRAY ||
              r->element[2]->type != REDIS_REPLY_INTEGER ||
              r->element[3]->type != REDIS_REPLY_INTEGER ||
              r->element[1]->elements % 2 != 0;
        for (k = 0; !bad && k < r->element[1]->elements; k++)
            bad = r->element[1]->element[k]->type != REDIS_REPLY_STRING;
        if (bad) {
            dlock__malformed(&c->ns, res, i, "the inspect script");
            continue;
        }
        answered++;
        pttl = dlock__elem_int(r, 0);
        f = r->element[1];
        n = (uint64_t)dlock__elem_int(r, 2);
        if (n > out->last_token)
            out->last_token = n;
        if (dlock__elem_int(r, 3) > out->waiters)
            out->waiters = dlock__elem_int(r, 3);
        if (pttl >= 0 && f->type == REDIS_REPLY_ARRAY && f->elements >= 2) {
            out->nodes_holding++;
            out->held = 1;
            if (out->ttl_ms < 0 || pttl < out->ttl_ms)
                out->ttl_ms = pttl;
            snprintf(out->owner, sizeof out->owner, "%.*s",
                     (int)f->element[0]->len, f->element[0]->str);
            out->reentry = strtoll(f->element[1]->str, NULL, 10);
        }
    }
    if (answered < c->ns.quorum)
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "inspect");
    else
        rc = DLOCK_OK;
    dlock__results_clear(res, c->ns.n);
    dlock__held_free(h);
    return rc;
}

/* See dlock.h. */
int dlock_lock_adopt(dlock_lock **out, dlock_client *c, const char *name,
                     const char *owner, uint64_t token)
{
    dlock_info info;
    dlock__held *h;
    int rc;

    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL || owner == NULL || owner[0] == '\0' ||
        strlen(owner) >= sizeof info.owner)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "adopt: out and a valid owner are required");
    rc = dlock_lock_inspect(c, name, &info);
    if (rc != DLOCK_OK)
        return rc;
    if (!info.held || strcmp(info.owner, owner) != 0 ||
        info.nodes_holding < c->ns.quorum)
        return dlock__set_error(c, DLOCK_NOT_OWNER, "adopt %s: not held by %s",
                                name, owner);
    h = held_new(c, name, owner);
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    h->adopted = 1; /* never re-entered by a thread of ours */
    h->depth = (int)info.reentry;
    h->handles = 1;
    h->token = token != 0 ? token : info.last_token;
    h->nodes = dlock__all_nodes(c);
    h->lease_ms = info.ttl_ms;
    atomic_store(&h->valid_until_ms,
                 dlock__now_ms() + info.ttl_ms - drift_of(c, info.ttl_ms));
    pthread_mutex_lock(&c->held_mu);
    h->id = ++c->held_seq;
    h->next = c->held;
    c->held = h;
    pthread_mutex_unlock(&c->held_mu);
    return new_handle(c, h, out);
}
