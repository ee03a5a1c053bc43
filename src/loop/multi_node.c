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
#include <time.h>

#include "hold/holder.h"
#include "hold/kind.h"
#include "hold/release.h"
#include "notify/notify.h"
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
    if (j->rec != NULL)
        dlock__held_free(j->rec); /* its pins dropped when it came */
    if (j->res != NULL)
        dlock__results_clear(j->res, j->nres);
    free(j->res);
    free(j->cmds);
    free(j->bufs);
    free(j->ks);
    free(j->kls);
    free(j->num);
    free(j->pfd);
    free(j->blob);
    free(j);
}

/* One step of j: what its descriptors have now, what the clock asks. */
static void job_step(mjob *j)
{
    int r = j->n > 0 ? poll(j->pfd, (nfds_t)j->n, 0) : 0;
    int n = r > 0 ? j->n : 0;
    dlock__nb_enter(); /* the loop's thread: no blocking wait below */
    if (j->a != NULL) {
        j->rc = dlock__attempt_process(j->a, j->pfd, n);
        j->finished = j->rc != DLOCK__AGAIN;
    } else {
        j->finished = dlock__call_process(j->k, j->pfd, n);
    }
    if (!j->finished)
        job_pollfds(j);
    dlock__nb_leave();
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
    dloop__mn_waits(l);
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
int dloop__jobs_detached(const dlock_loop *l)
{
    const mjob *j;
    int n = 0;
    for (j = l->jobs; j != NULL; j = j->next)
        n += j->op == NULL;
    return n;
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
    uint64_t mask = c->ns.cluster != NULL ? ~0ULL
                    : j->first            ? 1
                                          : dlock__all_nodes(c);
    int rc;
    dlock__nb_enter(); /* the loop's thread: no blocking wait below */
    rc = dlock__call_start(&j->k, &c->ns, c->scripts, j->cmds, j->ncmds, mask,
                           dlock__deadline(c, 0), j->res);
    if (rc == DLOCK_OK)
        job_link(l, j);
    else
        dloop__job_free(j);
    dlock__nb_leave();
    return rc == DLOCK_OK ? DLOCK_OK : DLOCK_ENOMEM;
}

/* ---- one script, routed ------------------------------------------------- */

/* The request's answer: node 0's (the master: Sentinel, a cluster's
 * slot; the first server of a fixed set) to its caller. */
static void send_done(mjob *j)
{
    const dlock__result *r = &j->res[0];
    j->fn(j->l, j->op, r->status, r->reply, r->err, r->sent);
}

/* A new job for op (NULL: none) of one command: cmd's script with
 * copies of its keys and arguments (the caller's may live on its
 * stack), sent to node 0 only when first (else as dloop__job_call
 * sends). NULL out of memory. */
static mjob *cmd_job(dlock_loop *l, dlock_op *op, const dlock__cmd *cmd,
                     int first)
{
    dlock_client *c = l->c;
    int nk = cmd->nkeys, n = cmd->nkeys + cmd->nargs, i;
    size_t total = 0;
    char *p;
    mjob *j = dloop__job_new(op, 1, c->ns.cluster != NULL ? 1 : c->ns.n);
    for (i = 0; i < n; i++)
        total += i < nk ? cmd->keylens[i] : cmd->arglens[i - nk];
    if (j == NULL ||
        (j->ks = malloc((size_t)(n + 1) * sizeof *j->ks)) == NULL ||
        (j->kls = malloc((size_t)(n + 1) * sizeof *j->kls)) == NULL ||
        (j->blob = malloc(total + 1)) == NULL) {
        if (j != NULL)
            dloop__job_free(j);
        return NULL;
    }
    for (p = j->blob, i = 0; i < n; i++) {
        const char *v = i < nk ? cmd->keys[i] : cmd->args[i - nk];
        size_t len = i < nk ? cmd->keylens[i] : cmd->arglens[i - nk];
        memcpy(p, v, len);
        j->ks[i] = p;
        j->kls[i] = len;
        p += len;
    }
    j->cmds[0] = *cmd;
    j->cmds[0].keys = j->ks;
    j->cmds[0].keylens = j->kls;
    j->cmds[0].args = j->ks + nk;
    j->cmds[0].arglens = j->kls + nk;
    j->cmds[0].pins = NULL;
    j->first = first;
    return j;
}

/* Redlock's election (the blocking API's rules, src/api/election.c):
 * the answers of every node, voted. */

/* The proclaim of a fixed set answered: done when a majority wrote (1);
 * a majority that answered otherwise: not the owner (a node's 0 to the
 * caller); else the failure. */
static void proclaim_vote(mjob *j)
{
    int i, yes = -1, no = -1, answered = 0, nyes = 0, fail = -1;
    for (i = 0; i < j->nres; i++) {
        const dlock__result *r = &j->res[i];
        if (r->status != DLOCK_OK || r->reply->type != REDIS_REPLY_INTEGER) {
            if (fail < 0 && r->status != DLOCK_OK)
                fail = i;
            continue;
        }
        answered++;
        if (r->reply->integer == 1) {
            nyes++;
            yes = i;
        } else {
            no = i;
        }
    }
    if (nyes >= j->l->c->ns.quorum)
        i = yes;
    else if (answered >= j->l->c->ns.quorum)
        i = no >= 0 ? no : yes;
    else
        i = fail;
    if (i < 0) {
        j->fn(j->l, j->op, DLOCK_NO_QUORUM, NULL, "too few servers answered",
              1);
        return;
    }
    j->fn(j->l, j->op, j->res[i].status, j->res[i].reply, j->res[i].err, 1);
}

/* elect_leader.lua's answer r: its kind (0 none, 1 proclaimed, 2 held,
 * not proclaimed), -1 malformed; *owner, *epoch. */
static int leader_kind(const redisReply *r, const redisReply **owner,
                       uint64_t *epoch)
{
    long long k;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    k = r->element[0]->integer;
    if (k == 0)
        return 0;
    if ((k != 1 || r->elements < 6) && (k != 2 || r->elements < 4))
        return -1;
    *owner = r->element[1];
    *epoch = (uint64_t)dlock__elem_int(r, 2);
    return (int)k;
}

/* The leader look of a fixed set answered: the owner a majority names,
 * its newest view (a proclaimed one first, then the highest epoch) to
 * the caller; none named by a majority: no leader. */
static void leader_vote(mjob *j)
{
    static redisReply zero = {.type = REDIS_REPLY_INTEGER, .integer = 0};
    static redisReply *zeros[1] = {&zero};
    static redisReply none = {
        .type = REDIS_REPLY_ARRAY, .elements = 1, .element = zeros};
    const redisReply *own[DLOCK_MAX_SERVERS];
    uint64_t ep[DLOCK_MAX_SERVERS];
    int kind[DLOCK_MAX_SERVERS];
    int i, k, answered = 0, fail = -1, q = j->l->c->ns.quorum;
    for (i = 0; i < j->nres; i++) {
        kind[i] = -1;
        if (j->res[i].status != DLOCK_OK) {
            if (fail < 0)
                fail = i;
            continue;
        }
        kind[i] = leader_kind(j->res[i].reply, &own[i], &ep[i]);
        answered += kind[i] >= 0;
    }
    if (answered < q) {
        j->fn(j->l, j->op, fail >= 0 ? j->res[fail].status : DLOCK_NO_QUORUM,
              NULL, fail >= 0 ? j->res[fail].err : "too few servers answered",
              1);
        return;
    }
    for (i = 0; i < j->nres; i++) {
        int agree = 0, best = -1;
        if (kind[i] < 1)
            continue;
        for (k = 0; k < j->nres; k++) {
            if (kind[k] < 1 || own[k]->len != own[i]->len ||
                memcmp(own[k]->str, own[i]->str, own[i]->len) != 0)
                continue;
            agree++;
            if (best < 0 || (kind[k] == 1 && kind[best] != 1) ||
                (kind[k] == kind[best] && ep[k] > ep[best]))
                best = k;
        }
        if (agree >= q) {
            j->fn(j->l, j->op, DLOCK_OK, j->res[best].reply, "", 1);
            return;
        }
    }
    j->fn(j->l, j->op, DLOCK_OK, &none, "", 1);
}

/* See loop_impl.h. */
int dloop__mn_send(dlock_op *op, int script, int nkeys, const char **keys,
                   const size_t *keylens, int nargs, const char **args,
                   const size_t *arglens, lreq_fn fn)
{
    dlock_loop *l = op->loop;
    dlock__cmd cmd;
    mjob *j;
    int vote;
    if (op->mn == NULL && dloop__mop_new(op) != DLOCK_OK)
        return DLOCK_OK; /* completed: out of memory */
    memset(&cmd, 0, sizeof cmd);
    cmd.script = script;
    cmd.nkeys = nkeys;
    cmd.keys = keys;
    cmd.keylens = keylens;
    cmd.nargs = nargs;
    cmd.args = args;
    cmd.arglens = arglens;
    /* Redlock's election asks every node and votes; the rest goes to
     * the one node that serves it. */
    vote =
        l->c->ns.cluster == NULL && l->c->ns.n > 1 &&
        (script == DLOCK__S_ELECT_PROCLAIM || script == DLOCK__S_ELECT_LEADER);
    j = cmd_job(l, op, &cmd, !vote);
    if (j == NULL)
        return DLOCK_ENOMEM;
    j->fn = fn;
    j->done = !vote                               ? send_done
              : script == DLOCK__S_ELECT_PROCLAIM ? proclaim_vote
                                                  : leader_vote;
    op->mn->job = j;
    if (dloop__job_call(l, j) != DLOCK_OK) {
        op->mn->job = NULL;
        return DLOCK_ENOMEM;
    }
    return DLOCK_OK;
}

/* A best-effort write answered: nothing waits for it. */
static void dropped_done(mjob *j)
{
    (void)j;
}

/* Send cmd (copied) as a call nobody waits for (every node of a fixed
 * set, or routed in a cluster): best effort. */
static void detached(dlock_loop *l, const dlock__cmd *cmd)
{
    mjob *j = cmd_job(l, NULL, cmd, 0);
    if (j == NULL)
        return; /* best effort */
    j->done = dropped_done;
    dloop__job_call(l, j);
}

/* See loop_impl.h. */
int dloop__op_send(dlock_op *op, int script, int nkeys, const char **keys,
                   const size_t *keylens, int nargs, const char **args,
                   const size_t *arglens, lreq_fn fn)
{
    if (op->loop->engine)
        return dloop__mn_send(op, script, nkeys, keys, keylens, nargs, args,
                              arglens, fn);
    return dloop__send(op->loop, script, nkeys, keys, keylens, nargs, args,
                       arglens, fn, op, &op->req);
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
    memset(&e, 0, sizeof e);
    e.events = EPOLLIN;
    if ((m->efd = dlock__waiter_fd(m->sub)) < 0 ||
        (e.data.fd = m->efd,
         epoll_ctl(l->epfd, EPOLL_CTL_ADD, m->efd, &e) != 0)) {
        m->efd = -1;
        dlock__notify_end(m->sub);
        m->sub = NULL;
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
    dlock__ask ask;
    dlock__want w;
    mjob *j = dloop__job_new(op, 0, 0);
    int fifo = x->queued && x->strategy == DLOCK_WAIT_FAIR;
    memset(&w, 0, sizeof w);
    w.kind = h->k.kind;
    w.lease_ms = h->lease_ms;
    w.limit = h->limit;
    w.ignore_mark = h->ignore_mark;
    if (!m->begun) {
        ask = x->strategy == DLOCK_WAIT_FAIR ? DLOCK__ASK_TRY_FAIR
                                             : DLOCK__ASK_TRY;
    } else {
        if (fifo && m->ticket == 0 && c->ns.n > 1) {
            /* The same place on every node (wait.c's rule): the wall
             * clock when this waiter first queues. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            m->ticket =
                (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
        }
        if (x->queued && m->sub != NULL)
            dlock__notify_handoff_reset(m->sub);
        ask = fifo        ? DLOCK__ASK_FIFO
              : x->queued ? DLOCK__ASK_QUEUE
                          : DLOCK__ASK_WAIT;
    }
    op->state = ST_OUT;
    op->wake_at = -1;
    m->wakeable = 0;
    dlock__nb_enter(); /* the loop's thread: no blocking wait below */
    if (j == NULL || dlock__attempt_start(
                         &j->a, c, h->rec, &w, ask,
                         ask == DLOCK__ASK_FIFO ? m->ticket : 0) != DLOCK_OK) {
        if (j != NULL)
            dloop__job_free(j);
        dlock__nb_leave();
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    j->done = attempt_done;
    m->job = j;
    job_link(op->loop, j);
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
        if (out == DLOCK_TIMEDOUT)
            dloop__complete(op, out, "gave up waiting for %s",
                            op->hold->k.name);
        else
            dloop__complete(op, out, NULL); /* the attempt's message */
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
                           atomic_load(&c->cancel_gen)) != DLOCK_OK ||
        (m->efd = dlock__waiter_fd(m->sub)) < 0) {
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

/* op's wait slept its time out (ops.c calls op->again), or was woken. */
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
 * (epoll is level-triggered); what woke it is kept by the notifier. */
void dloop__mn_waits(dlock_loop *l)
{
    dlock_op *op, *next;
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
        /* valid_until = sent + lease - drift (attempt.c) */
        dloop__hold_granted(op, g->token, g->valid_until - h->lease_ms + drift);
        return;
    }
    if (j->rc == DLOCK_BUSY) {
        atomic_fetch_add(&c->stats.busy, 1);
        if (op->mn->begun)
            atomic_fetch_add(&c->stats.waits, 1);
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
    mjob *j = dloop__job_new(NULL, 1, nres);
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

/* See loop_impl.h. */
void dloop__mn_abort(dlock_op *op)
{
    dlock_hold *h = op->hold;
    struct mop *m = op->mn;
    int leave = 0, give_up = 0;
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
int dloop__mn_refuse(dlock_loop *l, const char *what)
{
    if (!l->engine)
        return DLOCK_OK;
    return dlock__set_error(l->c, DLOCK_EINVAL,
                            "%s: not implemented yet on a loop over several "
                            "servers, Sentinel or Cluster",
                            what);
}
