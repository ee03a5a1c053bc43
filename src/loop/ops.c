/*
 * ops.c - the loop's acquire on one server (include/dlock_loop.h): its
 * attempts (the kind's acquire script on the command connection), their
 * answers judged by hold's code (kind.h, verdict.h), the grant (after
 * the replicas' WAIT on a durable loop), the lock-delay; between the
 * attempts the wait (waits.c: the one wait policy on the loop's clock and
 * subscriptions); the end of an op and the give-back of what a failed or
 * cancelled acquire may hold (giveback.c's requests). The public
 * acquires' entry is ops_start.c; release, extend and the renewal rounds
 * are holds.c's, fenced set / get fenced.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/kind.h"
#include "hold/held.h"
#include "hold/verdict.h"
#include "hold/wait.h"
#include "loop/loop_impl.h"
#include "topo/cluster_delay.h"

/* op is ending (completion or cancel): its metrics and event
 * (events.c), then detach it from its request, subscriptions and sleep;
 * an acquire not granted gives back what it may hold (the request out,
 * an answer lost, its fair queue place). */
void dloop__op_abort(dlock_op *op)
{
    dlock_hold *h = op->hold;
    dloop__ev_op_ended(op, op->status); /* first: it reads op->hold */
    if (op->extending && h != NULL) {   /* renewal rounds of h may go on */
        op->extending = 0;
        h->extending--;
        dloop__hold_sched(h);
    }
    dloop__unsub(op);
    dloop__timed_set(op, 0);
    if (op->end != NULL) { /* an engine loop's op, several locks' */
        op->end(op);
        return;
    }
    if (op->type == OP_LOCK && h != NULL && h->held && op->status != DLOCK_OK) {
        /* A campaign cancelled while it proclaims: give the lock back. */
        if (op->req != NULL)
            op->req->fn = NULL;
        op->req = NULL;
        h->gone = 1;
        h->renew = 0;
        dloop__giveback_release(op->loop, h, 1, h->token);
        op->hold = NULL;
        dloop__hold_unref(h);
        return;
    }
    if (op->type != OP_LOCK || h == NULL || h->held) {
        if (op->req != NULL)
            op->req->fn = NULL;
        op->req = NULL;
        return;
    }
    dloop__name_drop(h);
    if (op->acking) { /* granted, its WAIT out: the grant goes back */
        if (op->req != NULL)
            op->req->fn = NULL;
        op->req = NULL;
        op->acking = 0;
        dloop__giveback(op->loop, h, op->token);
        op->hold = NULL;
        dloop__hold_unref(h);
        return;
    }
    if (h->k.kind == DLOCK__KIND_PERMIT) {
        /* One leave, behind the attempt still out (one connection, FIFO):
         * it takes the queue place and a permit granted or handed. */
        if (op->req != NULL) { /* its answer decides (a NOSCRIPT answer
                                  * is sent again behind what follows) */
            op->req->fn = dloop__gb_sem_reply;
            op->req->ctx = h;
            h->refs++;
            op->req = NULL;
        } else if (op->queued || op->maybe) {
            dloop__sem_leave(op->loop, h);
        }
        op->hold = NULL;
        dloop__hold_unref(h);
        return;
    }
    if (op->req != NULL) {
        /* Its answer decides: a grant (or a queue place) is given back. */
        op->req->fn = op->fair && op->queued ? dloop__gb_leave_reply
                                             : dloop__gb_acquire_reply;
        op->req->ctx = h;
        h->refs++;
        op->req = NULL;
        if (op->fair && op->queued)
            dloop__giveback_leave(op->loop, h);
    } else if (op->fair && op->queued) {
        dloop__giveback_leave(op->loop, h);
    }
    if (op->maybe)
        dloop__giveback_release(op->loop, h, 1, 0);
    if (op->waited && h->k.kind == DLOCK__KIND_LOCK)
        dloop__writer_leave(op->loop, h);
    op->hold = NULL;
    dloop__hold_unref(h);
}

/* An acquire's attempt failed with rc (err: its message; sent: the
 * request went out, so a grant may be ours): a try fails; a wait obeys
 * the policy: an outage (dlock__outage_retryable) is ridden out after
 * the spin backoff, for the client's outage ride in a row at most
 * (dlock_client_set_outage_ride_ms) and never past the deadline; any
 * other error ends the wait with its status. */
static void attempt_failed(dlock_op *op, int rc, const char *err, int sent)
{
    int64_t now = dlock__now_ms();
    dlock__got g;
    if (sent)
        op->maybe = 1;
    op->last_rc = rc;
    snprintf(op->err, sizeof op->err, "%s", err);
    if (op->deadline == 0 || (op->deadline > 0 && now >= op->deadline)) {
        dloop__complete(op, rc, NULL);
        return;
    }
    memset(&g, 0, sizeof g);
    g.pttl = -1;
    g.notready = rc == DLOCK_ESERVER && dlock__reply_notready(err);
    dloop__obey(op, rc, &g, now);
}

/* See loop_impl.h. */
void dloop__hold_granted(dlock_op *op, uint64_t token, int64_t sent_ms)
{
    dlock_hold *h = op->hold;
    dlock_loop *l = op->loop;
    h->held = 1;
    h->token = token;
    h->valid_until = dlock__valid_until(l->c, sent_ms, h->lease_ms);
    if (h->renew) {
        h->renew_at = sent_ms + h->lease_ms / 3;
        dloop__hold_sched(h);
    }
    h->hnext = l->holds;
    if (l->holds != NULL)
        l->holds->hprev = h;
    l->holds = h;
    op->maybe = 0;
    if (l->watchdog)
        dloop__wd_adopt(h);
    dloop__holder_record(l, h);
    if (op->proclaim != NULL) { /* a campaign won: proclaim, then complete */
        if (op->proclaim(op, h, op->key, op->keylen) != DLOCK_OK)
            dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    dloop__complete(op, DLOCK_OK, "%s", "");
}

/* The lock-delay (dlock_options.lock_delay_ms) on a loop over one server:
 * when the server's identity changed (a restart: the command connection
 * reopened to a new run id) no new grant is had for the delay. 1 when it
 * runs for op's name: a try completes with DLOCK_LOCK_DELAY, a wait
 * sleeps it out (its deadline first). An engine loop's attempts apply it
 * themselves. */
static int lock_delayed(dlock_op *op)
{
    dlock_hold *h = op->hold;
    int64_t left = 0;
    /* Off (0: the default on one server) sets no delay: no clock read. */
    if (op->loop->engine || op->loop->c->ns.lock_delay_ms <= 0 ||
        dlock__delayed_for(&op->loop->c->ns, h->k.key, h->k.keylen, &left) == 0)
        return 0;
    dloop__delay_words(op, left);
    if (op->deadline == 0) {
        dloop__complete(op, DLOCK_LOCK_DELAY, NULL);
        return 1;
    }
    op->last_rc = DLOCK_LOCK_DELAY; /* a deadline reached: TIMEDOUT, why */
    dloop__sleep_until(op, dlock__now_ms() + (left > 0 ? left : 1), 0);
    return 1;
}

/* wait_replicas: WAIT answered for op's grant (op->token): held, or
 * given back and failed (a try) or tried again (a wait). */
static void acq_acked(dlock_op *op, int rc, const char *msg)
{
    if (rc == DLOCK_OK) {
        dloop__hold_granted(op, op->token, op->arg_lease);
        return;
    }
    char err[LOOP_ERRLEN];
    dloop__giveback(op->loop, op->hold, op->token);
    snprintf(err, sizeof err, "acquire %s: given back", msg);
    /* Too few replicas is an outage to the wait policy: a wait rides it
     * out (attempt_failed). */
    attempt_failed(op, rc, err, 0);
}

/* The lock is ours (token): granted, after the replicas'
 * acknowledgements on a durable loop; given back when the lock-delay
 * says the open before found a new master. */
static void acq_granted(dlock_op *op, uint64_t token)
{
    dlock_loop *l = op->loop;
    op->maybe = op->queued = 0;
    op->token = token;
    if (lock_delayed(op)) { /* the open before it found a new master */
        dloop__giveback(l, op->hold, op->token);
        return;
    }
    if (!dloop__durable(l))
        dloop__hold_granted(op, op->token, op->arg_lease);
    else
        dloop__op_acks(op, acq_acked);
}

/* Busy (the verdict; t: the tally of the answer): a try-only op
 * completes, a timed-out wait gives up, the first busy answer begins the
 * wait, a later one asks the policy with what the answer says (the
 * tally read as hold/attempt.c reads it for one node: the holder's lease
 * left, the last token granted, a live waiter ahead, the queue place's
 * life). */
static void acq_busy(dlock_op *op, const dlock__tally *t, int64_t now)
{
    dlock__got g;
    /* An answer ends an outage's streak (the wait policy's rule): a
     * deadline reached from now on is a timeout. */
    op->outage_since = 0;
    op->last_rc = DLOCK_OK;
    if (op->deadline == 0) {
        dloop__complete(op, DLOCK_BUSY, "%s: held by another owner",
                        op->hold->k.name);
        return;
    }
    if (op->deadline > 0 && now >= op->deadline) {
        /* op->queued stays: a place its waiting attempts took is left
         * (a permit's under notify too, as the blocking wait's). */
        dloop__wait_done(op, DLOCK_TIMEDOUT);
        return;
    }
    if (!op->waited) {
        dloop__wait_begin(op);
        return;
    }
    memset(&g, 0, sizeof g);
    g.pttl = t->pttl;
    g.nbusy = t->nbusy;
    g.ahead = t->ahead;
    g.place_ms = t->place_ms;
    dloop__obey(op, DLOCK_BUSY, &g, now);
}

/* The kind's acquire script answered op's attempt (one server: one
 * node's answer): a refusal, else the blocking API's tally and verdict
 * (verdict.h) with the validity left: granted, busy, a grant too late
 * (given back: a failed attempt), or a failure (attempt_failed). */
static void acq_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                      const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock_hold *h = op->hold;
    int64_t now = dlock__now_ms(), took = now - op->arg_lease;
    dlock__result res;
    dlock__tally t;
    (void)l;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        if (!dloop__op_wrongtype(op, rc, err))
            attempt_failed(op, rc, err, sent);
        return;
    }
    if (op->plain && r->type == REDIS_REPLY_NIL) {
        /* The plain SET NX found the name taken: ask the script, which
         * says by whom and for how long and marks the hold for a notify
         * waiter (hold/attempt.c does the same). */
        op->scripted = 1;
        dloop__attempt(op);
        return;
    }
    op->maybe = 0;               /* an answer: nothing taken but what it says */
    res.status = DLOCK_OK;       /* what the tally and the refusal read */
    res.reply = (redisReply *)r; /* read only */
    res.sent = 1;
    res.pending = 0;
    if (dloop__op_refused(op, &res))
        return;
    dlock__acquire_tally_as(&t, &res, 1, op->plain);
    if (t.bad) {
        attempt_failed(op, DLOCK_EPROTO, "acquire: a malformed reply", 1);
        return;
    }
    switch (dlock__acquire_verdict(
        &t, 1, 0,
        dlock__valid_until(op->loop->c, op->arg_lease, h->lease_ms) - now)) {
    case DLOCK__V_GRANTED:
        acq_granted(op, t.tmax);
        return;
    case DLOCK__V_BUSY:
        acq_busy(op, &t, now);
        return;
    case DLOCK__V_TOO_LATE: {
        char why[LOOP_ERRLEN];
        dloop__giveback(op->loop, h, t.tmax);
        dloop__too_late_words(op, took);
        snprintf(why, sizeof why, "%s", op->err);
        attempt_failed(op, DLOCK_NO_QUORUM, why, 0);
        return;
    }
    default: /* {-1, ...}: no earlier hold of ours to have expired */
        dloop__complete(op, DLOCK_EPROTO, "acquire: unexpected state");
        return;
    }
}

/* How op's next attempt asks (the kind table maps it to its script's
 * mode): the one rule of every wait (wait.h: dlock__wait_ask). A lock's
 * waiting attempt is a waiting writer's: readers holding the name let no
 * new reader in (rw_acquire.lua reads the mark). */
static dlock__ask ask_of(const dlock_op *op)
{
    int queued, s = dloop__op_strategy(op, &queued);
    return dlock__wait_ask(op->deadline == 0 || !op->waited, s, queued);
}

/* Send op's next attempt: its kind's acquire command (kind.h). */
void dloop__attempt(dlock_op *op)
{
    dlock_hold *h = op->hold;
    dlock__cmdbuf b;
    dlock__held rec; /* what the command builder reads: keys, owner, depth */
    dlock__want w;
    char plain[DLOCK__PLAIN_VAL]; /* the plain SET's value, while b is used */
    int rc;
    dloop__attempt_spec(op, &rec, &w);
    if (op->loop->c->ns.lock_delay_ms > 0) /* the delay is at least it */
        dlock__nodes_note_lease(&op->loop->c->ns, h->lease_ms);
    if (lock_delayed(op))
        return;
    op->state = ST_OUT;
    op->wake_at = -1;
    op->woken = 0; /* a message from now on may be newer than its answer */
    dloop__timed_set(op, 0);
    op->arg_lease = dlock__now_ms(); /* the validity counts from here */
    /* A lazy-token hold's first try may be the plain SET NX PX: the
     * blocking API's one decision (kind.h), w.token_now from the hold. */
    op->plain =
        !op->scripted &&
        dlock__plain_acquire_cmd(&b, op->loop->c, &rec, &w, ask_of(op), plain);
    if (!op->plain)
        dlock__kind_of(h->k.kind)->acquire_cmd(&b, op->loop->c, &rec, &w,
                                               ask_of(op), 0);
    rc = dloop__send_cmd(op->loop, &b.cmd, acq_reply, op, &op->req);
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
}
