/*
 * ops.c - the loop's lock operations (include/dlock_loop.h): an acquire
 * as attempts (acquire.lua on the command connection) and waits between
 * them that obey the one wait policy (hold/wait.h: dlock__wait_next, as
 * the blocking wait does) on the loop's clock, woken by the loop's
 * subscriptions (notify: the lock's channel; fair: the queue in Redis,
 * its place refreshed, the handoff channel; spin: none); the give-back
 * of what a failed or cancelled acquire may hold (fair_leave.lua,
 * release.lua); release, extend; the holds' renewal in batches on the
 * loop's clock and the report of a lease lost. Fenced set / get are in
 * fenced.c; the give-back's requests in giveback.c; the public acquires'
 * entry in ops_start.c.
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

/* Holds renewed in one extend.lua call at most. */
#define BATCH_MAX 200

/* op on (or off) the loop's timed list, the walked one. */
static void list_set(dlock_op *op, int on)
{
    dlock_loop *l = op->loop;
    if (on) {
        op->tprev = NULL;
        op->tnext = l->timed;
        if (l->timed != NULL)
            l->timed->tprev = op;
        l->timed = op;
        return;
    }
    if (op->tprev != NULL)
        op->tprev->tnext = op->tnext;
    else
        l->timed = op->tnext;
    if (op->tnext != NULL)
        op->tnext->tprev = op->tprev;
    op->tnext = op->tprev = NULL;
}

/* The time a timed op next needs the loop: its wake-up when it sleeps,
 * its deadline when it waits for a message; -1 otherwise. */
static int64_t timed_key(const dlock_op *op)
{
    if (op->state == ST_SLEEP)
        return op->wake_at;
    if (op->state == ST_SUBWAIT && op->deadline > 0)
        return op->deadline;
    return -1;
}

/* op goes on (or off) the loop's clock: the op clock (otimer.c) at its
 * key; the timed list when it has none (an op sent again while timed:
 * only its deadline is looked at, as before) or the clock has no room.
 * Call again after changing its state or wake-up time. */
static void timed_set(dlock_op *op, int on)
{
    dlock_loop *l = op->loop;
    int64_t t = on ? timed_key(op) : -1;
    if (on && t >= 0 && dloop__otimer_set(l, op, t) == DLOCK_OK) {
        if (op->timed == 1)
            list_set(op, 0);
        op->timed = 2;
        return;
    }
    dloop__otimer_del(l, op);
    if (on && op->timed != 1)
        list_set(op, 1);
    else if (!on && op->timed == 1)
        list_set(op, 0);
    op->timed = on ? 1 : 0;
}

/* Leave op's subscriptions (its waiter links: wnext on the lock's
 * channel, hwnext on its handoff channel). */
static void unsub(dlock_op *op)
{
    if (op->sub != NULL) {
        if (op->wprev != NULL)
            op->wprev->wnext = op->wnext;
        else
            op->sub->waiters = op->wnext;
        if (op->wnext != NULL)
            op->wnext->wprev = op->wprev;
        op->wnext = op->wprev = NULL;
        dloop__sub_put(op->loop, op->sub);
    }
    if (op->hsub != NULL) {
        if (op->hwprev != NULL)
            op->hwprev->hwnext = op->hwnext;
        else
            op->hsub->waiters = op->hwnext;
        if (op->hwnext != NULL)
            op->hwnext->hwprev = op->hwprev;
        op->hwnext = op->hwprev = NULL;
        dloop__sub_put(op->loop, op->hsub);
    }
    op->sub = op->hsub = NULL;
}

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
    unsub(op);
    timed_set(op, 0);
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

/* Sleep op until when, never past its deadline; wake: a message on its
 * channels ends the sleep too (the wait policy's W_WAKE). */
static void sleep_until(dlock_op *op, int64_t when, int wake)
{
    if (op->deadline >= 0 && when > op->deadline)
        when = op->deadline;
    op->state = ST_SLEEP;
    op->wake_at = when;
    op->wakeable = (unsigned char)(wake != 0);
    timed_set(op, 1);
}

/* Subscribe op to its lock's channels (a permit: the handoff channel
 * only, where releases wake or serve its waiters); 1 when it must wait
 * for the confirmation first. */
static int subscribe(dlock_op *op)
{
    dlock_hold *h = op->hold;
    dlock_loop *l = op->loop;
    int permit = h->k.kind == DLOCK__KIND_PERMIT;
    if (op->sub == NULL && op->hsub == NULL) {
        /* A queued (fair) waiter listens on the handoff channel only, as
         * the blocking API's does: a release hands over or wakes there,
         * and the name's channel counts notify waiters (status). */
        if (!permit && !op->fair) {
            op->sub = dloop__sub_get(l, h->k.chan, h->k.chanlen);
            if (op->sub == NULL)
                return 0;
            op->wnext = op->sub->waiters;
            if (op->sub->waiters != NULL)
                op->sub->waiters->wprev = op;
            op->sub->waiters = op;
        }
        if (op->fair || permit) {
            op->hsub = dloop__sub_get(l, h->k.hchan, h->k.hchanlen);
            if (op->hsub != NULL) {
                op->hwnext = op->hsub->waiters;
                if (op->hsub->waiters != NULL)
                    op->hsub->waiters->hwprev = op;
                op->hsub->waiters = op;
            }
        }
    }
    if ((op->sub != NULL && op->sub->state != 2) ||
        (op->hsub != NULL && op->hsub->state != 2))
        return 1;
    op->subscribed = 1;
    return 0;
}

/* Whether op's waiting attempts hold a place in a queue, and its
 * strategy after the fallbacks: the blocking wait's rule (wait.h:
 * dlock__wait_strategy; a fair lock, a permit but under spin). */
static int op_strategy(const dlock_op *op, int *queued)
{
    return dlock__wait_strategy(dlock__kind_of(op->hold->k.kind), op->strategy,
                                queued);
}

/* op's wait state for the one wait policy (hold/wait.h), made from its
 * fields (the op pool's blocks stay small): one server, not Sentinel;
 * the strategy after the fallbacks (op->strategy is the spin one once
 * its subscription was refused), the backoff's round, the outage's
 * streak and the subscription are the op's. */
static void wait_of(const dlock_op *op, dlock__wait *x)
{
    dlock_client *c = op->loop->c;
    memset(x, 0, sizeof *x);
    x->strategy = op_strategy(op, &x->queued);
    x->subscribed = op->subscribed;
    x->deadline = op->deadline;
    x->spin_min_ms = c->opts.spin_min_ms;
    x->spin_max_ms = c->opts.spin_max_ms;
    x->round = op->round;
    x->ride_ms = atomic_load(&c->outage_ride_ms);
    x->outage_since = op->outage_since;
    x->outage_rc = op->last_rc;
    x->pttl = -1;
}

/* See loop_impl.h. */
void dloop__wait_done(dlock_op *op, int rc)
{
    if (rc == DLOCK_TIMEDOUT)
        dloop__complete(op, rc, "gave up waiting for %s", op->hold->k.name);
    else
        dloop__complete(op, rc, NULL); /* the attempt's message */
}

/* Obey the wait policy after op's attempt came to rc (g: what it got),
 * as the blocking wait and an engine loop's do: sleep on the loop's
 * clock until the time it says; a W_WAKE sleep also ends on a message
 * on op's channels, and is over at once when one came while the attempt
 * was out (the blocking waiter's notifier keeps such a wake too); or
 * complete with the policy's status (the attempt's message). */
static void obey(dlock_op *op, int rc, const dlock__got *g, int64_t now)
{
    dlock__wait x;
    int64_t until = 0;
    int out = rc;
    dlock__next next;
    wait_of(op, &x);
    next = dlock__wait_next(&x, rc, g, now, &until, &out);
    op->round = x.round;
    op->outage_since = x.outage_since;
    if (next == DLOCK__W_TRY || (next == DLOCK__W_WAKE && op->woken)) {
        op->again(op);
    } else if (next == DLOCK__W_DONE) {
        dloop__wait_done(op, out);
    } else {
        sleep_until(op, until, next == DLOCK__W_WAKE);
    }
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
    obey(op, rc, &g, now);
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
    sleep_until(op, dlock__now_ms() + (left > 0 ? left : 1), 0);
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

/* op's subscription is settled (subscribe() said so): confirmed, or
 * the server refused SUBSCRIBE (ACL NOPERM: lsub.c then confirms the
 * channels asked and sets l->sub_refused, the loop's only record of a
 * refusal), or it has no channel (out of memory). Refused or none: the
 * wait's fallback, as the blocking wait's and an engine loop's (wait.c:
 * dlock__wait_unsubscribed): a fair lock stays queued and polls, any
 * other waiter spins. Its channels stay joined until it ends (no message
 * will come on them). */
static void sub_settled(dlock_op *op)
{
    dlock__wait x;
    if (op->type != OP_LOCK ||
        (!op->loop->sub_refused && (op->sub != NULL || op->hsub != NULL)))
        return;
    wait_of(op, &x);
    dlock__wait_unsubscribed(&x, dlock__kind_of(op->hold->k.kind));
    op->strategy = x.strategy;
    op->subscribed = 0;
}

/* The try found the name held and op waits: the wait begins as the
 * blocking wait's (wait.c): subscribe (not under spin), then try once
 * more at once, after the subscription's confirmation when it needs one,
 * so that a release between the try and the subscription is not missed;
 * from then on the policy decides (obey). */
static void wait_begin(dlock_op *op)
{
    int queued;
    dloop__ev_count(op->loop, DLOOP_EV_BUSY);
    dloop__ev_count(op->loop, DLOOP_EV_WAIT);
    op->waited = 1;
    (void)op_strategy(op, &queued);
    op->queued = queued; /* its waiting attempts may take a place */
    if (op->strategy != DLOCK_WAIT_SPIN) {
        if (subscribe(op)) {
            op->state = ST_SUBWAIT;
            timed_set(op, op->deadline > 0);
            return;
        }
        sub_settled(op);
    }
    op->again(op);
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
        dloop__complete(op, DLOCK_TIMEDOUT, "gave up waiting for %s",
                        op->hold->k.name);
        return;
    }
    if (!op->waited) {
        wait_begin(op);
        return;
    }
    memset(&g, 0, sizeof g);
    g.pttl = t->pttl;
    g.nbusy = t->nbusy;
    g.ahead = t->ahead;
    g.place_ms = t->place_ms;
    obey(op, DLOCK_BUSY, &g, now);
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
    int queued, s = op_strategy(op, &queued);
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
    timed_set(op, 0);
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

int dloop__op_wake(dlock_op *op)
{
    if (op->state == ST_SUBWAIT || (op->state == ST_SLEEP && op->wakeable)) {
        op->again(op);
        return 1;
    }
    if (op->state == ST_OUT)
        op->woken = 1;
    return 0;
}

void dloop__wait_sleep(dlock_op *op, int64_t when)
{
    if (op->woken) { /* a message came while its look was out */
        op->woken = 0;
        when = dlock__now_ms(); /* look again on the next process */
    }
    sleep_until(op, when, 1);
}

int dloop__wait_subscribe(dlock_op *op)
{
    if (!subscribe(op))
        return 0;
    op->state = ST_SUBWAIT;
    timed_set(op, op->deadline > 0);
    return 1;
}

/* The waiter after op on s's list: a handoff channel links its waiters
 * by hwnext, a lock's channel by wnext. */
static dlock_op *waiter_next(const dlock_op *op, const lsub *s)
{
    return op->hsub == s ? op->hwnext : op->wnext;
}

/* s is confirmed (or refused): each of its waiters whose channels are
 * all settled now counts as subscribed (or falls back, sub_settled); one
 * that waited for it tries once more. A waiter that slept meanwhile (its
 * subscriber was lost and reopened: dloop__sub_lost) is subscribed again
 * for the policy without a try. */
void dloop__on_subscribed(dlock_loop *l, lsub *s)
{
    dlock_op *op, *next;
    (void)l;
    for (op = s->waiters; op != NULL; op = next) {
        next = waiter_next(op, s);
        if (subscribe(op))
            continue; /* its other channel is not confirmed yet */
        sub_settled(op);
        if (op->state == ST_SUBWAIT)
            op->again(op); /* the try once more */
    }
}

/* A message on a channel: 'r ID' wakes the name's waiters; on a handoff
 * channel 'h TOKEN OWNER' / 'w ID OWNER' wakes the one named. */
void dloop__on_message(dlock_loop *l, lsub *s, const char *msg, size_t len)
{
    dlock_op *op, *next;
    const char *owner = NULL;
    if (len > 2 && (msg[0] == 'h' || msg[0] == 'w')) {
        owner = memchr(msg + 2, ' ', len - 2);
        if (owner == NULL)
            return;
        owner++;
        /* The waiter named (a lock's: the only one of this loop). */
        for (op = s->waiters; op != NULL; op = op->hwnext)
            if (op->hold != NULL &&
                strlen(op->hold->owner) == len - (size_t)(owner - msg) &&
                memcmp(op->hold->owner, owner, len - (size_t)(owner - msg)) ==
                    0) {
                if (dloop__op_wake(op))
                    dloop__ev_count(l, DLOOP_EV_WAKEUP);
                break;
            }
        return;
    }
    for (op = s->waiters; op != NULL; op = next) {
        next = waiter_next(op, s);
        if (dloop__op_wake(op))
            dloop__ev_count(l, DLOOP_EV_WAKEUP);
    }
}

/* The subscriber failed: no message comes until it is reopened and its
 * channels confirmed again (dloop__on_subscribed). A waiter waiting for
 * its confirmation tries again after 100 ms; every waiting acquire counts
 * as unsubscribed for the policy meanwhile. */
void dloop__sub_lost(dlock_loop *l)
{
    dlock_op *op;
    for (op = l->ops; op != NULL; op = op->next) {
        if (op->type != OP_LOCK)
            continue;
        op->subscribed = 0;
        if (op->state == ST_SUBWAIT)
            sleep_until(op, dlock__now_ms() + 100, 0);
    }
}

/* A timed op's time has come (ops_time): its deadline, or its wake-up. 1
 * when it was neither (it stays timed). */
static int op_due(dlock_op *op, int64_t now)
{
    if (op->deadline > 0 && now >= op->deadline) {
        /* Within a lock-delay the blocking wait's status, the delay's
         * words (dloop__delay_words); an outage's error says itself. */
        if (op->last_rc == DLOCK_LOCK_DELAY)
            dloop__complete(op, DLOCK_TIMEDOUT, NULL);
        else if (op->last_rc != DLOCK_OK)
            dloop__complete(op, op->last_rc, NULL);
        else
            dloop__complete(op, DLOCK_TIMEDOUT, "gave up waiting for %s",
                            op->hold->k.name);
    } else if (op->state == ST_SLEEP && now >= op->wake_at) {
        op->again(op);
    } else {
        return 1;
    }
    return 0;
}

void dloop__ops_time(dlock_loop *l, int64_t now)
{
    dlock_op *op, *next;
    /* The clock's due ops; one put back (or another made due) meanwhile
     * waits for the next pass. */
    size_t budget = l->notm;
    while (budget-- > 0 && (op = dloop__otimer_pop(l, now)) != NULL) {
        /* On the list while handled, as every timed op was before the
         * clock: its next step says where it goes (an attempt sent off
         * the clock by dloop__attempt(), or kept timed by its deadline as
         * multi_node.c's and elect.c's; a sleep back on the clock). */
        list_set(op, 1);
        op->timed = 1;
        if (op_due(op, now))
            timed_set(op, 1); /* back on the clock by its time */
    }
    for (op = l->timed; op != NULL; op = next) {
        next = op->tnext;
        (void)op_due(op, now);
    }
}

int64_t dloop__ops_wake(const dlock_loop *l)
{
    const dlock_op *op;
    int64_t w = dloop__otimer_min(l);
    for (op = l->timed; op != NULL; op = op->tnext) {
        int64_t t = timed_key(op);
        if (t >= 0 && (w < 0 || t < w))
            w = t;
    }
    return w;
}
