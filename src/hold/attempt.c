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
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/call.h"
#include "hold/attempt.h"
#include "hold/held.h"
#include "hold/release.h"
#include "hold/retention.h"
#include "hold/verdict.h"
#include "hold/withdraw.h"

/* The phases that do I/O, each one engine call (call.h). */
enum { P_SEND, P_FENCE, P_UNDO, P_DONE };

/* One attempt's state through its phases (attempt.h). */
struct dlock__attempt_state {
    dlock_client *c;
    dlock__held *h;
    dlock__want w;
    dlock__ask ask;
    uint64_t ticket;
    int phase;
    int rc;          /* the status so far (the final one at P_DONE) */
    dlock__call *k;  /* the phase's call, NULL between phases */
    dlock__cmdbuf b; /* its command */
    char relid[64];  /* an undo's request id */
    char plain[DLOCK__PLAIN_VAL]; /* a plain acquire's value (kind.h) */
    int scripted;       /* a plain acquire found it busy: the script now */
    dlock__result *res; /* one per node (after the struct) */
    dlock__conn **pins; /* the same */
    dlock__tally t;
    dlock__verdict v;
    dlock__got g;
    int64_t t0;         /* when it was sent (monotonic) */
    uint64_t pend;      /* Redlock: nodes not waited for */
    uint64_t withdrawn; /* grants that may not last */
    long long minacks;
    uint64_t umask;          /* P_UNDO: the nodes given back to */
    uint64_t utoken;         /* and the token given back */
    int ueval;               /* sent with the source */
    int own;                 /* its memory is its own (freed with it) */
    char err[DLOCK__MSGLEN]; /* last: not zeroed (dlock__attempt_start) */
};
typedef struct dlock__attempt_state attempt;

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

/* Start the call of phase (a->b.cmd on the nodes of mask, by
 * deadline). Out of memory leaves a->k NULL and res saying so: the
 * phase is then over at once. */
static void phase_start(attempt *a, int phase, uint64_t mask, int64_t deadline)
{
    a->phase = phase;
    if (dlock__call_start(&a->k, &a->c->ns, a->c->scripts, &a->b.cmd, 1, mask,
                          deadline, a->res) != DLOCK_OK)
        a->k = NULL;
}

/* After a send: the connections of nodes not waited for (Redlock) or
 * not answered by the deadline stay with the hold (h->pins); returns the
 * mask of the nodes not waited for. */
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
        a->pins[i] = NULL;
    }
    return pend;
}

/* Start sending the acquire command to the nodes in mask; the attempt's
 * end is set from now. */
static void send_acquire(attempt *a, uint64_t mask)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;

    if (a->scripted ||
        !dlock__plain_acquire_cmd(&a->b, c, h, &a->w, a->ask, a->plain))
        dlock__kind_of(a->w.kind)->acquire_cmd(&a->b, c, h, &a->w, a->ask,
                                               a->ticket);
    /* A node still out (given up on, or no answer by the deadline) keeps
     * its connection pinned to this hold, so that the hold's next request
     * there (its release, an undo, a reentry) comes after it. */
    memset(a->pins, 0, (size_t)c->ns.n * sizeof *a->pins);
    if (h->pins != NULL) {
        memcpy(a->pins, h->pins, (size_t)c->ns.n * sizeof *a->pins);
        free(h->pins);
        h->pins = NULL;
    }
    a->b.cmd.pins = a->pins;
    a->b.cmd.pin_out = 1;
    if (c->ns.n > 1) {
        /* Done as soon as a majority granted, but not with wait_replicas:
         * a grant counts only once its WAIT answered, which is read last
         * on the connection, so the early return is off then. */
        if (c->ns.wait_replicas == 0) {
            a->b.cmd.enough = granted_enough;
            a->b.cmd.enough_ud = &c->ns.quorum;
        }
    }
    a->t0 = dlock__now_ms();
    /* The whole attempt ends within the command timeout (dlock.h): the
     * step, a retry on a fresh connection, the fencing round, the undo. */
    h->attempt_end_ms = a->t0 + c->opts.command_timeout_ms;
    phase_start(a, P_SEND, mask,
                dlock__deadline_by(c, a->w.lease_ms, h->attempt_end_ms));
}

/* ---- undo, the end ---------------------------------------------------------- */

/* The attempt is over with a->rc. */
static void finish(attempt *a)
{
    a->phase = P_DONE;
    /* The one mark of a server not ready is the message's (reply.c). */
    if (a->rc == DLOCK_ESERVER)
        a->g.notready = dlock__reply_notready(a->err);
}

/* Give back what the failed attempt may have taken on the nodes in mask
 * (token; ticket: a queued Redlock waiter's place, back into the queue;
 * eval: with the script's source), at depth h->depth + 1, over h's pins,
 * waiting no longer than the attempt's end. Nothing to give back: the
 * pins go back to the pool and the attempt is over. */
static void undo_start(attempt *a, uint64_t mask, uint64_t token,
                       uint64_t ticket, int eval)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    dlock__release r = {.owner = h->owner,
                        .depth = h->depth + 1,
                        .token = token,
                        .ticket = ticket,
                        .relid = a->relid};
    if (mask == 0) {
        dlock__held_drop_pins(c, h);
        finish(a);
        return;
    }
    a->umask = mask;
    a->utoken = token;
    r.relidlen = dlock__request_id(c, a->relid);
    dlock__kind_of(h->k.kind)->release_cmd(&a->b, c, &h->k, &r);
    a->b.cmd.eval = eval;
    a->b.cmd.give_back = 1;
    a->b.cmd.pins = h->pins;
    a->ueval = eval;
    phase_start(a, P_UNDO, mask, dlock__deadline_by(c, 0, h->attempt_end_ms));
}

/* The nodes of mask that did not answer (may still get the give-back
 * later) are handed to the watchdog, which retries with the source until
 * they answer or the lease has run out. A fresh hold then takes a new
 * owner id for its next attempts (withdraw.h: dlock__give_back). */
static void undo_left(attempt *a, uint64_t left)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    dlock__held_drop_pins(c, h);
    if (left == 0)
        return;
    dlock__undo_queue(c, h, left, h->depth + 1, a->utoken,
                      dlock__now_ms() + a->w.lease_ms);
    dlock__give_back_left(c, h);
}

/* The give-back answered (or its time is up). */
static void undo_done(attempt *a)
{
    uint64_t left = a->umask;
    int i;
    /* Any answer settles a node (released, or nothing to release). */
    for (i = 0; i < a->c->ns.n; i++)
        if ((left & (1ULL << i)) && a->res[i].status != DLOCK_EIO &&
            a->res[i].status != DLOCK_ETIMEDOUT)
            left &= ~(1ULL << i);
    dlock__results_clear(a->res, a->c->ns.n);
    undo_left(a, left);
    finish(a);
}

/* The attempt failed (a->rc): give back what it may have taken, by the
 * attempt's end (the rest by the watchdog): partial grants and
 * unanswered requests. A queued Redlock waiter goes back into the queue
 * at its ticket. */
static void undo(attempt *a)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    uint64_t mask = dlock__acquire_undo_mask(&a->t, a->v, c->ns.n, h->depth);
    a->g.split = c->ns.n > 1 && a->t.granted > 0;
    /* A give-back left unanswered gives a fresh hold a new owner id for
     * its next attempts (withdraw.h): it acts on this attempt's grant
     * only. */
    undo_start(a, mask, a->t.tmax,
               a->ask == DLOCK__ASK_FIFO && c->ns.n > 1 ? a->ticket : 0,
               (mask & a->t.unknown & ~a->pend) != 0);
}

/* The verdict is a->rc: done, or undo first. */
static void decided(attempt *a)
{
    if (a->rc == DLOCK_OK)
        finish(a);
    else
        undo(a);
}

/* ---- fence, decide --------------------------------------------------------- */

/* Redlock's fencing step: the granting nodes' counters may disagree, so
 * raise the counter to the highest token on the granting nodes; once a
 * majority holds it, any later winner's majority sees it. By the
 * attempt's end. */
static void fence_start(attempt *a)
{
    dlock__held *h = a->h;
    dlock__cmd_begin(&a->b, DLOCK__S_FENCE_RAISE);
    dlock__cmd_key(&a->b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_arg_u64(&a->b, a->t.tmax);
    dlock__cmd_arg_i64(&a->b, dlock__fence_keep_ms(a->c));
    phase_start(a, P_FENCE, a->t.gmask,
                dlock__deadline_by(a->c, h->lease_ms, h->attempt_end_ms));
}

/* A grant (fenced if it had to be: fenced, the nodes that recorded the
 * token, or -1 when it needed no fence): fill a->g if validity is left.
 * The status. */
static int decide_granted(attempt *a, int fenced)
{
    dlock_client *c = a->c;
    const dlock__tally *t = &a->t;
    int64_t valid = dlock__valid_until(c, a->t0, a->w.lease_ms);
    if (fenced >= 0 && fenced < c->ns.quorum)
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: could not record the fencing "
                                "token on a majority",
                                a->h->k.name);
    if (valid - dlock__now_ms() <= 0)
        return dlock__set_error(c, DLOCK_NO_QUORUM,
                                "acquire %s: validity used up before the "
                                "majority answered",
                                a->h->k.name);
    a->g.token = t->tmax;
    a->g.nodes = t->gmask;
    a->g.valid_until = valid;
    return DLOCK_OK;
}

/* The fencing round answered (or its time is up). */
static void fence_done(attempt *a)
{
    int i, ok = 0;
    for (i = 0; i < a->c->ns.n; i++)
        if ((a->t.gmask & (1ULL << i)) && a->res[i].status == DLOCK_OK &&
            a->res[i].reply->type == REDIS_REPLY_INTEGER &&
            (uint64_t)a->res[i].reply->integer >= a->t.tmax)
            ok++;
    dlock__results_clear(a->res, a->c->ns.n);
    a->rc = decide_granted(a, ok);
    decided(a);
}

/* The status (and message) of the attempt's verdict, elapsed ms after it
 * was sent, but for a grant that needs the fencing round first (1). */
static int decide(attempt *a, int64_t elapsed)
{
    dlock_client *c = a->c;
    switch (a->v) {
    case DLOCK__V_GRANTED:
        if (c->ns.n > 1 && a->t.tokens_differ)
            return 1;
        return decide_granted(a, -1);
    case DLOCK__V_NOT_OWNER:
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "acquire %s: the earlier hold of this owner "
                                "has expired",
                                a->h->k.name);
    case DLOCK__V_BUSY:
        return DLOCK_BUSY;
    case DLOCK__V_TOO_LATE:
        return dlock__too_late_error(c, a->h->k.name, a->w.lease_ms, elapsed);
    case DLOCK__V_FAILED:
    default:
        return dlock__fail_all(c, a->res, "acquire");
    }
}

/* Count the answers, withdraw grants that may not last, and decide.
 * Fills a->g (pttl, nbusy, ahead, depth). The status, or 1: a grant to
 * fence first. */
static int judge(attempt *a)
{
    dlock_client *c = a->c;
    dlock__held *h = a->h;
    dlock__got *g = &a->g;
    int64_t elapsed, now;
    int i;

    dlock__acquire_tally_as(&a->t, a->res, c->ns.n, a->b.cmd.raw);
    for (i = 0; i < c->ns.n; i++)
        if (a->t.bad & (1ULL << i))
            dlock__malformed(&c->ns, a->res, i, "the acquire script");
    a->minacks = -1;
    a->withdrawn =
        dlock__withdraw_grants(c, h, h->depth == 0, &a->t, a->res, &a->minacks);
    g->pttl = a->t.pttl;
    g->nbusy = a->t.nbusy;
    g->ahead = a->t.ahead;
    g->place_ms = a->t.place_ms;
    g->depth = a->t.depth;
    now = dlock__now_ms();
    elapsed = now - a->t0;
    a->v = dlock__acquire_verdict(&a->t, c->ns.quorum, h->depth,
                                  dlock__valid_until(c, a->t0, a->w.lease_ms) -
                                      now);
    if (dlock__withdraw_decides(a->withdrawn, a->v)) {
        g->pttl = -1;
        return dlock__withdrawn_error(c, h, a->withdrawn, a->minacks, &g->pttl);
    }
    return decide(a, elapsed);
}

/* The acquire answered (or its time is up): a refusal (another limit or
 * kind: what was taken elsewhere is given back), else the verdict. */
static void send_done(attempt *a)
{
    dlock_client *c = a->c;
    int rc;
    a->pend = keep_pins(a);
    if (a->b.cmd.raw && a->res[0].status == DLOCK_OK &&
        a->res[0].reply->type == REDIS_REPLY_NIL) {
        /* The plain SET NX found the name taken: ask the script, which
         * says by whom, for how long, and marks the hold for a notify
         * waiter (one more round trip, only when busy). */
        dlock__results_clear(a->res, c->ns.n);
        a->scripted = 1;
        send_acquire(a, 1);
        return;
    }
    rc = dlock__refusal(c, a->h, &a->w, a->res);
    if (rc != DLOCK_OK) {
        uint64_t mask = dlock__refused_undo_mask(a->res, c->ns.n);
        dlock__results_clear(a->res, c->ns.n);
        a->rc = rc;
        undo_start(a, mask, 0, 0, 1);
        return;
    }
    rc = judge(a);
    dlock__results_clear(a->res, c->ns.n);
    if (rc == 1) {
        fence_start(a);
        return;
    }
    a->rc = rc;
    decided(a);
}

/* The phase's call is over: on to the next phase. */
static void phase_done(attempt *a)
{
    dlock__call_free(a->k);
    a->k = NULL;
    if (a->phase == P_SEND)
        send_done(a);
    else if (a->phase == P_FENCE)
        fence_done(a);
    else if (a->phase == P_UNDO)
        undo_done(a);
}

/* Move on while the phase's call is over (a phase may end at its
 * start). DLOCK__AGAIN or the final status. */
static int advance(attempt *a)
{
    while (a->phase != P_DONE && (a->k == NULL || dlock__call_done(a->k)))
        phase_done(a);
    return a->phase == P_DONE ? a->rc : DLOCK__AGAIN;
}

/* ---- the attempt --------------------------------------------------------- */

/* See attempt.h. */
int dlock__too_late_error(dlock_client *c, const char *name, int64_t lease_ms,
                          int64_t took_ms)
{
    return dlock__set_error(c, DLOCK_NO_QUORUM,
                            "acquire %s: validity used up (lease %" PRId64
                            " ms, took %" PRId64 " ms)",
                            name, lease_ms, took_ms);
}

/* See attempt.h. */
size_t dlock__attempt_size(const dlock_client *c)
{
    /* The results and pins of the node set's nodes (a cluster's call has
     * one result), not of DLOCK_MAX_SERVERS: many attempts may be in
     * flight on a loop. */
    size_t n = c->ns.n > 1 ? (size_t)c->ns.n : 1;
    return sizeof(attempt) +
           n * (sizeof(dlock__result) + sizeof(dlock__conn *));
}

/* See attempt.h. */
int dlock__attempt_start(dlock__attempt_state **out, void *mem, dlock_client *c,
                         dlock__held *h, const dlock__want *w, dlock__ask ask,
                         uint64_t ticket)
{
    size_t n = c->ns.n > 1 ? (size_t)c->ns.n : 1;
    size_t tail = dlock__attempt_size(c) - sizeof(attempt);
    attempt *a = mem != NULL ? mem : malloc(sizeof *a + tail);
    char *prev;
    uint64_t mask;
    *out = a;
    if (a == NULL)
        return DLOCK_ENOMEM;
    /* Zeroed but for the message buffer (the last member, 1.3 kB: on
     * every acquire's path, zeroing it was a tenth of the client's
     * instructions of an uncontended cycle), which starts empty. */
    memset(a, 0, offsetof(attempt, err));
    a->err[0] = '\0';
    memset(a + 1, 0, tail);
    a->own = mem == NULL;
    a->res = (dlock__result *)(a + 1);
    a->pins = (dlock__conn **)(a->res + n);
    a->c = c;
    a->h = h;
    a->w = *w;
    a->ask = ask;
    a->ticket = ticket;
    a->g.pttl = -1;
    prev = dlock__msgs_capture(a->err);
    /* ask: no fresh grant from a master that may have forgotten grants
     * (failover, restart): the lock-delay. */
    mask = dlock__askable_nodes(c, h, h->depth == 0, &a->g.pttl);
    if (mask == 0) {
        a->rc = dlock__lock_delay_error(c, h, a->g.pttl);
        a->phase = P_DONE;
    } else {
        send_acquire(a, mask);
        advance(a);
    }
    dlock__msgs_capture(prev);
    return DLOCK_OK;
}

/* See attempt.h. */
int dlock__attempt_pollfds(dlock__attempt_state *a, struct pollfd *pfd, int max,
                           int64_t *wake_ms)
{
    if (a->k == NULL) {
        *wake_ms = dlock__now_ms();
        return 0;
    }
    return dlock__call_pollfds(a->k, pfd, max, wake_ms);
}

/* See attempt.h. */
int dlock__attempt_process(dlock__attempt_state *a, const struct pollfd *pfd,
                           int n)
{
    char *prev;
    int rc;
    if (a->phase == P_DONE)
        return a->rc;
    prev = dlock__msgs_capture(a->err);
    if (a->k != NULL)
        dlock__call_process(a->k, pfd, n);
    rc = advance(a);
    dlock__msgs_capture(prev);
    return rc;
}

/* See attempt.h. */
const dlock__got *dlock__attempt_got(const dlock__attempt_state *a)
{
    return &a->g;
}

/* See attempt.h. */
const char *dlock__attempt_errmsg(const dlock__attempt_state *a)
{
    return a->err;
}

/* See attempt.h. Cut short: what the phase under way may have taken
 * goes to the watchdog to give back (never waited for here). */
void dlock__attempt_free(dlock__attempt_state *a)
{
    dlock_client *c;
    uint64_t left = 0;
    int i;
    if (a == NULL)
        return;
    c = a->c;
    if (a->phase != P_DONE) {
        char *prev = dlock__msgs_capture(a->err);
        if (a->k != NULL)
            dlock__call_cancel(a->k, DLOCK_CANCELED, "cancelled");
        if (a->phase == P_SEND) {
            for (i = 0; i < c->ns.n; i++) {
                if (a->res[i].sent || a->res[i].status == DLOCK_OK)
                    left |= 1ULL << i;
                if (a->pins[i] != NULL)
                    dlock__node_put(&c->ns, i, a->pins[i], 0);
                a->pins[i] = NULL;
            }
            a->utoken = 0;
        } else if (a->phase == P_FENCE) {
            left = a->t.gmask | a->t.unknown;
            a->utoken = a->t.tmax;
        } else {
            left = a->umask;
        }
        dlock__call_free(a->k);
        a->k = NULL;
        dlock__results_clear(a->res, c->ns.n);
        undo_left(a, left);
        dlock__msgs_capture(prev);
    }
    if (a->own)
        free(a);
}

/* The descriptors one phase polls at most: a Redlock's nodes, or a
 * cluster's master and one node being opened. */
#define MAX_FDS (DLOCK_MAX_SERVERS + 1)

/* See attempt.h. The blocking driver: start, then poll() and process
 * until done; the attempt's message becomes this thread's. */
int dlock__attempt(dlock_client *c, dlock__held *h, const dlock__want *w,
                   dlock__ask ask, uint64_t ticket, dlock__got *g)
{
    struct pollfd pfd[MAX_FDS];
    dlock__attempt_state *a;
    int rc;

    memset(g, 0, sizeof *g);
    g->pttl = -1;
    if (dlock__attempt_start(&a, NULL, c, h, w, ask, ticket) != DLOCK_OK)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    rc = a->phase == P_DONE ? a->rc : DLOCK__AGAIN;
    while (rc == DLOCK__AGAIN) {
        int64_t wake, left;
        int n = dlock__attempt_pollfds(a, pfd, MAX_FDS, &wake), r;
        if (n > MAX_FDS)
            n = MAX_FDS; /* the rest is polled next time round */
        left = wake - dlock__now_ms();
        left = left < 0 ? 0 : left > 60000 ? 60000 : left;
        if (left > 0)
            dlock__nb_blocking();
        r = poll(pfd, (nfds_t)n, (int)left);
        rc = dlock__attempt_process(a, pfd, r > 0 ? n : 0);
    }
    *g = a->g;
    if (a->err[0] != '\0')
        dlock__set_error(c, rc, "%s", a->err);
    dlock__attempt_free(a);
    return rc;
}
