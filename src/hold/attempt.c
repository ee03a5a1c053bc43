/*
 * attempt.c - one acquire attempt of any kind (attempt.h), as phases:
 *
 *   ask     the nodes the lock-delay lets it ask (no I/O)
 *   send    the kind's acquire command to them; over Redlock done once a
 *           majority granted, the nodes still out pinned to the hold
 *   verdict a kind's refusal, then the pure tally and verdict (verdict.h)
 *           and the grants that may not last (withdraw.h)
 *   fence   Redlock: raise the fencing counter when the granting nodes
 *           disagree on the token
 *   undo    give back what a failed attempt may have taken
 *
 * (confirm, a handoff's confirmation, is the wait's: wait.c; record, the
 * registration, the acquire's: take.c.) Every phase ends by the attempt's
 * end, h->attempt_end_ms: command_timeout_ms after it began.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hold/attempt.h"
#include "hold/retention.h"
#include "hold/verdict.h"
#include "hold/withdraw.h"

/* One attempt's state through its phases. */
typedef struct attempt {
    dlock_client *c;
    dlock__held *h;
    const dlock__want *w;
    dlock__ask ask;
    uint64_t ticket;
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__conn *pins[DLOCK_MAX_SERVERS];
    dlock__tally t;
    dlock__verdict v;
    int64_t t0;         /* when it was sent (monotonic) */
    uint64_t pend;      /* Redlock: nodes not waited for */
    uint64_t withdrawn; /* grants that may not last */
    long long minacks;
} attempt;

/* ---- send ------------------------------------------------------------------ */

/* Redlock: an acquire is certain once a majority granted (a failure is
 * waited out: the nodes still out may have queued us, or granted). ud:
 * the quorum. */
static int granted_enough(const dlock__result *res, uint64_t waiting, int n,
                          const void *ud)
{
    int i, ok = 0;
    for (i = 0; i < n; i++)
        if (!(waiting & (1ULL << i)) && res[i].status == DLOCK_OK &&
            dlock__classify(res[i].reply) == DLOCK__R_GRANTED)
            ok++;
    return ok >= *(const int *)ud;
}

/* After a Redlock send: the connections of nodes not waited for stay
 * with the hold (h->pins); returns the mask of those nodes. */
static uint64_t keep_pins(attempt *a)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    uint64_t pend = 0;
    int i;
    for (i = 0; i < c->ns.n; i++) {
        if (a->res[i].pending)
            pend |= 1ULL << i;
        if (a->pins[i] != NULL && h->pins == NULL)
            h->pins = calloc((size_t)c->ns.n, sizeof *h->pins);
        if (a->pins[i] != NULL && h->pins != NULL) {
            h->pins[i] = a->pins[i];
        } else if (a->pins[i] != NULL) {
            /* Out of memory: closed, which the server sees after the
             * request (it reads before it notices the close). */
            dlock__node_put(&c->ns, i, a->pins[i], 0);
        }
    }
    return pend;
}

/* Send the acquire command to the nodes in mask and wait for the
 * answers (a->res), by the attempt's end. */
static void send_acquire(attempt *a, uint64_t mask)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    dlock__cmdbuf b;

    dlock__kind_of(a->w->kind)->acquire_cmd(&b, c, h, a->w, a->ask, a->ticket);
    if (c->ns.n > 1) {
        /* A node still out keeps its connection pinned to this hold, so
         * that the hold's next request there (its release, an undo, a
         * reentry) comes after it. */
        memset(a->pins, 0, sizeof a->pins);
        if (h->pins != NULL) {
            memcpy(a->pins, h->pins, (size_t)c->ns.n * sizeof *a->pins);
            free(h->pins);
            h->pins = NULL;
        }
        b.cmd.pins = a->pins;
        b.cmd.pin_out = 1;
        /* Done as soon as a majority granted, but not with wait_replicas:
         * a grant counts only once its WAIT answered, which is read last
         * on the connection, so the early return is off then. */
        if (c->ns.wait_replicas == 0) {
            b.cmd.enough = granted_enough;
            b.cmd.enough_ud = &c->ns.quorum;
        }
    }
    a->t0 = dlock__now_ms();
    /* The whole attempt ends within the command timeout (dlock.h): the
     * step, a retry on a fresh connection, the fencing round, the undo. */
    h->attempt_end_ms = a->t0 + c->opts.command_timeout_ms;
    dlock__run(c, mask, &b.cmd,
               dlock__deadline_by(c, a->w->lease_ms, h->attempt_end_ms),
               a->res);
    if (c->ns.n > 1)
        a->pend = keep_pins(a);
}

/* ---- fence, decide --------------------------------------------------------- */

/* Redlock's fencing step: the granting nodes' counters may disagree, so
 * raise the counter to the highest token on the granting nodes (mask);
 * once a majority holds it, any later winner's majority sees it. By the
 * attempt's end. DLOCK_OK or DLOCK_NO_QUORUM. */
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

/* A grant: fence it when Redlock's granting nodes disagree on the token,
 * then fill *g if validity is left. */
static int decide_granted(attempt *a, dlock__got *g)
{
    dlock_client *c = a->c;
    const dlock__tally *t = &a->t;
    int64_t lease_ms = a->w->lease_ms, drift = dlock__drift(c, lease_ms);
    if (c->ns.n > 1 && t->tokens_differ &&
        raise_fence(c, a->h, t->gmask, t->tmax) != DLOCK_OK)
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: could not record the fencing "
                                "token on a majority",
                                a->h->k.name);
    if (lease_ms - (dlock__now_ms() - a->t0) - drift <= 0)
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: validity used up before the "
                                "majority answered",
                                a->h->k.name);
    g->token = t->tmax;
    g->nodes = t->gmask;
    g->valid_until = a->t0 + lease_ms - drift;
    return DLOCK_OK;
}

/* The status (and message) of the attempt's verdict, elapsed ms after it
 * was sent. DLOCK_OK fills the grant into *g. */
static int decide(attempt *a, int64_t elapsed, dlock__got *g)
{
    dlock_client *c = a->c;
    switch (a->v) {
    case DLOCK__V_GRANTED:
        return decide_granted(a, g);
    case DLOCK__V_NOT_OWNER:
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "acquire %s: the earlier hold of this owner "
                                "has expired",
                                a->h->k.name);
    case DLOCK__V_BUSY:
        return DLOCK_BUSY;
    case DLOCK__V_TOO_LATE:
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: validity used up (lease %" PRId64
                                " ms, took %" PRId64 " ms)",
                                a->h->k.name, a->w->lease_ms, elapsed);
    case DLOCK__V_FAILED:
    default:
        return dlock__fail_all(c, a->res, "acquire");
    }
}

/* ---- verdict, undo ----------------------------------------------------------- */

/* A node refused (another limit or kind): give back what the attempt may
 * have taken elsewhere. The refusal's status. */
static int refused(attempt *a, int rc)
{
    dlock_client *c = a->c;
    uint64_t undo = dlock__refused_undo_mask(a->res, c->ns.n);
    dlock__results_clear(a->res, c->ns.n);
    if (undo != 0)
        dlock__give_back(c, a->h, undo, 0, a->w->lease_ms, 0, 1);
    else
        dlock__held_drop_pins(c, a->h);
    return rc;
}

/* Count the answers, withdraw grants that may not last, and decide.
 * Fills *g (pttl, nbusy, ahead, depth; the grant on DLOCK_OK). */
static int judge(attempt *a, dlock__got *g)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    int64_t elapsed;
    int i;

    dlock__acquire_tally(&a->t, a->res, c->ns.n);
    for (i = 0; i < c->ns.n; i++)
        if (a->t.bad & (1ULL << i))
            dlock__malformed(&c->ns, a->res, i, "the acquire script");
    a->minacks = -1;
    a->withdrawn =
        dlock__withdraw_grants(c, h, h->depth == 0, &a->t, a->res, &a->minacks);
    g->pttl = a->t.pttl;
    g->nbusy = a->t.nbusy;
    g->ahead = a->t.ahead;
    g->depth = a->t.depth;
    elapsed = dlock__now_ms() - a->t0;
    a->v = dlock__acquire_verdict(&a->t, c->ns.quorum, h->depth,
                                  a->w->lease_ms - elapsed -
                                      dlock__drift(c, a->w->lease_ms));
    if (dlock__withdraw_decides(a->withdrawn, a->v)) {
        g->pttl = -1;
        return dlock__withdrawn_error(c, h, a->withdrawn, a->minacks, &g->pttl);
    }
    return decide(a, elapsed, g);
}

/* Give back what the failed attempt may have taken (by the attempt's end;
 * the rest by the watchdog): partial grants and unanswered requests. A
 * queued Redlock waiter goes back into the queue at its ticket. */
static void undo(attempt *a, dlock__got *g)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    uint64_t mask = dlock__acquire_undo_mask(&a->t, a->v, c->ns.n, h->depth);
    g->split = c->ns.n > 1 && a->t.granted > 0;
    if (mask == 0) {
        dlock__held_drop_pins(c, h);
        return;
    }
    /* A give-back left unanswered gives a fresh hold a new owner id for
     * its next attempts (withdraw.h): it acts on this attempt's grant
     * only. */
    dlock__give_back(c, h, mask, a->t.tmax, a->w->lease_ms,
                     a->ask == DLOCK__ASK_FIFO && c->ns.n > 1 ? a->ticket : 0,
                     (mask & a->t.unknown & ~a->pend) != 0);
}

/* ---- the attempt --------------------------------------------------------- */

/* See attempt.h. */
int dlock__attempt(dlock_client *c, dlock__held *h, const dlock__want *w,
                   dlock__ask ask, uint64_t ticket, dlock__got *g)
{
    attempt a = {.c = c, .h = h, .w = w, .ask = ask, .ticket = ticket};
    uint64_t mask;
    int rc;

    memset(g, 0, sizeof *g);
    g->pttl = -1;
    /* ask: no fresh grant from a master that may have forgotten grants
     * (failover, restart): the lock-delay. */
    mask = dlock__askable_nodes(c, h, h->depth == 0, &g->pttl);
    if (mask == 0)
        return dlock__lock_delay_error(c, h, g->pttl);
    send_acquire(&a, mask);
    rc = dlock__refusal(c, h, w, a.res);
    if (rc != DLOCK_OK)
        return refused(&a, rc);
    rc = judge(&a, g);
    dlock__results_clear(a.res, c->ns.n);
    if (rc != DLOCK_OK)
        undo(&a, g);
    if (rc == DLOCK_ESERVER) {
        /* The one mark of it is the message's (reply.c). */
        const char *m = dlock__errbuf(c);
        g->notready = m != NULL && strstr(m, ": not ready: ") != NULL;
    }
    return rc;
}
