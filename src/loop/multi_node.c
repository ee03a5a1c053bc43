/*
 * multi_node.c - the loop on a client of several servers (Redlock),
 * Sentinel or Cluster (include/dlock_loop.h): there the loop does not
 * use its own pipelined connection (lconn.c) but the library's one engine
 * (engine/call.h) and one attempt (hold/attempt.h), as jobs of the loop.
 *
 * A job is an attempt or an engine call in flight. Its descriptors (the
 * pooled connections it uses, the ones it is opening) are registered in
 * the loop's epoll set, so the loop's fd is readable when one of them
 * is; process polls each job's descriptors without waiting (poll, 0),
 * drives it (dlock__attempt_process / dlock__call_process), and
 * registers the descriptors it asks for next; its wake-up time is in the
 * loop's timeout. A finished job completes what it served.
 *
 * An acquire is attempts and waits between them; the wait obeys the one
 * policy (hold/wait.h: dlock__wait_next: the spin backoff, the outage
 * riding, the lock-delay) and sleeps on the loop's clock (ops.c). It does
 * not subscribe (no wake-up by notification here yet) nor queue (a fair
 * strategy waits as spin). Release, extend and the loop's renewal rounds
 * are engine calls (node_holds.c). An acquire cancelled gives back what
 * its attempt may hold (dlock__attempt_free: by the client's watchdog).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "hold/kind.h"
#include "loop/multi_node.h"

/* ---- jobs ------------------------------------------------------------------- */

/* Ask j for its descriptors and wake-up time. */
static void job_pollfds(mjob *j)
{
    for (;;) {
        int n = j->a != NULL
                    ? dlock__attempt_pollfds(j->a, j->pfd, j->cap, &j->wake)
                    : dlock__call_pollfds(j->k, j->pfd, j->cap, &j->wake);
        struct pollfd *p;
        if (n <= j->cap) {
            j->n = n;
            return;
        }
        p = realloc(j->pfd, (size_t)n * sizeof *p);
        if (p == NULL) { /* polled up to cap: the clock ends it anyway */
            j->n = j->cap;
            return;
        }
        j->pfd = p;
        j->cap = n;
    }
}

static void fds_add(dlock_loop *l, const mjob *j);

/* j is started (a or k set): on the loop's list, done already or polled
 * for. */
static void job_link(dlock_loop *l, mjob *j)
{
    j->l = l;
    j->next = l->jobs;
    if (l->jobs != NULL)
        l->jobs->prev = j;
    l->jobs = j;
    if (j->a != NULL) {
        j->rc = dlock__attempt_process(j->a, NULL, 0);
        j->finished = j->rc != DLOCK__AGAIN;
    } else {
        j->finished = dlock__call_done(j->k);
    }
    if (j->finished) {
        dloop__signal(l);
        return;
    }
    job_pollfds(j);
    fds_add(l, j);
}

/* See multi_node.h. */
void dloop__job_free(mjob *j)
{
    dlock_loop *l = j->l;
    if (l != NULL) {
        if (j->prev != NULL)
            j->prev->next = j->next;
        else
            l->jobs = j->next;
        if (j->next != NULL)
            j->next->prev = j->prev;
    }
    dlock__attempt_free(j->a);
    dlock__call_free(j->k);
    if (j->res != NULL)
        dlock__results_clear(j->res, j->nres);
    free(j->res);
    free(j->cmds);
    free(j->bufs);
    free(j->ks);
    free(j->kls);
    free(j->num);
    free(j->pfd);
    free(j);
}

/* One step of j: what its descriptors have now, what the clock asks. */
static void job_step(mjob *j)
{
    int r = j->n > 0 ? poll(j->pfd, (nfds_t)j->n, 0) : 0;
    int n = r > 0 ? j->n : 0;
    if (j->a != NULL) {
        j->rc = dlock__attempt_process(j->a, j->pfd, n);
        j->finished = j->rc != DLOCK__AGAIN;
    } else {
        j->finished = dlock__call_process(j->k, j->pfd, n);
    }
    if (!j->finished)
        job_pollfds(j);
}

/* Register pfd (its events) in the loop's epoll set: MOD, else ADD (a
 * descriptor closed and reopened under the same number since it was
 * registered is registered again). */
static void fd_put(dlock_loop *l, const struct pollfd *pfd)
{
    struct epoll_event e;
    memset(&e, 0, sizeof e);
    e.events = (pfd->events & POLLIN ? EPOLLIN : 0) |
               (pfd->events & POLLOUT ? EPOLLOUT : 0);
    e.data.fd = pfd->fd;
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, pfd->fd, &e) != 0 && errno == ENOENT)
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, pfd->fd, &e);
}

/* A new job's descriptors, registered now (the loop's fd must wake for
 * them before the next process) and noted in l->mfd. */
static void fds_add(dlock_loop *l, const mjob *j)
{
    int *p, i;
    if (j->n == 0)
        return;
    p = realloc(l->mfd, (size_t)(l->nmfd + j->n) * sizeof *p);
    if (p == NULL)
        return; /* its wake-up time still brings process */
    l->mfd = p;
    for (i = 0; i < j->n; i++) {
        fd_put(l, &j->pfd[i]);
        l->mfd[l->nmfd++] = j->pfd[i].fd;
    }
}

/* Register exactly the descriptors the jobs poll now in the loop's epoll
 * set (fd_put), and take out those no job polls any more. */
static void fds_sync(dlock_loop *l)
{
    int want = 0, i, m = 0;
    mjob *j;
    int *fds;
    for (j = l->jobs; j != NULL; j = j->next)
        want += j->finished ? 0 : j->n;
    fds = want > 0 ? malloc((size_t)want * sizeof *fds) : NULL;
    for (j = l->jobs; j != NULL && fds != NULL; j = j->next) {
        for (i = 0; i < j->n && !j->finished; i++) {
            fd_put(l, &j->pfd[i]);
            fds[m++] = j->pfd[i].fd;
        }
    }
    for (i = 0; i < l->nmfd; i++) {
        int k, keep = 0;
        for (k = 0; k < m && !keep; k++)
            keep = fds[k] == l->mfd[i];
        if (!keep)
            epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->mfd[i], NULL);
    }
    free(l->mfd);
    l->mfd = fds;
    l->nmfd = fds != NULL ? m : 0;
}

/* See loop_impl.h. */
void dloop__jobs_run(dlock_loop *l)
{
    mjob *j;
    for (j = l->jobs; j != NULL; j = j->next)
        if (!j->finished)
            job_step(j);
    /* Completions may start jobs and cancel ops (freeing their jobs):
     * look again from the start after each. */
    for (;;) {
        for (j = l->jobs; j != NULL && !j->finished; j = j->next)
            ;
        if (j == NULL)
            break;
        if (j->op != NULL)
            j->op->mn->job = NULL;
        j->done(j);
        dloop__job_free(j);
    }
    fds_sync(l);
}

/* See loop_impl.h. */
int64_t dloop__jobs_wake(const dlock_loop *l)
{
    const mjob *j;
    int64_t w = -1;
    for (j = l->jobs; j != NULL; j = j->next) {
        int64_t t = j->finished ? 0 : j->wake;
        if (w < 0 || t < w)
            w = t;
    }
    return w;
}

/* See loop_impl.h. */
void dloop__jobs_free(dlock_loop *l)
{
    while (l->jobs != NULL) {
        if (l->jobs->op != NULL)
            l->jobs->op->mn->job = NULL;
        else
            free(l->jobs->batch); /* a renewal round's */
        dloop__job_free(l->jobs);
    }
    fds_sync(l);
}

/* See multi_node.h. */
mjob *dloop__job_new(dlock_op *op, int ncmds, int nres)
{
    mjob *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    j->op = op;
    j->ncmds = ncmds;
    j->nres = nres;
    if (ncmds > 0 &&
        ((j->cmds = calloc((size_t)ncmds, sizeof *j->cmds)) == NULL ||
         (j->bufs = calloc((size_t)ncmds, sizeof *j->bufs)) == NULL)) {
        dloop__job_free(j);
        return NULL;
    }
    if (nres > 0 && (j->res = calloc((size_t)nres, sizeof *j->res)) == NULL) {
        dloop__job_free(j);
        return NULL;
    }
    return j;
}

/* See multi_node.h. */
int dloop__job_call(dlock_loop *l, mjob *j)
{
    dlock_client *c = l->c;
    /* A cluster's calls are one per command, every one of them run. */
    uint64_t mask = c->ns.cluster != NULL ? ~0ULL : dlock__all_nodes(c);
    if (dlock__call_start(&j->k, &c->ns, c->scripts, j->cmds, j->ncmds, mask,
                          dlock__deadline(c, 0), j->res) != DLOCK_OK) {
        dloop__job_free(j);
        return DLOCK_ENOMEM;
    }
    job_link(l, j);
    return DLOCK_OK;
}

/* ---- the acquire ---------------------------------------------------------- */

static void attempt_done(mjob *j);

/* Start op's next attempt (ask as a first try, or a waiting one). */
static void try_next(dlock_op *op)
{
    dlock_hold *h = op->hold;
    dlock__want w;
    mjob *j = dloop__job_new(op, 0, 0);
    memset(&w, 0, sizeof w);
    w.kind = h->k.kind;
    w.lease_ms = h->lease_ms;
    w.limit = h->limit;
    w.ignore_mark = h->ignore_mark;
    op->state = ST_OUT;
    op->wake_at = -1;
    if (j == NULL || dlock__attempt_start(&j->a, op->loop->c, h->rec, &w,
                                          DLOCK__ASK_TRY, 0) != DLOCK_OK) {
        if (j != NULL)
            dloop__job_free(j);
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    j->done = attempt_done;
    op->mn->job = j;
    job_link(op->loop, j);
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
        if (out == DLOCK_TIMEDOUT)
            dloop__complete(op, out, "gave up waiting for %s",
                            op->hold->k.name);
        else
            dloop__complete(op, out, NULL); /* the attempt's message */
    } else {
        op->waited = 1;
        dloop__wait_sleep(op, until);
    }
}

/* op's wait slept its time out (ops.c calls op->again). */
static void again(dlock_op *op)
{
    wait_on(op, DLOCK__SLEPT, NULL);
}

/* The attempt is over. */
static void attempt_done(mjob *j)
{
    dlock_op *op = j->op;
    dlock_hold *h = op->hold;
    const dlock__got *g = dlock__attempt_got(j->a);
    const char *m = dlock__attempt_errmsg(j->a);
    int64_t drift = dlock__drift(op->loop->c, h->lease_ms);
    if (m[0] != '\0')
        snprintf(op->err, sizeof op->err, "%s", m);
    if (j->rc == DLOCK_OK) {
        /* An attempt whose give-back went unanswered took a new owner id
         * for the next (withdraw.h): the grant is under the record's. */
        memcpy(h->owner, h->rec->owner, sizeof h->owner);
        /* valid_until = sent + lease - drift (attempt.c) */
        dloop__hold_granted(op, g->token, g->valid_until - h->lease_ms + drift);
        return;
    }
    /* A wait that times out during an outage says the outage's error
     * (ops.c: dloop__ops_time). */
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
    wait_on(op, j->rc, g);
}

/* See multi_node.h. */
int dloop__mop_new(dlock_op *op)
{
    op->mn = calloc(1, sizeof *op->mn);
    if (op->mn != NULL) {
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
    x = &op->mn->x;
    /* No subscription and no queue here: the policy's unsubscribed
     * wait (the spin backoff). */
    x->strategy = DLOCK_WAIT_SPIN;
    x->queued = 0;
    x->sentinel = c->ns.kind == DLOCK__TOPO_SENTINEL;
    x->deadline = op->deadline;
    x->spin_min_ms = c->opts.spin_min_ms;
    x->spin_max_ms = c->opts.spin_max_ms;
    x->pttl = -1;
    op->fair = 0;
    op->again = again;
    try_next(op);
}

/* ---- the end of an op and of a hold ---------------------------------------- */

/* See loop_impl.h. */
void dloop__mn_abort(dlock_op *op)
{
    dlock_hold *h = op->hold;
    if (op->mn->job != NULL) {
        mjob *j = op->mn->job;
        op->mn->job = NULL;
        if (j->batch != NULL && j->op != NULL)
            free(j->batch); /* an extend's own batch */
        dloop__job_free(j); /* an attempt cut short gives back */
    }
    free(op->mn);
    op->mn = NULL;
    if (op->type != OP_LOCK || h == NULL || h->held)
        return;
    dloop__name_drop(h);
    op->hold = NULL;
    dloop__hold_unref(h);
}

/* See loop_impl.h. */
int dloop__mn_refuse(dlock_loop *l, const char *what)
{
    if (!l->engine)
        return DLOCK_OK;
    return dlock__set_error(l->c, DLOCK_EINVAL,
                            "%s: not implemented yet on a loop over several "
                            "servers, Sentinel or Cluster",
                            what);
}
