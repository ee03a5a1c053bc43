/*
 * acquire.c - taking a lock: one attempt (send the acquire script to every
 * node, tally the answers, decide, then raise the fence or give back what
 * was taken), and the waiting loop over attempts with one helper per wait
 * strategy (spin, notify, fair).
 *
 * An attempt's decision is pure (dlock__acquire_tally, _verdict,
 * _undo_mask; acquire.h) and unit-tested; attempt_once() is the I/O
 * around it and does not block beyond one step, so a non-blocking API can
 * reuse it. One code path serves a single server (quorum 1) and Redlock.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acquire.h"
#include "cluster_delay.h"
#include "core.h"
#include "held.h"
#include "holder.h"
#include "kind.h"
#include "lock.h"
#include "notify.h"
#include "rw_leave.h"
#include "watchdog.h"
#include "withdraw.h"

/* Fair mode: a queued waiter drops out this long after its last refresh,
 * and refreshes at a third of it. */
#define FAIR_WAITER_TTL_MS DLOCK__FAIR_WAITER_TTL_MS

/* After the server refused our subscription (ACL NOPERM), waiters poll
 * and do not ask again for this long. */
#define NOSUB_RETRY_MS 10000

/* The modes of the acquire script: plain, fair without joining the queue
 * (respects it), fair joining or refreshing its place in the queue. */
enum { FAIR_NONE, FAIR_TRY, FAIR_QUEUE, PLAIN_WAITING };

/* What an attempt got, for the caller to record in the held record. */
typedef struct attempt {
    uint64_t token;
    int depth;
    int64_t pttl;   /* BUSY: how long the holder's lease still runs */
    uint64_t nbusy; /* BUSY, fair queue: the last token granted then */
    int ahead;      /* BUSY: free, but another live fair waiter is first */
    int64_t valid_until;
    uint64_t nodes; /* nodes that granted */
    int split;      /* Redlock: some nodes granted, too few (undone) */
} attempt;

/* ---- the decision (pure) ------------------------------------------------ */

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

/* See acquire.h. */
void dlock__acquire_tally(dlock__tally *t, const dlock__result *res, int n)
{
    int i, first = 1;
    memset(t, 0, sizeof *t);
    t->pttl = -1;
    for (i = 0; i < n; i++) {
        uint64_t bit = 1ULL << i;
        const redisReply *r = res[i].reply;
        int k;
        if (res[i].status != DLOCK_OK) {
            /* A request that never left (refused connect) took nothing. */
            if (res[i].sent)
                t->unknown |= bit;
            continue;
        }
        k = acquire_kind(r);
        if (k == 1) {
            uint64_t tok = (uint64_t)dlock__elem_int(r, 1);
            t->granted++;
            t->gmask |= bit;
            if (!first && tok != t->tmax)
                t->tokens_differ = 1;
            if (first || tok > t->tmax)
                t->tmax = tok;
            first = 0;
            t->depth = (int)dlock__elem_int(r, 2);
        } else if (k == 0) {
            int64_t p = dlock__elem_int(r, 1);
            t->busy++;
            if (p > 0 && (t->pttl < 0 || p < t->pttl))
                t->pttl = p;
            else if (p == -2)
                t->ahead = 1;
            if (r->elements > 2 && (uint64_t)dlock__elem_int(r, 2) > t->nbusy)
                t->nbusy = (uint64_t)dlock__elem_int(r, 2);
        } else if (k == -1) {
            t->gone++;
        } else {
            t->bad |= bit;
            t->unknown |= bit;
        }
    }
}

/* See acquire.h. */
dlock__verdict dlock__acquire_verdict(const dlock__tally *t, int quorum,
                                      int depth, int64_t validity_ms)
{
    if (t->granted >= quorum && validity_ms > 0)
        return DLOCK__V_GRANTED;
    if (t->gone > 0 && depth > 0 && t->granted < quorum)
        return DLOCK__V_NOT_OWNER;
    if (t->busy > 0 && t->granted + t->busy + t->gone >= quorum)
        return DLOCK__V_BUSY;
    if (t->granted >= quorum)
        return DLOCK__V_TOO_LATE;
    return DLOCK__V_FAILED;
}

/* See acquire.h. Giving back partial grants and whatever a lost reply may
 * have taken, at once, keeps leftovers from blocking the next attempt
 * (ours or another client's). */
uint64_t dlock__acquire_undo_mask(const dlock__tally *t, dlock__verdict v,
                                  int n, int depth)
{
    if (depth != 0 && t->granted == 0)
        return 0;
    if (v == DLOCK__V_BUSY && n == 1)
        return 0;
    return t->gmask | t->unknown;
}

/* ---- one attempt (I/O) -------------------------------------------------- */

/* The four keys of a lock's acquire and fair-leave scripts: the lock, its
 * fence, its fair queue and the queue's deadlines. */
static void lock_keys(dlock__cmdbuf *b, const dlock__held *h, int nkeys)
{
    dlock__cmd_key(b, h->k.key, h->k.keylen);
    dlock__cmd_key(b, h->k.fkey, h->k.fkeylen);
    if (nkeys > 2)
        dlock__cmd_key(b, h->k.qkey, h->k.qkeylen);
    if (nkeys > 3)
        dlock__cmd_key(b, h->k.qtkey, h->k.qtkeylen);
}

/* The acquire script's command for h in mode fair. Each mode sends only
 * the keys and arguments it reads (acquire.lua lists them): a plain
 * single-server acquire is 2 keys and 3 arguments, a fair try 3 and 4,
 * which keeps the hot path short to send and parse. */
static void acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__held *h, int64_t lease_ms, int fair,
                        uint64_t ticket)
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
    lock_keys(b, h, fair == FAIR_QUEUE ? 4 : fair == FAIR_TRY ? 3 : 2);
    dlock__cmd_arg(b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(b, lease_ms);
    dlock__cmd_arg_i64(b, h->depth);
    if (fair != FAIR_NONE || hint != 0)
        dlock__cmd_arg(b,
                       fair == FAIR_QUEUE ? "2"
                       : fair == FAIR_TRY ? "1"
                                          : "0",
                       1);
    if (hint != 0 || fair == FAIR_QUEUE || fair == PLAIN_WAITING)
        dlock__cmd_arg_i64(b, hint);
    if (fair == PLAIN_WAITING) {
        /* A waiting writer: readers holding the name let no new reader
         * in (acquire.lua, ARGV[8]). Not on the first try. */
        dlock__cmd_arg(b, "0", 1);
        dlock__cmd_arg(b, "0", 1);
        dlock__cmd_arg(b, "1", 1);
    } else if (fair == FAIR_QUEUE) {
        dlock__cmd_arg_i64(b, FAIR_WAITER_TTL_MS);
        dlock__cmd_arg_u64(b, ticket);
    }
    dlock__acquire_retention_args(b, c);
    dlock__cmd_durable(c, &b->cmd);
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
    dlock__cmd_key(&b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg_i64(&b, dlock__fence_keep_ms(c));
    dlock__run(c, mask, &b.cmd,
               dlock__deadline_by(c, h->lease_ms, h->attempt_end_ms), res);
    for (i = 0; i < c->ns.n; i++)
        if ((mask & (1ULL << i)) && res[i].status == DLOCK_OK &&
            res[i].reply->type == REDIS_REPLY_INTEGER &&
            (uint64_t)res[i].reply->integer >= token)
            ok++;
    dlock__results_clear(res, c->ns.n);
    return ok >= c->ns.quorum ? DLOCK_OK : DLOCK_NO_QUORUM;
}

/* The status (and message) for verdict v of an attempt on h sent at t0,
 * running the fencing step when a Redlock's granting nodes disagree on
 * the token. DLOCK_OK fills the grant into *a. */
static int decide(dlock_client *c, dlock__held *h, int64_t lease_ms,
                  const dlock__tally *t, dlock__verdict v, int64_t t0,
                  int64_t elapsed, const dlock__result *res, attempt *a)
{
    int64_t drift = dlock__drift(c, lease_ms);
    switch (v) {
    case DLOCK__V_GRANTED:
        if (c->ns.n > 1 && t->tokens_differ &&
            raise_fence(c, h, t->gmask, t->tmax) != DLOCK_OK)
            return dlock__set_error(c, DLOCK_NO_QUORUM,
                                    "acquire %s: could not record the "
                                    "fencing token on a majority",
                                    h->k.name);
        if (lease_ms - (dlock__now_ms() - t0) - drift > 0) {
            a->token = t->tmax;
            a->nodes = t->gmask;
            a->valid_until = t0 + lease_ms - drift;
            return DLOCK_OK;
        }
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: validity used up before the "
                                "majority answered",
                                h->k.name);
    case DLOCK__V_NOT_OWNER:
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "acquire %s: the earlier hold of this owner "
                                "has expired",
                                h->k.name);
    case DLOCK__V_BUSY:
        return DLOCK_BUSY;
    case DLOCK__V_TOO_LATE:
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: validity used up (lease %" PRId64
                                " ms, took %" PRId64 " ms)",
                                h->k.name, lease_ms, elapsed);
    case DLOCK__V_FAILED:
    default:
        if (c->ns.n == 1)
            return dlock__fail_step(c, res, 1, res[0].status, "acquire");
        return dlock__fail_step(c, res, dlock__all_nodes(c), DLOCK_NO_QUORUM,
                                "acquire");
    }
}

/* Redlock: an acquire is certain once a majority granted (a failure is
 * waited out: the nodes still out may have queued us, or granted). ud:
 * the quorum. */
static int granted_enough(const dlock__result *res, uint64_t waiting, int n,
                          const void *ud)
{
    int i, ok = 0;
    for (i = 0; i < n; i++)
        if (!(waiting & (1ULL << i)) && res[i].status == DLOCK_OK &&
            acquire_kind(res[i].reply) == 1)
            ok++;
    return ok >= *(const int *)ud;
}

/* After a Redlock attempt: the connections of nodes not waited for stay
 * with the hold (h->pins); returns the mask of those nodes. */
static uint64_t keep_pins(dlock_client *c, dlock__held *h, dlock__conn **pins,
                          const dlock__result *res)
{
    uint64_t pend = 0;
    int i;
    for (i = 0; i < c->ns.n; i++) {
        if (res[i].pending)
            pend |= 1ULL << i;
        if (pins[i] != NULL && h->pins == NULL)
            h->pins = calloc((size_t)c->ns.n, sizeof *h->pins);
        if (pins[i] != NULL && h->pins != NULL) {
            h->pins[i] = pins[i];
        } else if (pins[i] != NULL) {
            /* Out of memory: closed, which the server sees after the
             * request (it reads before it notices the close). */
            dlock__node_put(&c->ns, i, pins[i], 0);
        }
    }
    return pend;
}

/*
 * One acquire attempt on every node, in mode fair (FAIR_NONE, FAIR_TRY,
 * FAIR_QUEUE; ticket: the waiter's place in the queue, 0 for the
 * server's clock). Fills *a. Returns DLOCK_OK, DLOCK_BUSY (a->pttl set),
 * DLOCK_NOT_OWNER (our earlier hold expired: reentrant acquire),
 * DLOCK_NO_QUORUM or an error. Whatever a failed attempt may have taken
 * is given back before it returns; a queued Redlock waiter goes back
 * into the queue at its ticket there, so a split vote costs it nothing
 * of its place.
 */
static int attempt_once(dlock_client *c, dlock__held *h, int64_t lease_ms,
                        int fair, uint64_t ticket, attempt *a)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__conn *pins[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    dlock__tally t;
    dlock__verdict v;
    int64_t t0, elapsed;
    uint64_t undo, mask, withdrawn, pend = 0;
    long long minacks = -1;
    int i, rc;

    memset(a, 0, sizeof *a);
    /* The lock-delay: no fresh grant from a master that may have
     * forgotten grants (failover, restart). */
    mask = dlock__askable_nodes(c, h, h->depth == 0, &a->pttl);
    if (mask == 0)
        return dlock__lock_delay_error(c, h, a->pttl);
    acquire_cmd(&b, c, h, lease_ms, fair, ticket);
    if (c->ns.n > 1) {
        /* A node still out keeps its connection pinned to this hold, so
         * that the hold's next request there (its release, an undo, a
         * reentry) comes after it. */
        memset(pins, 0, sizeof pins);
        if (h->pins != NULL) {
            memcpy(pins, h->pins, (size_t)c->ns.n * sizeof *pins);
            free(h->pins);
            h->pins = NULL;
        }
        b.cmd.pins = pins;
        b.cmd.pin_out = 1;
        /* Done as soon as a majority granted, but not with wait_replicas:
         * a grant counts only once its WAIT answered, which is read last
         * on the connection, so the early return is off then. */
        if (c->ns.wait_replicas == 0) {
            b.cmd.enough = granted_enough;
            b.cmd.enough_ud = &c->ns.quorum;
        }
    }
    t0 = dlock__now_ms();
    /* The whole attempt ends within the command timeout (dlock.h): the
     * step, a retry on a fresh connection, the fencing round, the undo. */
    h->attempt_end_ms = t0 + c->opts.command_timeout_ms;
    dlock__run(c, mask, &b.cmd,
               dlock__deadline_by(c, lease_ms, h->attempt_end_ms), res);
    if (c->ns.n > 1)
        pend = keep_pins(c, h, pins, res);
    dlock__acquire_tally(&t, res, c->ns.n);
    for (i = 0; i < c->ns.n; i++)
        if (t.bad & (1ULL << i))
            dlock__malformed(&c->ns, res, i, "the acquire script");
    withdrawn = dlock__withdraw_grants(c, h, h->depth == 0, &t, res, &minacks);
    a->pttl = t.pttl;
    a->nbusy = t.nbusy;
    a->ahead = t.ahead;
    a->depth = t.depth;
    elapsed = dlock__now_ms() - t0;
    v = dlock__acquire_verdict(&t, c->ns.quorum, h->depth,
                               lease_ms - elapsed - dlock__drift(c, lease_ms));
    if (withdrawn != 0 && v != DLOCK__V_GRANTED && v != DLOCK__V_BUSY)
        rc = dlock__withdrawn_error(c, h, withdrawn, minacks, &a->pttl);
    else
        rc = decide(c, h, lease_ms, &t, v, t0, elapsed, res, a);
    dlock__results_clear(res, c->ns.n);
    if (rc == DLOCK_OK)
        return DLOCK_OK;
    a->split = c->ns.n > 1 && t.granted > 0;
    undo = dlock__acquire_undo_mask(&t, v, c->ns.n, h->depth);
    if (undo != 0)
        dlock__give_back(c, h, undo, t.tmax, lease_ms,
                         fair == FAIR_QUEUE && c->ns.n > 1 ? ticket : 0,
                         (undo & t.unknown & ~pend) != 0);
    else
        dlock__held_drop_pins(c, h);
    return rc;
}

/* Fair mode, giving up (deadline or cancel): leave the queue on every
 * node; where the lock was handed to us in the meantime, pass it on.
 * Returns rc unchanged. */
static int fair_leave(dlock_client *c, dlock__held *h, int rc)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    uint64_t mask = 0, tok = 0;
    int i;
    dlock__cmd_begin(&b, DLOCK__S_FAIR_LEAVE);
    lock_keys(&b, h, 4);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    h->attempt_end_ms = dlock__now_ms() + c->opts.command_timeout_ms;
    dlock__run(c, dlock__all_nodes(c), &b.cmd,
               dlock__deadline_by(c, 0, h->attempt_end_ms), res);
    for (i = 0; i < c->ns.n; i++)
        if (res[i].status == DLOCK_OK &&
            dlock__elem_int(res[i].reply, 0) == 1) {
            uint64_t t = (uint64_t)dlock__elem_int(res[i].reply, 1);
            mask |= 1ULL << i;
            if (t > tok)
                tok = t;
        }
    dlock__results_clear(res, c->ns.n);
    /* Only a fresh hold can have been handed the lock: a reentrant one
     * (waiting through an outage) finds its own earlier levels, which are
     * not to be given back. */
    if (mask != 0 && h->depth == 0)
        dlock__undo_acquire(c, h, mask, 1, tok, DLOCK__FAIR_HANDOFF_MS, 0, 0);
    return rc;
}

/* ---- waiting ------------------------------------------------------------ */

/* A waiting acquire on a Sentinel master retries through errors that a
 * failover explains for at most this long in a row. */
#define OUTAGE_RETRY_MS 60000

/* 1 when a waiting acquire should retry after rc rather than return it:
 * with Sentinel, the errors of a master going away or being replaced
 * (refused or dropped connections, timeouts, READONLY, no master named
 * yet) last until the sentinels have promoted a replica. */
static int outage_retryable(const dlock_client *c, int rc)
{
    return c->ns.kind == DLOCK__TOPO_SENTINEL &&
           (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ESERVER);
}

/* One blocking acquire's wait: what the strategy helpers share. */
typedef struct waiting {
    dlock_client *c;
    dlock__held *h;
    int64_t lease_ms;
    int64_t deadline;     /* monotonic, -1: none */
    uint64_t gen;         /* cancel generation at the start */
    int strategy;         /* DLOCK_WAIT_*; notify falls back to spin */
    dlock__waiter *w;     /* subscription, NULL without */
    int round;            /* spin backoff round */
    int64_t pttl;         /* the holder's lease left, as last reported */
    int64_t sent;         /* when the last attempt was sent (monotonic) */
    uint64_t nbusy;       /* fair: the last token granted, as it saw */
    uint64_t ticket;      /* fair, Redlock: the place in every node's queue */
    int polling;          /* notifications refused (ACL): polling instead */
    int64_t outage_since; /* first error of a retried streak, 0: none */
    int outage_rc;        /* its last error */
} waiting;

/* The jittered spin delay for round n: uniform in [d/2, d], d doubling
 * from spin_min_ms to spin_max_ms. */
static int64_t spin_delay(const dlock_client *c, int round)
{
    return dlock__backoff_ms(c->opts.spin_min_ms, c->opts.spin_max_ms, round);
}

/* The end of a wait: the earlier of the caller's deadline and `until`. */
static int64_t min_deadline(int64_t deadline, int64_t until)
{
    if (deadline < 0)
        return until;
    return until < deadline ? until : deadline;
}

/* Sleep until `until` (capped by the deadline) on the client's cancel
 * condition. 0 slept, DLOCK_CANCELED. */
static int spin_sleep(waiting *x, int64_t until)
{
    return dlock__sleep_cancelable(x->c, x->gen,
                                   min_deadline(x->deadline, until));
}

/* Spin: back off with jitter, never past the holder's lease. */
static int sleep_spin(waiting *x)
{
    int64_t now = dlock__now_ms();
    int64_t until = now + spin_delay(x->c, x->round++);
    if (x->pttl > 0 && now + x->pttl < until)
        until = now + x->pttl;
    return spin_sleep(x, until);
}

/* Notify: sleep until a release is announced or the holder's lease would
 * have run out. After a Redlock split vote back off with jitter instead:
 * the contenders' undos wake everyone at once, and retrying together
 * splits again. 1 woken, 0 slept, DLOCK_CANCELED. */
static int sleep_notify(waiting *x, const attempt *a)
{
    int64_t now = dlock__now_ms();
    if (a->split)
        return spin_sleep(x, now + spin_delay(x->c, x->round++));
    return dlock__notify_wait(
        x->w,
        min_deadline(x->deadline,
                     now + (x->pttl > 0 ? x->pttl : x->c->opts.spin_max_ms)));
}

/* A handoff message for us (one server), read after our last attempt:
 * when may we take it without asking the server? The release that handed
 * it set a lease of hl from its own time, which we do not know: the
 * message may have waited in our socket while this process was paused
 * (SIGSTOP, a VM freeze), for longer than hl. Only two things are sure.
 * A token not above the last one granted when our attempt ran (nbusy)
 * was granted before that attempt, which would have confirmed it had it
 * still been ours: it has lapsed. A newer one was granted after the
 * attempt was sent (x->sent), so its lease runs at least until x->sent +
 * hl. Returns the validity end from that, or -1 when the handoff is
 * stale or too little of it is left to use (the next attempt confirms
 * it with a full lease if it is still ours). */
static int64_t handoff_valid_until(const waiting *x, uint64_t token, int64_t hl)
{
    int64_t until = x->sent + hl - dlock__drift(x->c, hl);
    if (token <= x->nbusy || until - dlock__now_ms() < hl / 4)
        return -1;
    return until;
}

/* Fair: stay queued, sleeping until the handoff message (one server),
 * our wake-up (Redlock: a majority of nodes freed the lock and have us
 * first) or the next refresh of our place (a third of the waiter TTL).
 * After a Redlock split vote, retry after a short jittered pause (or
 * sooner when woken): the other side gives its nodes back at once.
 * When the lock was free but another live waiter is ahead, also retry
 * after the spin backoff: nobody hands over a free lock, and a waiter
 * ahead that gives up (its deadline, a cancel) or stops refreshing
 * (dead) wakes nobody; sleeping a whole refresh period then stalls the
 * queue, for good when the waits are no longer than that period (F6 in
 * docs/reliability.md). Without notifications (refused by ACL, or no
 * subscription in time) poll with the spin backoff. 1 when the lock was
 * handed to us (*a filled), 0 slept or woken (try again),
 * DLOCK_CANCELED. */
static int sleep_fair(waiting *x, attempt *a)
{
    int64_t now = dlock__now_ms(), until, hl, valid;
    uint64_t tok;
    int rc;
    until = now + (x->pttl > 0 && !a->ahead ? x->pttl : FAIR_WAITER_TTL_MS / 3);
    if (until > now + FAIR_WAITER_TTL_MS / 3)
        until = now + FAIR_WAITER_TTL_MS / 3;
    if (x->w == NULL || a->split || a->ahead) {
        int64_t d = now + spin_delay(x->c, x->round++);
        if (d < until)
            until = d;
    }
    if (x->w == NULL)
        return spin_sleep(x, until);
    rc = dlock__notify_wait_handoff(x->w, min_deadline(x->deadline, until));
    if (rc != 1)
        return rc;
    if (!dlock__notify_handed(x->w))
        return 0; /* woken: our turn to try */
    /* Handed to us by the release script: the lease it set is short until
     * we confirm (the watchdog does, at half of what is left of it). */
    hl = dlock__fair_handoff_lease(x->lease_ms);
    tok = dlock__notify_handoff_token(x->w);
    valid = handoff_valid_until(x, tok, hl);
    if (valid < 0)
        return 0; /* try again: the attempt confirms it if still ours */
    memset(a, 0, sizeof *a);
    a->token = tok;
    a->depth = 1;
    a->nodes = 1;
    a->valid_until = valid;
    x->h->confirm_pending = 1;
    return 1;
}

/* Subscribe before the next attempt, so that a release between it and
 * the sleep is not missed. Without a subscription (server refuses,
 * timeout) spinning still finds the lock, only later; a fair waiter still
 * refreshes its place, and a refresh finds a handoff made to it. */
static void wait_begin(waiting *x)
{
    dlock_client *c = x->c;
    int fair = x->strategy == DLOCK_WAIT_FAIR;
    int64_t now = dlock__now_ms(), sub_dl = now + c->opts.command_timeout_ms;
    int rc;
    if (x->strategy == DLOCK_WAIT_SPIN)
        return;
    if (atomic_load(&c->nopub) && now < atomic_load(&c->nosub_until_ms)) {
        rc = DLOCK_EAUTH; /* refused moments ago: do not ask again yet */
    } else {
        rc = dlock__notify_begin(c, fair ? x->h->k.hchan : x->h->k.chan,
                                 fair ? x->h->k.hchanlen : x->h->k.chanlen,
                                 fair ? x->h->owner : NULL, &x->w,
                                 min_deadline(x->deadline, sub_dl), x->gen);
        if (rc == DLOCK_EAUTH)
            atomic_store(&c->nosub_until_ms, now + NOSUB_RETRY_MS);
    }
    if (rc != DLOCK_OK) {
        x->w = NULL;
        x->polling = rc == DLOCK_EAUTH;
        if (x->strategy == DLOCK_WAIT_NOTIFY)
            x->strategy = DLOCK_WAIT_SPIN;
    }
}

/* Before each attempt: cancelled, past the deadline, or (notify) not our
 * turn as the process's one contender by then? 1 to go on, else the
 * status to return. */
static int wait_may_try(waiting *x)
{
    int t;
    if (atomic_load(&x->c->cancel_gen) != x->gen)
        return DLOCK_CANCELED;
    if (x->deadline >= 0 && dlock__now_ms() >= x->deadline)
        return DLOCK_TIMEDOUT;
    if (x->w == NULL || x->strategy == DLOCK_WAIT_SPIN)
        return 1;
    t = dlock__notify_turn(x->w, x->deadline);
    return t == 1 ? 1 : t == 0 ? DLOCK_TIMEDOUT : t;
}

/*
 * The waiting loop after an attempt found the lock busy: attempt, and
 * between attempts sleep as the strategy says, until acquired, the
 * deadline, cancellation or an error. pttl: the holder's lease left as
 * the first attempt saw it (-1: unknown). *warn is set when it got the
 * lock without notifications because the server's ACL refuses them.
 */
static int acquire_wait(dlock_client *c, dlock__held *h, int64_t lease_ms,
                        int64_t deadline, attempt *a, int64_t pttl,
                        uint64_t gen, int *warn)
{
    waiting x = {.c = c,
                 .h = h,
                 .lease_ms = lease_ms,
                 .deadline = deadline,
                 .gen = gen,
                 .strategy = c->opts.wait_strategy,
                 .pttl = pttl};
    int rc;

    wait_begin(&x);
    for (;;) {
        rc = wait_may_try(&x);
        if (rc != 1)
            break;
        if (x.strategy == DLOCK_WAIT_FAIR && x.ticket == 0 && c->ns.n > 1) {
            /* The place in the queue, the same on every node so that all
             * serve the waiters in one order: the wall clock when this
             * waiter first queues (after it got its process's turn). */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            x.ticket =
                (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
        }
        if (x.strategy == DLOCK_WAIT_FAIR && x.w != NULL)
            /* A handoff read from now on came after this attempt was
             * sent, or is older than the token it reports (nbusy). */
            dlock__notify_handoff_reset(x.w);
        x.sent = dlock__now_ms();
        rc = attempt_once(c, h, lease_ms,
                          x.strategy == DLOCK_WAIT_FAIR ? FAIR_QUEUE
                                                        : PLAIN_WAITING,
                          x.ticket, a);
        if (rc == DLOCK_LOCK_DELAY) {
            /* Wait the delay out (or until the deadline). */
            rc = spin_sleep(&x, dlock__now_ms() + a->pttl);
            if (rc < 0)
                break;
            continue;
        }
        if (outage_retryable(c, rc)) {
            int64_t now = dlock__now_ms();
            if (x.outage_since == 0)
                x.outage_since = now;
            x.outage_rc = rc;
            if (now - x.outage_since >= OUTAGE_RETRY_MS)
                break;
            rc = spin_sleep(&x, now + spin_delay(c, x.round++));
            if (rc < 0)
                break;
            continue;
        }
        x.outage_since = 0;
        if (rc != DLOCK_BUSY)
            break;
        atomic_fetch_add(&c->stats.busy, 1);
        atomic_fetch_add(&c->stats.waits, 1);
        if (a->pttl > 0)
            x.pttl = a->pttl;
        x.nbusy = a->nbusy;
        if (x.strategy == DLOCK_WAIT_SPIN)
            rc = sleep_spin(&x);
        else if (x.strategy == DLOCK_WAIT_FAIR)
            rc = sleep_fair(&x, a);
        else
            rc = sleep_notify(&x, a);
        if (x.strategy == DLOCK_WAIT_FAIR && rc == 1) {
            rc =
                dlock__confirm_handed(c, h, lease_ms, a->token, &a->valid_until,
                                      "handed over by the holder's release");
            break;
        }
        if (rc < 0)
            break;
    }
    if (rc == DLOCK_TIMEDOUT && x.outage_since != 0)
        rc = x.outage_rc; /* its message is the thread's: say the cause */
    if (x.strategy == DLOCK_WAIT_FAIR && rc != DLOCK_OK)
        rc = fair_leave(c, h, rc);
    if (rc == DLOCK_TIMEDOUT || rc == DLOCK_CANCELED)
        dlock__rw_leave(c, h); /* a waiting writer's mark goes with it */
    dlock__notify_end(x.w);
    if (rc == DLOCK_OK && (x.polling || atomic_load(&c->nopub)))
        *warn = 1;
    return rc;
}

/* ---- the API ------------------------------------------------------------ */

/* A semaphore's key is a sorted set, another tool's key anything: the
 * acquire script's hash commands fail on it with WRONGTYPE. Say which
 * plainly (DLOCK_EINVAL, kind.c); other failures keep rc and their
 * message. */
static int wrong_kind(dlock_client *c, const char *name, int rc)
{
    return dlock__lock_kind_error(c, name, rc);
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

/* See dlock.h. */
int dlock_lock_acquire_ex(dlock_lock **out, dlock_client *c, const char *name,
                          const dlock_acquire_options *opts)
{
    dlock_acquire_options defaults;
    char owner[DLOCK_OWNER_MAX];
    dlock__held *h;
    attempt a = {0};
    int rc, fresh = 0, warn = 0, waited = 0;
    int64_t deadline;
    int64_t t_us = dlock__now_us(); /* metrics: time in this call */
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
    rc = dlock__check_name(c, name);
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
    if (c->ns.n > 1 && opts->lease_ms <= dlock__drift(c, opts->lease_ms))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lease_ms %" PRId64 " is not above the clock "
                                "drift allowance",
                                opts->lease_ms);

    dlock__nodes_note_lease(&c->ns, opts->lease_ms);
    gen = atomic_load(&c->cancel_gen);
    deadline = opts->wait_ms < 0 ? -1 : dlock__now_ms() + opts->wait_ms;
    pthread_mutex_lock(&c->held_mu);
    h = dlock__held_find(c, name, pthread_self());
    if (h != NULL && h->k.kind != DLOCK__KIND_LOCK) {
        /* This thread reads NAME (or holds a permit): taking it
         * exclusively would wait for its own read lease. */
        int kind = h->k.kind;
        pthread_mutex_unlock(&c->held_mu);
        return dlock__set_error(
            c, DLOCK_EINVAL,
            kind == DLOCK__KIND_READ
                ? "acquire %s: this thread holds it shared; upgrading to "
                  "exclusive is refused (it deadlocks): release the read "
                  "lock first"
                : "acquire %s: it is a semaphore, not a lock",
            name);
    }
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
        h = dlock__held_new(c, name, owner);
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
        dlock__notify_subscribed(c, h->k.hchan, h->k.hchanlen)) {
        /* This process is contending for the lock again and is still
         * subscribed: queue at once, the try-only attempt would only add
         * a round trip. */
        rc = acquire_wait(c, h, opts->lease_ms, deadline, &a, -1, gen, &warn);
        waited = 1;
    } else {
        rc = attempt_once(c, h, opts->lease_ms,
                          c->opts.wait_strategy == DLOCK_WAIT_FAIR && fresh
                              ? FAIR_TRY
                              : FAIR_NONE,
                          0, &a);
    }
    if (!waited && (rc == DLOCK_LOCK_DELAY || outage_retryable(c, rc)) &&
        opts->wait_ms != 0) {
        rc = acquire_wait(c, h, opts->lease_ms, deadline, &a, -1, gen, &warn);
    } else if (rc == DLOCK_BUSY && opts->wait_ms != 0) {
        atomic_fetch_add(&c->stats.busy, 1);
        rc = acquire_wait(c, h, opts->lease_ms, deadline, &a, a.pttl, gen,
                          &warn);
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
        else if (rc == DLOCK_ESERVER || rc == DLOCK_NO_QUORUM)
            rc = wrong_kind(c, name, rc);
        if (rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT || rc == DLOCK_CANCELED)
            dlock__event(
                c, rc == DLOCK_BUSY ? DLOCK_EVENT_BUSY : DLOCK_EVENT_WAITED,
                name, rc, dlock__now_us() - t_us, 0);
        return rc;
    }
    pthread_mutex_lock(&c->held_mu);
    h->depth = a.depth;
    h->handles++;
    h->token = a.token;
    h->nodes |= a.nodes;
    atomic_store(&h->held_on, a.nodes);
    h->lease_ms = opts->lease_ms;
    atomic_store(&h->valid_until_ms, a.valid_until);
    if (fresh) {
        h->since_us = dlock__now_us();
        h->watchdog = opts->watchdog;
        h->on_lost = opts->on_lost;
        h->on_lost_ud = opts->on_lost_userdata;
        dlock__held_link(c, h);
    } else if (opts->watchdog && !h->watchdog) {
        h->watchdog = 1;
        h->on_lost = opts->on_lost;
        h->on_lost_ud = opts->on_lost_userdata;
    }
    dlock__held_started(c, h, opts->lease_ms, a.valid_until);
    if (fresh)
        dlock__holder_record(c, h);
    t_us = dlock__now_us() - t_us;
    dlock__hist_add(&c->metrics.acquire_wait, t_us);
    dlock__event(c, DLOCK_EVENT_ACQUIRED, name, DLOCK_OK, t_us, h->token);
    if (warn && !atomic_exchange(&c->nopub_warned, 1))
        dlock__set_error(c, DLOCK_OK,
                         "warning: the server refuses this user the lock's "
                         "pub/sub channels (NOPERM), so waiters poll instead "
                         "of being notified; allow them with the ACL rule "
                         "&%s:* (or allchannels)",
                         c->key_prefix);
    return dlock__handle_give(c, h, opts->watchdog, out);
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
