/*
 * mn_jobs.c - the jobs of an engine loop (multi_node.h): a job is an
 * attempt or an engine call in flight, its calls on the loop's lane set
 * (engine/lanes.h: one pipelined connection per server, shared by every
 * job; the set entered, with the job as the calls' tag, around a job's
 * start, process and free). The set's descriptors and those of the
 * connections jobs are opening are registered in the loop's epoll set,
 * so the loop's fd is readable when one of them is; process reads the
 * set (each reply handed to its call), then drives the jobs that may go
 * (a call of theirs got something, their clock is due, or they open a
 * connection: their descriptors polled without waiting) and registers
 * what they ask for next; the wake-up times are in the loop's timeout.
 * A finished job completes what it served (its done).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "engine/lanes.h"
#include "notify/notify.h"
#include "loop/multi_node.h"

/* ---- the lane set --------------------------------------------------------- */

/* See multi_node.h. Out of memory: no set, the calls take pooled
 * connections. */
dlock__lanes_ctx dloop__lanes_enter(dlock_loop *l, mjob *j)
{
    if (l->lanes == NULL)
        dlock__lanes_new(&l->lanes, &l->c->ns);
    return dlock__lanes_enter(l->lanes, j);
}

/* See multi_node.h. */
void dloop__lanes_leave(dlock__lanes_ctx prev)
{
    dlock__lanes_leave(prev);
}

/* n descriptors were asked for with room for *cap: 1 when they all fit
 * (*got = n), or no more room can be had (*got = *cap: polled up to
 * there, the clock ends the rest); 0 when *pfd grew to n (ask again). */
static int pfd_fit(struct pollfd **pfd, int *cap, int n, int *got)
{
    struct pollfd *p;
    if (n <= *cap) {
        *got = n;
        return 1;
    }
    p = realloc(*pfd, (size_t)n * sizeof *p);
    if (p == NULL) {
        *got = *cap;
        return 1;
    }
    *pfd = p;
    *cap = n;
    return 0;
}

/* The set's descriptors now, in l->lpfd[0..nlpfd). */
static void lanes_pollfds(dlock_loop *l)
{
    while (!pfd_fit(&l->lpfd, &l->caplpfd,
                    dlock__lanes_pollfds(l->lanes, l->lpfd, l->caplpfd),
                    &l->nlpfd))
        ;
}

/* What the set's descriptors have now: written, read, each reply handed
 * to its call (the jobs are processed after). */
static void lanes_step(dlock_loop *l)
{
    int r;
    if (l->lanes == NULL)
        return;
    lanes_pollfds(l);
    r = l->nlpfd > 0 ? poll(l->lpfd, (nfds_t)l->nlpfd, 0) : 0;
    dlock__lanes_process(l->lanes, l->lpfd, r > 0 ? l->nlpfd : 0);
}

/* ---- jobs ------------------------------------------------------------------- */

/* Ask j for its descriptors and wake-up time. */
static void job_pollfds(mjob *j)
{
    int n;
    do {
        n = j->a != NULL
                ? dlock__attempt_pollfds(j->a, j->pfd, j->cap, &j->wake)
                : dlock__call_pollfds(j->k, j->pfd, j->cap, &j->wake);
    } while (!pfd_fit(&j->pfd, &j->cap, n, &j->n));
}

static void fds_add(dlock_loop *l, const mjob *j);

/* The set's descriptors fds_add compares with those last put (more:
 * all put again). */
#define SET_FDS 16

/* j is started (a or k set): on the loop's list, done already or polled
 * for. */
void dloop__job_link(dlock_loop *l, mjob *j)
{
    j->l = l;
    j->next = l->jobs;
    if (l->jobs != NULL)
        l->jobs->prev = j;
    l->jobs = j;
    if (j->a != NULL) {
        dlock__lanes_ctx prev = dloop__lanes_enter(l, j);
        j->rc = dlock__attempt_process(j->a, NULL, 0);
        j->finished = j->rc != DLOCK__AGAIN;
        dloop__lanes_leave(prev);
    } else {
        j->finished = dlock__call_done(j->k);
    }
    /* Done already, or a call of another job got something (a reply read
     * on the way): process must come. */
    if (j->finished || (l->lanes != NULL && dlock__lanes_kicked(l->lanes)))
        dloop__signal(l);
    if (j->finished)
        return;
    job_pollfds(j);
    fds_add(l, j);
}

/* See multi_node.h. */
void dloop__job_free(mjob *j)
{
    dlock_loop *l = j->l;
    dlock__lanes_ctx prev = {NULL, NULL};
    if (l != NULL) {
        l->jobs_freed++;
        prev = dloop__lanes_enter(l, j);
        if (l->lanes != NULL) /* nothing noted for it is read after */
            dlock__lanes_untag(l->lanes, j);
        if (j->prev != NULL)
            j->prev->next = j->next;
        else
            l->jobs = j->next;
        if (j->next != NULL)
            j->next->prev = j->prev;
    }
    dlock__attempt_free(j->a);
    dlock__call_free(j->k);
    if (l != NULL) {
        if (l->lanes != NULL)
            dlock__lanes_untag(l->lanes, j);
        dloop__lanes_leave(prev);
    }
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
    dlock__lanes_ctx prev = dloop__lanes_enter(j->l, j);
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
    dloop__lanes_leave(prev);
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
    struct pollfd was[SET_FDS];
    int *p, i, nwas = l->nlpfd < SET_FDS ? l->nlpfd : 0;
    /* The set's too, those new or changed since they were last put: a
     * lane opened or taken from the pool, or a request left to write,
     * outside process (an op started) must wake the loop. */
    if (nwas > 0)
        memcpy(was, l->lpfd, (size_t)nwas * sizeof *was);
    l->nlpfd = 0;
    if (l->lanes != NULL)
        lanes_pollfds(l);
    if (j->n + l->nlpfd == 0)
        return;
    p = realloc(l->mfd, (size_t)(l->nmfd + j->n + l->nlpfd) * sizeof *p);
    if (p == NULL)
        return; /* its wake-up time still brings process */
    l->mfd = p;
    for (i = 0; i < j->n; i++) {
        fd_put(l, &j->pfd[i]);
        l->mfd[l->nmfd++] = j->pfd[i].fd;
    }
    for (i = 0; i < l->nlpfd; i++) {
        if (i < nwas && was[i].fd == l->lpfd[i].fd &&
            was[i].events == l->lpfd[i].events)
            continue;
        fd_put(l, &l->lpfd[i]);
        l->mfd[l->nmfd++] = l->lpfd[i].fd;
    }
}

/* Register exactly the descriptors the jobs poll now in the loop's epoll
 * set (fd_put), and take out those no job polls any more. */
static void fds_sync(dlock_loop *l)
{
    int want = 0, i, m = 0;
    mjob *j;
    int *fds;
    l->nlpfd = 0;
    if (l->lanes != NULL)
        lanes_pollfds(l);
    want = l->nlpfd;
    for (j = l->jobs; j != NULL; j = j->next)
        want += j->finished ? 0 : j->n;
    fds = want > 0 ? malloc((size_t)want * sizeof *fds) : NULL;
    for (i = 0; i < l->nlpfd && fds != NULL; i++) {
        fd_put(l, &l->lpfd[i]);
        fds[m++] = l->lpfd[i].fd;
    }
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

/* dlock__lanes_take's: job tag's call got something. */
static void mark(void *tag, void *ud)
{
    (void)ud;
    ((mjob *)tag)->kicked = 1;
}

/* See multi_node.h. */
void dloop__jobs_step(dlock_loop *l)
{
    int rounds = 0;
    mjob *j;
    lanes_step(l);
    do {
        int all = l->lanes == NULL || dlock__lanes_take(l->lanes, mark, NULL);
        int64_t now = dlock__now_ms();
        if (l->lanes != NULL)
            dlock__lanes_kicked(l->lanes); /* what comes now: another round */
        /* The jobs that may go: one of their calls got something, their
         * clock is due, or they open a connection themselves. */
        for (j = l->jobs; j != NULL; j = j->next) {
            if (j->finished ||
                !(all || j->kicked || j->n > 0 || j->wake <= now))
                continue;
            j->kicked = 0;
            job_step(j);
        }
        /* Replies read on the way (into a reader's buffer) go to their
         * calls; a call that got one, or a lane, goes again. */
        if (l->lanes != NULL)
            dlock__lanes_process(l->lanes, NULL, 0);
    } while (l->lanes != NULL && dlock__lanes_kicked(l->lanes) && ++rounds < 4);
    if (rounds == 4)
        dloop__signal(l); /* more to do: process again soon */
    /* Completions may start jobs (linked at the head: one finished at
     * once signals the loop) and cancel ops, freeing their jobs: after a
     * completion that freed another job, look again from the start. */
    j = l->jobs;
    while (j != NULL) {
        mjob *next = j->next;
        unsigned freed = l->jobs_freed;
        if (!j->finished) {
            j = next;
            continue;
        }
        if (j->op != NULL)
            j->op->mn->job = NULL;
        j->done(j);
        dloop__job_free(j);
        j = l->jobs_freed - freed > 1 ? l->jobs : next;
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
    dlock__lanes_free(l->lanes); /* after every call on it */
    l->lanes = NULL;
    free(l->lpfd);
    l->lpfd = NULL;
    l->nlpfd = l->caplpfd = 0;
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
    dlock__lanes_ctx prev = dloop__lanes_enter(l, j);
    int rc;
    dlock__nb_enter(); /* the loop's thread: no blocking wait below */
    rc = dlock__call_start(&j->k, &c->ns, c->scripts, j->cmds, j->ncmds, mask,
                           dlock__deadline(c, 0), j->res);
    if (rc == DLOCK_OK)
        dloop__job_link(l, j);
    else
        dloop__job_free(j);
    dlock__nb_leave();
    dloop__lanes_leave(prev);
    return rc == DLOCK_OK ? DLOCK_OK : DLOCK_ENOMEM;
}

/* See multi_node.h. */
mjob *dloop__cmd_job(dlock_loop *l, dlock_op *op, const dlock__cmd *cmd,
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
