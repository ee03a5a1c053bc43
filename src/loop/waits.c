/*
 * waits.c - the loop's waiting ops (loop_impl.h): their clock (the op
 * clock, otimer.c, and the timed list for what it has no room for), their
 * subscriptions (the loop's channels, lsub.c: a confirmation, a message,
 * the subscriber lost) and the single-server acquire's wait, which obeys
 * the one wait policy (hold/wait.h: dlock__wait_next) as the blocking
 * wait and an engine loop's do. Below ops.c (the attempts); an op's next
 * try is its own hook (op->again).
 */
#include <string.h>

#include "hold/kind.h"
#include "hold/wait.h"
#include "loop/loop_impl.h"

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
void dloop__timed_set(dlock_op *op, int on)
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
void dloop__unsub(dlock_op *op)
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

/* Sleep op until when, never past its deadline; wake: a message on its
 * channels ends the sleep too (the wait policy's W_WAKE). */
void dloop__sleep_until(dlock_op *op, int64_t when, int wake)
{
    if (op->deadline >= 0 && when > op->deadline)
        when = op->deadline;
    op->state = ST_SLEEP;
    op->wake_at = when;
    op->wakeable = (unsigned char)(wake != 0);
    dloop__timed_set(op, 1);
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
int dloop__op_strategy(const dlock_op *op, int *queued)
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
    x->strategy = dloop__op_strategy(op, &x->queued);
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
void dloop__obey(dlock_op *op, int rc, const dlock__got *g, int64_t now)
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
        dloop__sleep_until(op, until, next == DLOCK__W_WAKE);
    }
}

/* op's subscription is settled (subscribe() said so): confirmed, or
 * the server refused SUBSCRIBE (ACL NOPERM: lsub.c settles the channels
 * asked then as refused), or it has no channel (out of memory). Refused
 * or none: the wait's fallback, as the blocking wait's and an engine loop's (wait.c:
 * dlock__wait_unsubscribed): a fair lock stays queued and polls, any
 * other waiter spins. Its channels stay joined until it ends (no message
 * will come on them). */
static void sub_settled(dlock_op *op)
{
    dlock__wait x;
    if (op->type != OP_LOCK || ((op->sub != NULL || op->hsub != NULL) &&
                                !(op->sub != NULL && op->sub->refused) &&
                                !(op->hsub != NULL && op->hsub->refused)))
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
void dloop__wait_begin(dlock_op *op)
{
    int queued;
    dloop__ev_count(op->loop, DLOOP_EV_BUSY);
    dloop__ev_count(op->loop, DLOOP_EV_WAIT);
    op->waited = 1;
    (void)dloop__op_strategy(op, &queued);
    op->queued = queued; /* its waiting attempts may take a place */
    if (op->strategy != DLOCK_WAIT_SPIN) {
        if (subscribe(op)) {
            op->state = ST_SUBWAIT;
            dloop__timed_set(op, op->deadline > 0);
            return;
        }
        sub_settled(op);
    }
    op->again(op);
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
    dloop__sleep_until(op, when, 1);
}

int dloop__wait_subscribe(dlock_op *op)
{
    if (!subscribe(op))
        return 0;
    op->state = ST_SUBWAIT;
    dloop__timed_set(op, op->deadline > 0);
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
            dloop__sleep_until(op, dlock__now_ms() + 100, 0);
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
            dloop__wait_done(op, DLOCK_TIMEDOUT);
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
            dloop__timed_set(op, 1); /* back on the clock by its time */
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
