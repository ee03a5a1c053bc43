/*
 * multi_node.c - the loop on a client of several servers (Redlock),
 * Sentinel or Cluster (include/dlock_loop.h): there the loop does not
 * use its own pipelined connection (lconn.c) but the library's one engine
 * (engine/call.h) and one attempt (hold/attempt.h), as jobs of the loop.
 *
 * A job is an attempt or an engine call in flight (mn_jobs.c); one
 * script routed or voted is mn_send.c's.
 *
 * An acquire is attempts and waits between them; the wait obeys the one
 * policy (hold/wait.h: dlock__wait_next: the spin backoff, the outage
 * riding, the lock-delay) and sleeps on the loop's clock (waits.c). A
 * notify or fair wait joins the client's notifier (notify/notify.h: one
 * subscriber per server per client) and is woken through its own
 * eventfd in the loop's epoll set; a fair wait queues as the blocking
 * API does (Redlock: on a majority). Release, extend and the loop's
 * renewal rounds are engine calls (node_holds.c). An acquire cancelled
 * gives back what its attempt may hold (dlock__attempt_free: by the
 * client's watchdog).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "hold/holder.h"
#include "hold/kind.h"
#include "hold/release.h"
#include "notify/notify.h"
#include "loop/multi_node.h"

/* A best-effort write answered: nothing waits for it. */
static void dropped_done(mjob *j)
{
    (void)j;
}

/* Send cmd (copied) as a call nobody waits for (every node of a fixed
 * set, or routed in a cluster): best effort. */
static void detached(dlock_loop *l, const dlock__cmd *cmd)
{
    mjob *j = dloop__cmd_job(l, NULL, cmd, 0);
    if (j == NULL)
        return; /* best effort */
    j->done = dropped_done;
    dloop__job_call(l, j);
}

/* See loop_impl.h. */
int dloop__mn_watch(dlock_op *op)
{
    dlock_loop *l = op->loop;
    dlock_client *c = l->c;
    struct epoll_event e;
    struct mop *m;
    if (op->mn == NULL && dloop__mop_new(op) != DLOCK_OK)
        return 1; /* completed: out of memory */
    m = op->mn;
    if (dlock__notify_join(c->notifier, op->hold->k.chan, op->hold->k.chanlen,
                           NULL, &m->sub,
                           atomic_load(&c->cancel_gen)) != DLOCK_OK)
        return 0;
    l->mn_nsub++;
    memset(&e, 0, sizeof e);
    e.events = EPOLLIN;
    if ((m->efd = dlock__waiter_fd(m->sub)) < 0 ||
        (e.data.fd = m->efd,
         epoll_ctl(l->epfd, EPOLL_CTL_ADD, m->efd, &e) != 0)) {
        m->efd = -1;
        dlock__notify_end(m->sub);
        m->sub = NULL;
        l->mn_nsub--;
        return 0;
    }
    m->subwait = 1;
    dloop__wait_sleep(op, dlock__now_ms() + c->opts.command_timeout_ms);
    return 1;
}

/* See loop_impl.h. */
void dloop__mn_sleep(dlock_op *op, int64_t until)
{
    dloop__wait_sleep(op, until);
    if (op->mn != NULL)
        op->mn->wakeable = op->mn->sub != NULL;
}

/* ---- the acquire ---------------------------------------------------------- */

static void attempt_done(mjob *j);

/* Start op's next attempt: the first (TRY, or TRY_FAIR: respects the
 * queue without joining it), else a waiting one asking as the blocking
 * wait's (wait.c: FIFO with a ticket over Redlock, QUEUE, WAIT). */
static void try_next(dlock_op *op)
{
    dlock_hold *h = op->hold;
    struct mop *m = op->mn;
    dlock__wait *x = &m->x;
    dlock_client *c = op->loop->c;
    dlock__lanes_ctx prev;
    dlock__ask ask;
    dlock__want w;
    mjob *j = dloop__job_new(op->loop, op, 0, 0, dlock__attempt_size(c));
    memset(&w, 0, sizeof w);
    w.kind = h->k.kind;
    w.lease_ms = h->lease_ms;
    w.limit = h->limit;
    w.ignore_mark = h->ignore_mark;
    w.token_now = 1; /* dlock_hold_token answers without a round trip */
    ask = dlock__wait_ask(!m->begun, x->strategy, x->queued);
    if (ask == DLOCK__ASK_FIFO && m->ticket == 0 && c->ns.n > 1)
        m->ticket = dlock__wait_ticket(); /* the same place on every node */
    if (m->begun && x->queued && m->sub != NULL)
        dlock__notify_handoff_reset(m->sub);
    op->state = ST_OUT;
    op->wake_at = -1;
    m->wakeable = 0;
    dlock__nb_enter(); /* the loop's thread: no blocking wait below */
    prev = dloop__lanes_enter(op->loop, j);
    if (j == NULL || dlock__attempt_start(
                         &j->a, j->extra, c, h->rec, &w, ask,
                         ask == DLOCK__ASK_FIFO ? m->ticket : 0) != DLOCK_OK) {
        if (j != NULL)
            dloop__job_free(j);
        dloop__lanes_leave(prev);
        dlock__nb_leave();
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    j->done = attempt_done;
    m->job = j;
    dloop__job_link(op->loop, j);
    dloop__lanes_leave(prev);
    dlock__nb_leave();
}

/* Obey the wait's policy after rc (an attempt's status, with g, or
 * DLOCK__SLEPT). */
static void wait_on(dlock_op *op, int rc, const dlock__got *g)
{
    int64_t until = 0;
    int out = DLOCK_OK;
    dlock__next next =
        dlock__wait_next(&op->mn->x, rc, g, dlock__now_ms(), &until, &out);
    if (next == DLOCK__W_TRY) {
        try_next(op);
    } else if (next == DLOCK__W_DONE) {
        dloop__wait_done(op, out);
    } else {
        op->waited = 1;
        dloop__wait_sleep(op, until);
        /* A wake (a release, a handoff naming it) ends a W_WAKE sleep
         * early (dloop__mn_waits). */
        op->mn->wakeable = next == DLOCK__W_WAKE && op->mn->sub != NULL;
    }
}

/* Take op's wake-up descriptor out of the loop's epoll set and end its
 * subscription. */
static void unsubscribe(dlock_op *op)
{
    struct mop *m = op->mn;
    if (m->efd >= 0)
        epoll_ctl(op->loop->epfd, EPOLL_CTL_DEL, m->efd, NULL);
    m->efd = -1;
    if (m->sub != NULL)
        op->loop->mn_nsub--;
    dlock__notify_end(m->sub); /* closes the descriptor */
    m->sub = NULL;
    m->subwait = 0;
}

/* The subscription was refused (polling: the ACL) or not confirmed in
 * time: the wait's fallback (wait.c: dlock__wait_unsubscribed). */
static void unsubscribed(dlock_op *op, int polling)
{
    dlock_loop *l = op->loop;
    unsubscribe(op);
    dlock__wait_unsubscribed(&op->mn->x, op->mn->k);
    if (polling && !l->sub_refused) {
        l->sub_refused = 1;
        snprintf(l->warn, sizeof l->warn, "%s",
                 "the servers refused SUBSCRIBE (ACL): waiters poll");
    }
}

/* The wait begins after the first attempt: subscribe (the channel the
 * blocking wait uses: the name's, or for a queued waiter its process's
 * handoff channel), without waiting here: the subscription's
 * confirmation wakes the loop (dloop__mn_waits), which then tries. A
 * spin wait, or one that cannot subscribe, tries by the policy. */
static void wait_begin(dlock_op *op)
{
    dlock_loop *l = op->loop;
    dlock_client *c = l->c;
    struct mop *m = op->mn;
    const char *chan, *owner;
    size_t len;
    int64_t now = dlock__now_ms(), until;
    struct epoll_event e;
    m->begun = 1;
    if (m->x.strategy == DLOCK_WAIT_SPIN) {
        wait_on(op, DLOCK__SLEPT, NULL);
        return;
    }
    if (atomic_load(&c->nopub) && now < atomic_load(&c->nosub_until_ms)) {
        unsubscribed(op, 1); /* refused moments ago: do not ask again */
        wait_on(op, DLOCK__SLEPT, NULL);
        return;
    }
    dlock__wait_channel(op->hold->rec, m->x.queued, &chan, &len, &owner);
    if (dlock__notify_join(c->notifier, chan, len, owner, &m->sub,
                           atomic_load(&c->cancel_gen)) == DLOCK_OK)
        l->mn_nsub++; /* set m->sub; counted down by unsubscribe */
    if (m->sub == NULL || (m->efd = dlock__waiter_fd(m->sub)) < 0) {
        unsubscribed(op, 0);
        wait_on(op, DLOCK__SLEPT, NULL);
        return;
    }
    memset(&e, 0, sizeof e);
    e.events = EPOLLIN;
    e.data.fd = m->efd;
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, m->efd, &e) != 0) {
        unsubscribed(op, 0);
        wait_on(op, DLOCK__SLEPT, NULL);
        return;
    }
    m->subwait = 1;
    until = now + c->opts.command_timeout_ms;
    op->waited = 1;
    dloop__wait_sleep(op, until); /* the confirmation, or fall back */
}

/* op's wait slept its time out (waits.c calls op->again), or was woken. */
static void again(dlock_op *op)
{
    struct mop *m = op->mn;
    if (m->subwait) { /* not confirmed in time: without notifications */
        unsubscribed(op, 0);
        if (op->state == ST_DONE)
            return;
    }
    wait_on(op, DLOCK__SLEPT, NULL);
}

/* See loop_impl.h. The engine loop's waiters: a confirmed subscription
 * starts the wait's tries; a release or a handoff naming the waiter
 * ends its W_WAKE sleep (its next attempt confirms a lock handed to it,
 * as the loop's own waiters do). Each waiter's descriptor is emptied
 * (epoll is level-triggered); what woke it is kept by the notifier.
 * Walks the ops only while one of them is subscribed (l->mn_nsub): a
 * loop with thousands of ops in flight and no engine waiter pays
 * nothing here on each process. */
void dloop__mn_waits(dlock_loop *l)
{
    dlock_op *op, *next;
    if (l->mn_nsub == 0)
        return; /* no subscribed op: no walk of every op */
    for (op = l->ops; op != NULL; op = next) {
        struct mop *m = op->mn;
        next = op->next;
        if (m == NULL || m->sub == NULL)
            continue;
        dlock__waiter_fd_clear(m->sub);
        if (op->state != ST_SLEEP)
            continue;                /* an attempt is out: its answer decides */
        if (op->type == OP_LEADER) { /* a leader wait: ask again */
            int r = m->subwait    ? dlock__notify_ready(m->sub)
                    : m->wakeable ? dlock__notify_look(m->sub, 0)
                                  : 0;
            if (r == 0)
                continue;
            m->subwait = 0;
            if (r < 0)
                unsubscribe(op);
            op->again(op);
            continue;
        }
        if (m->subwait) {
            int r = dlock__notify_ready(m->sub);
            if (r == 0)
                continue;
            m->subwait = 0;
            if (r == 1)
                m->x.subscribed = 1;
            else
                unsubscribed(op, r == DLOCK_EAUTH);
            wait_on(op, DLOCK__SLEPT, NULL);
        } else if (m->wakeable && dlock__notify_look(m->sub, m->x.queued)) {
            wait_on(op, DLOCK__SLEPT, NULL);
        }
    }
}

/* Holder info for h, just granted (holder.c's rule: a client that
 * records it, a kind that carries it): holder_set.lua as a call on every
 * node (a cluster: the name's master) that nobody waits for. */
static void holder_record(dlock_loop *l, dlock_hold *h)
{
    dlock__cmdbuf b;
    char *ikey;
    if (!dloop__holder_renews(l, h->k.kind))
        return;
    ikey = malloc(h->k.keylen + sizeof DLOCK__HOLDER_SUFFIX);
    if (ikey == NULL)
        return;
    dlock__holder_set_cmd(l->c, &b, &h->k, ikey, h->owner);
    detached(l, &b.cmd); /* copied */
    free(ikey);
}

/* The attempt is over. */
static void attempt_done(mjob *j)
{
    dlock_op *op = j->op;
    dlock_hold *h = op->hold;
    dlock_client *c = op->loop->c;
    const dlock__got *g = dlock__attempt_got(j->a);
    const char *m = dlock__attempt_errmsg(j->a);
    int64_t drift = dlock__drift(c, h->lease_ms);
    dlock__wait *x = &op->mn->x;
    if (m[0] != '\0')
        snprintf(op->err, sizeof op->err, "%s", m);
    if (j->rc == DLOCK_OK) {
        /* An attempt whose give-back went unanswered took a new owner id
         * for the next (withdraw.h): the grant is under the record's. */
        memcpy(h->owner, h->rec->owner, sizeof h->owner);
        holder_record(op->loop, h);
        /* The sent time back from valid_until (dlock__valid_until) */
        dloop__hold_granted(op, g->token, g->valid_until - h->lease_ms + drift);
        return;
    }
    if (j->rc == DLOCK_BUSY) {
        atomic_fetch_add(&c->stats.busy, 1);
        if (op->mn->begun)
            atomic_fetch_add(&c->stats.waits, 1);
    }
    /* A wait that times out during an outage says the outage's error
     * (waits.c: dloop__ops_time). */
    op->last_rc =
        j->rc == DLOCK_BUSY || j->rc == DLOCK_LOCK_DELAY ? DLOCK_OK : j->rc;
    if (op->deadline == 0) {
        if (j->rc == DLOCK_BUSY)
            dloop__complete(op, DLOCK_BUSY, "%s: held by another owner",
                            h->k.name);
        else
            dloop__complete(op, j->rc, NULL);
        return;
    }
    if (op->mn->begun) {
        wait_on(op, j->rc, g);
        return;
    }
    /* The first attempt: the blocking acquire's rule (take.c) for what
     * a wait may begin on. */
    if (j->rc == DLOCK_BUSY) {
        x->pttl = g->pttl;
    } else if (j->rc != DLOCK_LOCK_DELAY) {
        if (x->no_ride ||
            !dlock__outage_retryable(x->sentinel, j->rc, g->notready)) {
            dloop__complete(op, j->rc, NULL);
            return;
        }
        x->outage_since = dlock__now_ms();
        x->outage_rc = j->rc;
    }
    wait_begin(op);
}

/* See multi_node.h. */
int dloop__mop_new(dlock_op *op)
{
    op->mn = calloc(1, sizeof *op->mn);
    if (op->mn != NULL) {
        op->mn->efd = -1;
        op->end = dloop__mn_abort;
        return DLOCK_OK;
    }
    dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_ENOMEM;
}

/* See loop_impl.h. */
void dloop__mn_acquire(dlock_op *op)
{
    dlock_loop *l = op->loop;
    dlock_client *c = l->c;
    dlock_hold *h = op->hold;
    const dlock__kind *k = dlock__kind_of(h->k.kind);
    dlock__wait *x;
    if (dloop__mop_new(op) != DLOCK_OK)
        return;
    if (c->ns.n > 1 && !k->redlock_ok) {
        dloop__complete(op, DLOCK_EINVAL,
                        "%s: a %s is not available over several servers "
                        "(Redlock)",
                        h->k.name, k->noun);
        return;
    }
    h->rec = dlock__held_new(c, h->k.name, h->owner);
    if (h->rec == NULL) {
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    h->rec->k.kind = h->k.kind;
    op->mn->k = k;
    x = &op->mn->x;
    /* The blocking wait's strategy and queueing (wait.c). */
    x->strategy = dlock__wait_strategy(k, op->strategy, &x->queued);
    x->sentinel = c->ns.kind == DLOCK__TOPO_SENTINEL;
    x->deadline = op->deadline;
    x->spin_min_ms = c->opts.spin_min_ms;
    x->ride_ms = atomic_load(&c->outage_ride_ms);
    x->spin_max_ms = c->opts.spin_max_ms;
    x->pttl = -1;
    op->fair = x->queued && x->strategy == DLOCK_WAIT_FAIR;
    op->again = again;
    try_next(op);
}

/* ---- the end of an op and of a hold ---------------------------------------- */

static void giveback_start(dlock_loop *l, dlock__held *rec, int leave,
                           int give_up);

/* A queue leave answered: a lock handed to the waiter meanwhile (one
 * master: fair_leave.lua says 1 and its token) goes back through the
 * client's watchdog (release.h: dlock__undo_queue), which hands it on;
 * then the writer's mark, when the wait leaves one. */
static void leave_done(mjob *j)
{
    dlock_client *c = j->l->c;
    uint64_t mask = 0, tok = 0;
    int i;
    if (j->rec->k.kind == DLOCK__KIND_LOCK) {
        for (i = 0; i < j->nres; i++)
            if (j->res[i].status == DLOCK_OK &&
                dlock__elem_int(j->res[i].reply, 0) == 1) {
                uint64_t t = (uint64_t)dlock__elem_int(j->res[i].reply, 1);
                mask |= 1ULL << i;
                if (t > tok)
                    tok = t;
            }
        if (mask != 0)
            dlock__undo_queue(c, j->rec, mask, 1, tok,
                              dlock__now_ms() + DLOCK__FAIR_HANDOFF_MS);
    }
    if (j->give_up) {
        giveback_start(j->l, j->rec, 0, 1);
        j->rec = NULL; /* the next job's */
    }
}

/* Give back what a waiting acquire of rec (taken over: freed with the
 * job) left on the servers, with nobody waiting for the answers: its
 * queue place (leave: fair_leave.lua on every node, or the semaphore's
 * leave), then (give_up) a waiting writer's mark (rw_leave.lua). The
 * blocking wait's kind->leave and kind->give_up, as engine calls. */
static void giveback_start(dlock_loop *l, dlock__held *rec, int leave,
                           int give_up)
{
    dlock_client *c = l->c;
    int nres = c->ns.cluster != NULL ? 1 : c->ns.n;
    mjob *j = dloop__job_new(l, NULL, 1, nres, 0);
    char *id;
    dlock__held_drop_pins(c, rec);
    if (j == NULL) {
        dlock__held_free(rec); /* the place and mark run out by themselves */
        return;
    }
    j->rec = rec;
    if (leave && rec->k.kind == DLOCK__KIND_PERMIT) {
        dlock__permit_leave_cmd(&j->bufs[0], c, &rec->k, rec->owner);
    } else if (leave) {
        dlock__cmd_begin(&j->bufs[0], DLOCK__S_FAIR_LEAVE);
        dlock__lock_keys(&j->bufs[0], &rec->k, 4);
        dlock__cmd_arg(&j->bufs[0], rec->owner, strlen(rec->owner));
    } else {
        id = j->relid; /* as a release's id: the readers woken by it */
        dlock__cmd_begin(&j->bufs[0], DLOCK__S_RW_LEAVE);
        dlock__cmd_key(&j->bufs[0], rec->k.key, rec->k.keylen);
        dlock__cmd_arg(&j->bufs[0], rec->owner, strlen(rec->owner));
        dlock__cmd_arg(&j->bufs[0], rec->k.chan, rec->k.chanlen);
        dlock__cmd_arg(&j->bufs[0], id, dlock__request_id(c, id));
        dlock__cmd_arg(&j->bufs[0], c->ns.cluster != NULL ? "1" : "0", 1);
    }
    j->cmds[0] = j->bufs[0].cmd;
    j->cmds[0].give_back = 1;
    j->give_up = leave && give_up;
    j->done = leave ? leave_done : dropped_done;
    dloop__job_call(l, j); /* out of memory: freed, they run out */
}

/* An extend's or downgrade's call answered (or its time is up) after
 * its op ended: renewal rounds and extends of its hold may go again. */
static void late_done(mjob *j)
{
    dlock_hold *h = j->late;
    j->late = NULL;
    if (j->ncmds > 0 && j->cmds[0].script == DLOCK__S_RW_DOWNGRADE)
        h->downgrading = 0;
    h->extending--;
    dloop__hold_sched(h);
    dloop__hold_unref(h);
}

/* An extend or a downgrade of h ends while its call j is out: the
 * call goes on, detached, and h counts as extending until it is
 * answered (its request may still run on the servers: a renewal round
 * sent beside it, on another connection, could run before it). */
static void keep_out(dlock_hold *h, mjob *j)
{
    j->op = NULL;
    j->late = h;
    j->done = late_done;
    h->refs++;
    h->extending++; /* counted out by dloop__op_abort */
    if (j->batch != NULL) {
        free(j->batch); /* an extend's own batch */
        j->batch = NULL;
    }
}

/* See loop_impl.h. */
void dloop__mn_abort(dlock_op *op)
{
    dlock_hold *h = op->hold;
    struct mop *m = op->mn;
    int leave = 0, give_up = 0;
    if (m->job != NULL && h != NULL && !m->job->finished &&
        (op->type == OP_EXTEND || op->type == OP_DOWNGRADE)) {
        keep_out(h, m->job);
        m->job = NULL;
    }
    if (m->job != NULL) {
        mjob *j = m->job;
        m->job = NULL;
        if (j->batch != NULL && j->op != NULL)
            free(j->batch); /* an extend's own batch */
        dloop__job_free(j); /* an attempt cut short gives back */
    }
    if (m->sub != NULL)
        unsubscribe(op);
    /* A wait that ends without the name gives back its queue place and
     * (timed out or cancelled) a writer's mark, as the blocking wait's
     * end does (wait.c). */
    if (m->begun && op->type == OP_LOCK && h != NULL && !h->held &&
        op->status != DLOCK_OK && h->rec != NULL) {
        leave = m->x.queued;
        give_up =
            (op->status == DLOCK_TIMEDOUT || op->status == DLOCK_CANCELED) &&
            m->k->give_up != NULL;
    }
    free(op->mn);
    op->mn = NULL;
    if (op->type == OP_LOCK && h != NULL && h->held && op->status != DLOCK_OK) {
        /* A campaign that won but did not proclaim (cancelled, refused):
         * the lock goes back (the caller gets no hold). */
        dloop__mn_giveback(op->loop, h);
        op->hold = NULL;
        dloop__hold_unref(h);
        return;
    }
    if (op->type != OP_LOCK || h == NULL || h->held)
        return;
    if (leave || give_up) {
        dlock__held *rec = h->rec;
        h->rec = NULL;
        giveback_start(op->loop, rec, leave, give_up);
    }
    dloop__name_drop(h);
    op->hold = NULL;
    dloop__hold_unref(h);
}

/* See loop_impl.h. */
void dloop__mn_giveback(dlock_loop *l, dlock_hold *h)
{
    h->gone = 1;
    h->renew = 0;
    dloop__hold_sched(h);
    if (h->rec != NULL)
        dlock__undo_queue(l->c, h->rec, dlock__all_nodes(l->c), 1, h->token,
                          dlock__now_ms() + h->lease_ms);
}

/* See loop_impl.h. */
void dloop__jobs_run(dlock_loop *l)
{
    l->set_later = 1; /* the set's descriptors put after the callbacks */
    dloop__mn_waits(l);
    dloop__jobs_step(l);
}
