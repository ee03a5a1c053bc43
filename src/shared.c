/*
 * shared.c - holds that several owners have at once: a semaphore's
 * permits (at most N holders) and a read-write lock's readers; the
 * semaphore's limit; the downgrade of a writer to a reader.
 *
 * A permit or a reader is a held record like a lock's (registry.c) with a
 * kind (held.h: DLOCK__KIND_PERMIT, DLOCK__KIND_READ) that makes lock.c
 * release and renew it with its own scripts (sem_*.lua, rw_*.lua); so the
 * handle, release, extend, the watchdog, lost leases and undo are the
 * lock's. What is here: one attempt (the script, then the lock's pure
 * tally and verdict of acquire.h, the Redlock fence round, the undo of
 * what a failed attempt may have taken) and the waiting loop:
 *
 *  - semaphore, DLOCK_WAIT_NOTIFY: a waiter queues in the semaphore's
 *    queue (:q, :qt, deadlines by the server's clock) and sleeps on its
 *    process's handoff channel; a release wakes the first live waiter
 *    only ('h 0 OWNER'), which tries again. No herd.
 *  - semaphore, DLOCK_WAIT_FAIR: the same queue, FIFO: a freed permit is
 *    handed to the first live waiter ('h TOKEN OWNER'), confirmed by the
 *    watchdog as a fair lock's handoff is.
 *  - readers, DLOCK_WAIT_NOTIFY: as the lock's notify (the lock's channel
 *    announces a writer's release and the last reader's).
 *  - DLOCK_WAIT_SPIN: backoff, for both.
 *
 * Beside acquire.c in the layers: -> lock, notify, watchdog, registry,
 * core (and acquire.h's pure decision).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acquire.h"
#include "cluster_delay.h"
#include "core.h"
#include "held.h"
#include "kind.h"
#include "lock.h"
#include "notify.h"
#include "watchdog.h"
#include "withdraw.h"

/* A queued semaphore waiter drops out this long after its last refresh
 * and refreshes at a third of it (as the fair lock's waiters). */
#define WAITER_TTL_MS 3000

/* Modes of sem_acquire.lua; SEM_WAITING is or-ed in for a waiting
 * acquire's later attempts (its ARGV[9]: it waits under the limit stored
 * now, also when that changed while it waited). */
enum { SEM_TRY = 0, SEM_FIFO_TRY = 1, SEM_QUEUE = 2, SEM_FIFO_QUEUE = 3 };
#define SEM_WAITING 4

/* What is asked for. */
typedef struct want {
    int kind;        /* DLOCK__KIND_PERMIT or DLOCK__KIND_READ */
    int64_t limit;   /* a permit: the semaphore's N */
    int ignore_mark; /* a reader: enter while a writer waits */
    int64_t lease_ms;
} want;

/* What an attempt got. */
typedef struct got {
    uint64_t token;
    int64_t pttl;   /* busy: when the first lease ends, -1 unknown */
    uint64_t nbusy; /* busy, queued: the last token granted then */
    int64_t valid_until;
    uint64_t nodes;
    int split; /* Redlock: some nodes granted, too few (undone) */
} got;

/* ---- one attempt -------------------------------------------------------- */

/* The acquire command of w for h in (semaphore) mode: a lock write (WAIT
 * after it with wait_replicas, as a lock's acquire). */
static void attempt_cmd(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__held *h, const want *w, int mode)
{
    if (w->kind == DLOCK__KIND_PERMIT) {
        dlock__cmd_begin(b, DLOCK__S_SEM_ACQUIRE);
        dlock__cmd_key(b, h->k.key, h->k.keylen);
        dlock__cmd_key(b, h->k.fkey, h->k.fkeylen);
        dlock__cmd_key(b, h->k.qkey, h->k.qkeylen);
        dlock__cmd_key(b, h->k.qtkey, h->k.qtkeylen);
        dlock__cmd_arg(b, h->owner, strlen(h->owner));
        dlock__cmd_arg_i64(b, w->lease_ms);
        dlock__cmd_arg_i64(b, w->limit);
        dlock__cmd_arg_i64(b, DLOCK__FENCE_RETENTION_MS);
        dlock__cmd_arg_i64(b, mode & ~SEM_WAITING);
        dlock__cmd_arg_i64(b, WAITER_TTL_MS);
        dlock__cmd_arg(b, h->k.chan, h->k.chanlen);
        dlock__cmd_arg_i64(b, dlock__fair_handoff_lease(w->lease_ms));
        if (mode & SEM_WAITING)
            dlock__cmd_arg(b, "1", 1);
        dlock__cmd_durable(c, &b->cmd);
        return;
    }
    dlock__cmd_begin(b, DLOCK__S_RW_ACQUIRE);
    dlock__cmd_key(b, h->k.key, h->k.keylen);
    dlock__cmd_key(b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_key(b, h->k.rkey, h->k.rkeylen);
    dlock__cmd_arg(b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(b, w->lease_ms);
    dlock__cmd_arg_i64(b, DLOCK__FENCE_RETENTION_MS);
    if (c->ns.n > 1) {
        /* As the lock's: a token hint a little above the wall clock so
         * that the nodes usually agree (it can only raise a token). */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        dlock__cmd_arg_i64(b, (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 +
                                  1000000);
    } else {
        dlock__cmd_arg(b, "0", 1);
    }
    dlock__cmd_arg(b, w->ignore_mark ? "1" : "0", 1);
    dlock__cmd_durable(c, &b->cmd);
}

/* The scripts' refusals: {-2, limit} another limit is stored, {-3, kind}
 * the name is another kind. DLOCK_EINVAL with the message, or DLOCK_OK
 * when no node refused. */
static int refusal(dlock_client *c, const dlock__held *h, const want *w,
                   const dlock__result *res)
{
    int i;
    for (i = 0; i < c->ns.n; i++) {
        const redisReply *r = res[i].reply;
        if (res[i].status != DLOCK_OK || r->type != REDIS_REPLY_ARRAY ||
            r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER)
            continue;
        if (r->element[0]->integer == -2)
            return dlock__set_error(c, DLOCK_EINVAL,
                                    "semaphore %s has limit %lld, not "
                                    "%" PRId64 ": change the limit explicitly "
                                    "(dlock_sem_set_limit, dlock limit)",
                                    h->k.name, dlock__elem_int(r, 1), w->limit);
        if (r->element[0]->integer == -3 &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            const char *what =
                w->kind == DLOCK__KIND_PERMIT ? "semaphore" : "read-write lock";
            const char *is = r->element[1]->str;
            if (strcmp(is, "lock") != 0 && strcmp(is, "semaphore") != 0)
                /* A Redis type: a value dlock did not write. */
                return dlock__foreign_error(c, what, h->k.name, is);
            return dlock__set_error(c, DLOCK_EINVAL, "%s is a %s, not a %s",
                                    h->k.name, is, what);
        }
    }
    return DLOCK_OK;
}

/* Redlock: raise the fence counter on the granting nodes to the token
 * taken (as the lock does: any later winner's majority sees it).
 * DLOCK_OK or DLOCK_NO_QUORUM. */
static int raise_fence(dlock_client *c, const dlock__held *h, uint64_t mask,
                       uint64_t token, int64_t lease_ms)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int i, ok = 0;

    dlock__cmd_begin(&b, DLOCK__S_FENCE_RAISE);
    dlock__cmd_key(&b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg_i64(&b, DLOCK__FENCE_RETENTION_MS);
    dlock__run(c, mask, &b.cmd, dlock__deadline(c, lease_ms), res);
    for (i = 0; i < c->ns.n; i++)
        if ((mask & (1ULL << i)) && res[i].status == DLOCK_OK &&
            res[i].reply->type == REDIS_REPLY_INTEGER &&
            (uint64_t)res[i].reply->integer >= token)
            ok++;
    dlock__results_clear(res, c->ns.n);
    return ok >= c->ns.quorum ? DLOCK_OK : DLOCK_NO_QUORUM;
}

/* The status of verdict v, filling *g on a grant (after the fence round
 * when granting nodes disagree on the token). */
static int decide(dlock_client *c, const dlock__held *h, const want *w,
                  const dlock__tally *t, dlock__verdict v, int64_t t0,
                  const dlock__result *res, got *g)
{
    int64_t drift = dlock__drift(c, w->lease_ms);
    switch (v) {
    case DLOCK__V_GRANTED:
        if (c->ns.n > 1 && t->tokens_differ &&
            raise_fence(c, h, t->gmask, t->tmax, w->lease_ms) != DLOCK_OK)
            return dlock__set_error(c, DLOCK_NO_QUORUM,
                                    "acquire %s: could not record the "
                                    "fencing token on a majority",
                                    h->k.name);
        if (w->lease_ms - (dlock__now_ms() - t0) - drift <= 0)
            return dlock__set_error(c, DLOCK_NO_QUORUM,
                                    "acquire %s: validity used up before "
                                    "the majority answered",
                                    h->k.name);
        g->token = t->tmax;
        g->nodes = t->gmask;
        g->valid_until = t0 + w->lease_ms - drift;
        return DLOCK_OK;
    case DLOCK__V_BUSY:
        return DLOCK_BUSY;
    case DLOCK__V_TOO_LATE:
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: validity used up", h->k.name);
    default:
        if (c->ns.n == 1)
            return dlock__fail_step(c, res, 1, res[0].status, "acquire");
        return dlock__fail_step(c, res, dlock__all_nodes(c), DLOCK_NO_QUORUM,
                                "acquire");
    }
}

/* The nodes where a refused attempt may have taken something: nodes that
 * granted, and requests sent but not answered. */
static uint64_t refused_undo_mask(const dlock_client *c,
                                  const dlock__result *res)
{
    uint64_t m = 0;
    int i;
    for (i = 0; i < c->ns.n; i++)
        if ((res[i].status != DLOCK_OK && res[i].sent) ||
            (res[i].status == DLOCK_OK &&
             dlock__elem_int(res[i].reply, 0) == 1))
            m |= 1ULL << i;
    return m;
}

/* ---- the lock-delay (as a lock's: acquire.c) ----------------------------- */

/*
 * One attempt on every node. DLOCK_OK (*g filled), DLOCK_BUSY (g->pttl),
 * DLOCK_LOCK_DELAY (g->pttl: the delay left), DLOCK_NOT_REPLICATED (with
 * wait_replicas: granted, too few replicas acknowledged it), DLOCK_EINVAL
 * (another limit or kind), DLOCK_NO_QUORUM or an error.
 * Whatever a failed attempt may have taken is given back before it
 * returns (the lock's undo, with this kind's release script).
 */
static int attempt(dlock_client *c, dlock__held *h, const want *w, int mode,
                   got *g)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    dlock__tally t;
    dlock__verdict v;
    int64_t t0, elapsed;
    uint64_t undo, mask, withdrawn;
    long long minacks = -1;
    int i, rc;

    memset(g, 0, sizeof *g);
    g->pttl = -1;
    mask = dlock__askable_nodes(c, h, 1, &g->pttl);
    if (mask == 0)
        return dlock__lock_delay_error(c, h, g->pttl);
    attempt_cmd(&b, c, h, w, mode);
    t0 = dlock__now_ms();
    dlock__run(c, mask, &b.cmd, dlock__deadline(c, w->lease_ms), res);
    rc = refusal(c, h, w, res);
    if (rc != DLOCK_OK) {
        undo = refused_undo_mask(c, res);
        dlock__results_clear(res, c->ns.n);
        if (undo != 0)
            dlock__give_back(c, h, undo, 0, w->lease_ms, 0, 1);
        return rc;
    }
    dlock__acquire_tally(&t, res, c->ns.n);
    for (i = 0; i < c->ns.n; i++)
        if (t.bad & (1ULL << i))
            dlock__malformed(&c->ns, res, i, "the acquire script");
    withdrawn = dlock__withdraw_grants(c, h, 1, &t, res, &minacks);
    g->pttl = t.pttl;
    g->nbusy = t.nbusy;
    elapsed = dlock__now_ms() - t0;
    v = dlock__acquire_verdict(&t, c->ns.quorum, 0,
                               w->lease_ms - elapsed -
                                   dlock__drift(c, w->lease_ms));
    if (withdrawn != 0 && v != DLOCK__V_GRANTED && v != DLOCK__V_BUSY) {
        g->pttl = -1;
        rc = dlock__withdrawn_error(c, h, withdrawn, minacks, &g->pttl);
    } else {
        rc = decide(c, h, w, &t, v, t0, res, g);
    }
    dlock__results_clear(res, c->ns.n);
    if (rc == DLOCK_OK)
        return DLOCK_OK;
    g->split = c->ns.n > 1 && t.granted > 0;
    undo = dlock__acquire_undo_mask(&t, v, c->ns.n, 0);
    if (undo != 0)
        dlock__give_back(c, h, undo, t.tmax, w->lease_ms, 0, 1);
    return rc;
}

/* A semaphore waiter gives up: leave the queue; a permit handed to it
 * meanwhile is released (and so passed on). */
static void sem_leave(dlock_client *c, const dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    dlock__cmd_begin(&b, DLOCK__S_SEM_RELEASE);
    dlock__cmd_key(&b, h->k.key, h->k.keylen);
    dlock__cmd_key(&b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_key(&b, h->k.qkey, h->k.qkeylen);
    dlock__cmd_key(&b, h->k.qtkey, h->k.qtkeylen);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    dlock__cmd_arg(&b, h->k.chan, h->k.chanlen);
    dlock__cmd_arg_i64(&b, DLOCK__FAIR_HANDOFF_MS);
    dlock__cmd_arg(&b, c->opts.wait_strategy == DLOCK_WAIT_FAIR ? "1" : "0", 1);
    dlock__cmd_arg_i64(&b, DLOCK__FENCE_RETENTION_MS);
    dlock__cmd_arg(&b, "1", 1);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    dlock__results_clear(res, c->ns.n);
}

/* ---- waiting ------------------------------------------------------------ */

/* One blocking acquire's wait. */
typedef struct waiting {
    dlock_client *c;
    dlock__held *h;
    const want *w;
    int64_t deadline; /* monotonic, -1: none */
    uint64_t gen;     /* cancel generation at the start */
    int strategy;     /* DLOCK_WAIT_*: notify falls back to spin */
    dlock__waiter *sub;
    int round;
    int64_t pttl;
    int64_t sent;   /* when the last attempt was sent (monotonic) */
    uint64_t nbusy; /* the last token granted, as it saw */
} waiting;

/* The earlier of the caller's deadline and until. */
static int64_t cap(const waiting *x, int64_t until)
{
    return x->deadline >= 0 && x->deadline < until ? x->deadline : until;
}

/* Spin: sleep a jittered backoff (never past the first lease's end) on
 * the client's cancel condition. 0 slept, DLOCK_CANCELED. */
static int sleep_spin(waiting *x)
{
    dlock_client *c = x->c;
    int64_t now = dlock__now_ms(), until;
    until = now + dlock__backoff_ms(c->opts.spin_min_ms, c->opts.spin_max_ms,
                                    x->round++);
    if (x->pttl > 0 && now + x->pttl < until)
        until = now + x->pttl;
    return dlock__sleep_cancelable(c, x->gen, cap(x, until));
}

/* The lock-delay: sleep until it is over (x->pttl from now) on the
 * client's cancel condition, never past the deadline. 0, DLOCK_CANCELED. */
static int sleep_delay(waiting *x)
{
    return dlock__sleep_cancelable(x->c, x->gen,
                                   cap(x, dlock__now_ms() + x->pttl));
}

/* A queued semaphore waiter sleeps until a wake or handoff for it, or its
 * next refresh (a third of the waiter TTL, sooner when a lease ends
 * sooner). 1 with *g filled when a permit was handed to it, 0 to try
 * again, DLOCK_CANCELED. */
static int sleep_sem(waiting *x, got *g)
{
    int64_t now = dlock__now_ms(), step = WAITER_TTL_MS / 3, hl, valid;
    uint64_t tok;
    int rc;
    if (x->pttl > 0 && x->pttl < step)
        step = x->pttl;
    rc = dlock__notify_wait_handoff(x->sub, cap(x, now + step));
    if (rc != 1)
        return rc;
    tok = dlock__notify_handoff_token(x->sub);
    if (tok == 0) {
        dlock__notify_handoff_reset(x->sub); /* woken: try again */
        return 0;
    }
    /* Handed over (FIFO): the handoff lease holds until the watchdog
     * confirms it at half of what is left. It was set by the handing
     * script at a time we do not know (this process may have been paused
     * with the message unread for longer than hl): a token not above the
     * last one granted when our attempt ran (nbusy) is older than that
     * attempt, which would have confirmed it had it still been ours; a
     * newer one was granted after the attempt was sent, so its lease runs
     * at least until x->sent + hl. With too little of that left the next
     * attempt confirms it (with a full lease), if it is still ours. */
    hl = x->w->lease_ms < DLOCK__FAIR_HANDOFF_MS ? x->w->lease_ms
                                                 : DLOCK__FAIR_HANDOFF_MS;
    valid = x->sent + hl - dlock__drift(x->c, hl);
    if (tok <= x->nbusy || valid - dlock__now_ms() < hl / 4)
        return 0;
    memset(g, 0, sizeof *g);
    g->token = tok;
    g->nodes = 1;
    g->valid_until = valid;
    x->h->confirm_pending = 1;
    return 1;
}

/* Subscribe before the next attempt: a semaphore waiter to its process's
 * handoff channel (as the owner a wake names), a reader to the lock's
 * channel. Without a subscription, spin. */
static void wait_begin(waiting *x)
{
    dlock_client *c = x->c;
    int sem = x->w->kind == DLOCK__KIND_PERMIT;
    if (x->strategy == DLOCK_WAIT_SPIN)
        return;
    if (dlock__notify_begin(
            c, sem ? x->h->k.hchan : x->h->k.chan,
            sem ? x->h->k.hchanlen : x->h->k.chanlen, sem ? x->h->owner : NULL,
            &x->sub, cap(x, dlock__now_ms() + c->opts.command_timeout_ms),
            x->gen) != DLOCK_OK) {
        x->sub = NULL;
        x->strategy = DLOCK_WAIT_SPIN;
    }
}

/* The semaphore mode of the waiting attempts. */
static int wait_mode(const waiting *x)
{
    if (x->w->kind != DLOCK__KIND_PERMIT || x->strategy == DLOCK_WAIT_SPIN)
        return SEM_TRY;
    return x->strategy == DLOCK_WAIT_FAIR ? SEM_FIFO_QUEUE : SEM_QUEUE;
}

/* The waiting loop after an attempt found no permit (or a writer): until
 * acquired, the deadline, cancellation or an error. */
static int shared_wait(dlock_client *c, dlock__held *h, const want *w,
                       int64_t deadline, uint64_t gen, int64_t pttl, got *g)
{
    waiting x = {.c = c,
                 .h = h,
                 .w = w,
                 .deadline = deadline,
                 .gen = gen,
                 .strategy = c->opts.wait_strategy,
                 .pttl = pttl};
    int rc, mode, sem = w->kind == DLOCK__KIND_PERMIT, t;

    /* Readers have no queue: with the fair strategy (the default) they
     * wait by notification. */
    if (!sem && x.strategy == DLOCK_WAIT_FAIR)
        x.strategy = DLOCK_WAIT_NOTIFY;

    wait_begin(&x);
    mode = wait_mode(&x);
    for (;;) {
        if (atomic_load(&c->cancel_gen) != gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (deadline >= 0 && dlock__now_ms() >= deadline) {
            rc = DLOCK_TIMEDOUT;
            break;
        }
        if (!sem && x.strategy == DLOCK_WAIT_NOTIFY) {
            t = dlock__notify_turn(x.sub, deadline);
            if (t != 1) {
                rc = t == 0 ? DLOCK_TIMEDOUT : t;
                break;
            }
        }
        if (sem && x.sub != NULL)
            /* A handoff read from now on came after this attempt was
             * sent, or is older than the token it reports (nbusy). */
            dlock__notify_handoff_reset(x.sub);
        x.sent = dlock__now_ms();
        rc = attempt(c, h, w, mode | SEM_WAITING, g);
        if (rc == DLOCK_LOCK_DELAY) { /* wait it out, as a lock does */
            x.pttl = g->pttl;
            rc = sleep_delay(&x);
            if (rc < 0)
                break;
            continue;
        }
        if (rc != DLOCK_BUSY)
            break;
        atomic_fetch_add(&c->stats.busy, 1);
        atomic_fetch_add(&c->stats.waits, 1);
        x.pttl = g->pttl;
        x.nbusy = g->nbusy;
        if (x.strategy == DLOCK_WAIT_SPIN || g->split) {
            rc = sleep_spin(&x);
        } else if (sem) {
            rc = sleep_sem(&x, g);
            if (rc == 1) {
                rc = dlock__confirm_handed(c, h, w->lease_ms, g->token,
                                           &g->valid_until,
                                           "a permit handed over by a release");
                break;
            }
        } else {
            int64_t now = dlock__now_ms();
            rc = dlock__notify_wait(
                x.sub,
                cap(&x, now + (x.pttl > 0 ? x.pttl : c->opts.spin_max_ms)));
        }
        if (rc < 0)
            break;
    }
    if (sem && rc != DLOCK_OK && mode >= SEM_QUEUE)
        sem_leave(c, h);
    dlock__notify_end(x.sub);
    return rc;
}

/* ---- acquiring ---------------------------------------------------------- */

/* Check the acquire options (NULL: the defaults, in *defaults). */
static int check_opts(dlock_client *c, const dlock_acquire_options **opts,
                      dlock_acquire_options *defaults)
{
    if (*opts == NULL) {
        dlock_acquire_options_init(defaults);
        *opts = defaults;
    }
    if ((*opts)->version != DLOCK_ACQUIRE_OPTIONS_VERSION)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "acquire options version %u not supported",
                                (*opts)->version);
    if ((*opts)->lease_ms <= 0 ||
        (*opts)->lease_ms > 365LL * 24 * 3600 * 1000 ||
        (*opts)->lease_ms <= dlock__drift(c, (*opts)->lease_ms))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "lease_ms must be above the clock drift "
                                "allowance and at most a year (got %" PRId64
                                ")",
                                (*opts)->lease_ms);
    return DLOCK_OK;
}

/* Register the new hold h with what g got, and give the caller its
 * handle. */
static int finish(dlock_client *c, dlock__held *h,
                  const dlock_acquire_options *o, const got *g,
                  dlock_lock **out)
{
    pthread_mutex_lock(&c->held_mu);
    h->depth = 1;
    h->handles = 1;
    h->token = g->token;
    h->nodes = g->nodes;
    atomic_store(&h->held_on, g->nodes);
    h->lease_ms = o->lease_ms;
    atomic_store(&h->valid_until_ms, g->valid_until);
    h->watchdog = o->watchdog;
    h->on_lost = o->on_lost;
    h->on_lost_ud = o->on_lost_userdata;
    dlock__held_link(c, h);
    dlock__held_started(c, h, o->lease_ms, g->valid_until);
    return dlock__handle_give(c, h, o->watchdog, out);
}

/* Acquire w of NAME: a fresh hold (permits and readers are never
 * re-entered), the first attempt, the wait, the registration. */
static int acquire_shared(dlock_lock **out, dlock_client *c, const char *name,
                          want *w, const dlock_acquire_options *o)
{
    char owner[DLOCK_OWNER_MAX];
    uint64_t gen = atomic_load(&c->cancel_gen);
    int64_t deadline = o->wait_ms < 0 ? -1 : dlock__now_ms() + o->wait_ms;
    dlock__held *h;
    char *msg;
    got g;
    int rc;

    dlock__owner_id(c, owner, sizeof owner);
    h = dlock__held_new(c, name, owner);
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    h->k.kind = w->kind;
    h->thread = pthread_self();
    msg = dlock__errbuf(c);
    if (msg != NULL)
        msg[0] = '\0';
    rc = attempt(
        c, h, w,
        c->opts.wait_strategy == DLOCK_WAIT_FAIR ? SEM_FIFO_TRY : SEM_TRY, &g);
    if (rc == DLOCK_BUSY) {
        atomic_fetch_add(&c->stats.busy, 1);
        if (o->wait_ms != 0)
            rc = shared_wait(c, h, w, deadline, gen, g.pttl, &g);
    } else if (rc == DLOCK_LOCK_DELAY && o->wait_ms != 0) {
        rc = shared_wait(c, h, w, deadline, gen, g.pttl, &g);
    }
    if (rc != DLOCK_OK) {
        dlock__held_free(h);
        if (rc == DLOCK_BUSY)
            dlock__set_error(c, rc, "%s: %s", name,
                             w->kind == DLOCK__KIND_PERMIT
                                 ? "no permit free"
                                 : "a writer holds it or waits for it");
        else if (rc == DLOCK_TIMEDOUT)
            dlock__set_error(c, rc, "gave up waiting for %s", name);
        else if (rc == DLOCK_CANCELED)
            dlock__set_error(c, rc, "waiting for %s was cancelled", name);
        return rc;
    }
    return finish(c, h, o, &g, out);
}

/* The common checks; *found = this thread's registered hold of NAME's
 * kind, or -1. */
static int check_common(dlock_lock **out, dlock_client *c, const char *name,
                        int *found)
{
    dlock__held *h;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "out is NULL");
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->held_mu);
    h = dlock__held_find(c, name, pthread_self());
    *found = h != NULL ? h->k.kind : -1;
    pthread_mutex_unlock(&c->held_mu);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_sem_acquire(dlock_lock **out, dlock_client *c, const char *name,
                      int64_t limit, const dlock_acquire_options *opts)
{
    dlock_acquire_options defaults;
    want w = {.kind = DLOCK__KIND_PERMIT, .limit = limit};
    int found = -1, rc = check_common(out, c, name, &found);

    if (rc != DLOCK_OK)
        return rc;
    if (c->ns.n > 1)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "semaphore %s: a semaphore needs one server; "
                                "over Redlock's majorities more than its "
                                "limit could hold permits",
                                name);
    if (limit < 1 || limit > DLOCK_SEM_LIMIT_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "semaphore %s: the limit must be 1 to %d "
                                "(got %" PRId64 ")",
                                name, DLOCK_SEM_LIMIT_MAX, limit);
    if (found == DLOCK__KIND_LOCK || found == DLOCK__KIND_READ)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "%s is a lock this thread holds, not a "
                                "semaphore",
                                name);
    rc = check_opts(c, &opts, &defaults);
    if (rc != DLOCK_OK)
        return rc;
    w.lease_ms = opts->lease_ms;
    return acquire_shared(out, c, name, &w, opts);
}

/* See dlock.h. */
int dlock_rw_acquire_shared(dlock_lock **out, dlock_client *c, const char *name,
                            unsigned flags, const dlock_acquire_options *opts)
{
    dlock_acquire_options defaults;
    want w = {.kind = DLOCK__KIND_READ};
    int found = -1, rc = check_common(out, c, name, &found);

    if (rc != DLOCK_OK)
        return rc;
    if (flags & ~(unsigned)DLOCK_RW_PREFER_READERS)
        return dlock__set_error(c, DLOCK_EINVAL, "read %s: unknown flags %#x",
                                name, flags);
    if (found == DLOCK__KIND_LOCK)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "read %s: this thread holds it exclusively "
                                "(dlock_rw_downgrade turns that into a read "
                                "lock)",
                                name);
    if (found == DLOCK__KIND_PERMIT)
        return dlock__set_error(
            c, DLOCK_EINVAL, "%s is a semaphore, not a read-write lock", name);
    rc = check_opts(c, &opts, &defaults);
    if (rc != DLOCK_OK)
        return rc;
    w.lease_ms = opts->lease_ms;
    /* A thread that reads NAME already would wait for a writer that
     * waits for it: it goes in. */
    w.ignore_mark =
        (flags & DLOCK_RW_PREFER_READERS) || found == DLOCK__KIND_READ;
    return acquire_shared(out, c, name, &w, opts);
}

/* ---- the limit, the downgrade ------------------------------------------ */

/* See dlock.h. */
int dlock_sem_set_limit(dlock_client *c, const char *name, int64_t limit,
                        int64_t *old_limit)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__held *h;
    dlock__cmdbuf b;
    const redisReply *r;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (c->ns.n > 1)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "semaphore %s: a semaphore needs one server",
                                name);
    if (limit < 1 || limit > DLOCK_SEM_LIMIT_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "semaphore %s: the limit must be 1 to %d "
                                "(got %" PRId64 ")",
                                name, DLOCK_SEM_LIMIT_MAX, limit);
    h = dlock__held_new(c, name, "");
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    dlock__cmd_begin(&b, DLOCK__S_SEM_LIMIT);
    dlock__cmd_key(&b, h->k.key, h->k.keylen);
    dlock__cmd_key(&b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_key(&b, h->k.qkey, h->k.qkeylen);
    dlock__cmd_key(&b, h->k.qtkey, h->k.qtkeylen);
    dlock__cmd_arg_i64(&b, limit);
    dlock__cmd_arg_i64(&b, DLOCK__FENCE_RETENTION_MS);
    dlock__cmd_arg(&b, h->k.chan, h->k.chanlen);
    dlock__cmd_arg_i64(&b, DLOCK__FAIR_HANDOFF_MS);
    dlock__cmd_arg(&b, c->opts.wait_strategy == DLOCK_WAIT_FAIR ? "1" : "0", 1);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    r = res[0].reply;
    if (res[0].status != DLOCK_OK)
        rc = dlock__fail_step(c, res, 1, res[0].status, "set limit");
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             dlock__elem_int(r, 0) == 1) {
        if (old_limit != NULL)
            *old_limit = dlock__elem_int(r, 1);
        rc = DLOCK_OK;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               dlock__elem_int(r, 0) == -3 &&
               r->element[1]->type == REDIS_REPLY_STRING)
        rc = dlock__set_error(c, DLOCK_EINVAL, "%s is a %s, not a semaphore",
                              name, r->element[1]->str);
    else
        rc = dlock__set_error(c, DLOCK_EPROTO, "set limit: unexpected reply");
    dlock__results_clear(res, c->ns.n);
    dlock__held_free(h);
    return rc;
}

/* Give back both forms a failed downgrade may have left on the nodes in
 * mask: the write hold (release.lua) and the read lease (rw_release.lua). */
static void downgrade_undo(dlock_client *c, dlock__held *r, uint64_t mask,
                           uint64_t token, int64_t lease_ms)
{
    r->k.kind = DLOCK__KIND_LOCK;
    dlock__undo_acquire(c, r, mask, 1, token, lease_ms, 0, 1);
    r->k.kind = DLOCK__KIND_READ;
    dlock__undo_acquire(c, r, mask, 1, token, lease_ms, 0, 1);
}

/* See dlock.h. The writer's record is detached first (renewal of it
 * stops, and its "not owner" after the downgrade is no loss); the reader
 * is a new record under the same owner id. */
int dlock_rw_downgrade(dlock_lock **out, dlock_lock *l)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock_acquire_options o;
    dlock_client *c;
    dlock__held *h, *r;
    dlock__cmdbuf b;
    char relid[64];
    int i, ok = 0, no = 0, unacked = 0, rc;
    uint64_t token, granted = 0, unknown = 0;
    int64_t t0;

    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "out is NULL");
    if (h->k.kind != DLOCK__KIND_LOCK || h->depth != 1)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "downgrade %s: not an exclusive hold held "
                                "once (re-entered levels would lose their "
                                "lock); the handle is unchanged",
                                h->k.name);
    if (atomic_load(&h->state) == DLOCK_LOST)
        return dlock_lock_release(l);
    r = dlock__held_new(c, h->k.name, h->owner);
    if (r == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    r->k.kind = DLOCK__KIND_READ;
    r->thread = pthread_self();
    token = h->token;
    dlock_acquire_options_init(&o);
    o.lease_ms = h->lease_ms;
    o.watchdog = h->watchdog;
    o.on_lost = h->on_lost;
    o.on_lost_userdata = h->on_lost_ud;
    dlock_lock_detach(l);

    memcpy(relid, c->idhex, 32);
    relid[32] = ':';
    relid[33 + dlock__fmt_u64(relid + 33,
                              atomic_fetch_add(&c->release_seq, 1))] = '\0';
    dlock__cmd_begin(&b, DLOCK__S_RW_DOWNGRADE);
    dlock__cmd_key(&b, r->k.key, r->k.keylen);
    dlock__cmd_key(&b, r->k.fkey, r->k.fkeylen);
    dlock__cmd_key(&b, r->k.rkey, r->k.rkeylen);
    dlock__cmd_arg(&b, r->owner, strlen(r->owner));
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg_i64(&b, o.lease_ms);
    dlock__cmd_arg(&b, r->k.chan, r->k.chanlen);
    dlock__cmd_arg(&b, relid, strlen(relid));
    dlock__cmd_durable(c, &b.cmd); /* it grants a read lease */
    t0 = dlock__now_ms();
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, o.lease_ms),
               res);
    for (i = 0; i < c->ns.n; i++) {
        if (res[i].status != DLOCK_OK) {
            if (res[i].sent)
                unknown |= 1ULL << i;
        } else if (res[i].reply->type == REDIS_REPLY_INTEGER &&
                   res[i].reply->integer == 1 && c->ns.wait_replicas > 0 &&
                   res[i].acks < c->ns.wait_replicas) {
            /* Too few replicas have the read lease: a failover could
             * lose it (and keep the writer's older lease). */
            unacked++;
            unknown |= 1ULL << i;
        } else if (res[i].reply->type == REDIS_REPLY_INTEGER &&
                   res[i].reply->integer == 1) {
            ok++;
            granted |= 1ULL << i;
        } else if (res[i].reply->type == REDIS_REPLY_INTEGER) {
            no++;
        } else {
            dlock__malformed(&c->ns, res, i, "the downgrade script");
            unknown |= 1ULL << i;
        }
    }
    if (ok >= c->ns.quorum &&
        t0 + o.lease_ms - dlock__drift(c, o.lease_ms) > dlock__now_ms()) {
        got g = {.token = token,
                 .nodes = granted,
                 .valid_until = t0 + o.lease_ms - dlock__drift(c, o.lease_ms)};
        dlock__results_clear(res, c->ns.n);
        return finish(c, r, &o, &g, out);
    }
    if (no > c->ns.n - c->ns.quorum)
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "downgrade %s: not the owner (the lease had "
                              "run out)",
                              r->k.name);
    else if (unacked > 0 && ok + unacked >= c->ns.quorum)
        rc = dlock__set_error(c, DLOCK_NOT_REPLICATED,
                              "downgrade %s: done, but fewer than the %d "
                              "replicas asked for acknowledged it within "
                              "%" PRId64 " ms: the write and read holds are "
                              "given back",
                              r->k.name, c->ns.wait_replicas,
                              c->ns.wait_timeout_ms);
    else
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "downgrade");
    dlock__results_clear(res, c->ns.n);
    if ((granted | unknown) != 0)
        downgrade_undo(c, r, granted | unknown, token, o.lease_ms);
    dlock__held_free(r);
    return rc;
}
