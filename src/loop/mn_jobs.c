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
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "engine/lanes.h"
#include "notify/notify.h"
#include "loop/multi_node.h"

/* The jobs a loop keeps for reuse, at most, per size. */
#define MAX_JSPARE 256

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

/* Ask j for its descriptors and wake-up time (heap, count of the jobs
 * polling their own). */
static void job_pollfds(mjob *j)
{
    dlock_loop *l = j->l;
    int n, was = j->n;
    int64_t wake = j->wake;
    do {
        n = j->a != NULL
                ? dlock__attempt_pollfds(j->a, j->pfd, j->cap, &j->wake)
                : dlock__call_pollfds(j->k, j->pfd, j->cap, &j->wake);
    } while (!pfd_fit(&j->pfd, &j->cap, n, &j->n));
    l->nopening += (j->n > 0) - (was > 0);
    if (was > 0 || j->n > 0)
        l->fds_dirty = 1;
    if (j->hidx == 0 || j->wake != wake)
        dloop__jheap_put(l, j);
}

/* j finished: off the heap, its descriptors no longer polled. */
static void job_finished(mjob *j)
{
    dlock_loop *l = j->l;
    dloop__jfinish(l, j);
    dloop__jheap_del(l, j);
    if (j->n > 0) {
        l->nopening--;
        l->fds_dirty = 1;
    }
    j->n = 0;
}

static void fds_add(dlock_loop *l, const mjob *j);

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
    if (j->finished) {
        job_finished(j);
        return;
    }
    job_pollfds(j);
    fds_add(l, j);
}

/* l's spare jobs of asize bytes: their list, one taken for them when
 * none is (NULL: every list is taken). */
static struct jspare *spare_of(dlock_loop *l, size_t asize)
{
    int i;
    for (i = 0; i < JSPARE_SIZES; i++)
        if (l->jspare[i].asize == asize)
            return &l->jspare[i];
    for (i = 0; i < JSPARE_SIZES; i++)
        if (l->jspare[i].head == NULL) {
            l->jspare[i].asize = asize;
            return &l->jspare[i];
        }
    return NULL;
}

/* A spare job of l of asize bytes, taken off its list, or NULL. */
static mjob *spare_take(dlock_loop *l, size_t asize)
{
    struct jspare *sp = spare_of(l, asize);
    mjob *j = sp != NULL ? sp->head : NULL;
    if (j != NULL) {
        sp->head = j->next;
        sp->n--;
    }
    return j;
}

/* See multi_node.h. */
void dloop__job_free(mjob *j)
{
    dlock_loop *l = j->l;
    struct jspare *sp;
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
        dloop__jheap_del(l, j);
        if (j->kicked)
            dloop__jlist_null(l->jready, l->nready, j);
        if (j->infin)
            dloop__jlist_null(l->jfin, l->nfin, j);
        if (j->n > 0) {
            l->nopening--;
            l->fds_dirty = 1;
        }
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
    free(j->ks); /* res, cmds, bufs and extra are in j's allocation */
    free(j->kls);
    free(j->num);
    free(j->pfd);
    free(j->blob);
    sp = spare_of(j->home, j->asize);
    if (sp != NULL && sp->n < MAX_JSPARE) {
        j->next = sp->head;
        sp->head = j;
        sp->n++;
        return;
    }
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
    else
        job_finished(j);
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

/* Note fd in l->mfd (what is registered), once. */
static void mfd_note(dlock_loop *l, int fd)
{
    int i, *p;
    for (i = 0; i < l->nmfd; i++)
        if (l->mfd[i] == fd)
            return;
    p = realloc(l->mfd, (size_t)(l->nmfd + 1) * sizeof *p);
    if (p == NULL) {
        l->fds_dirty = 1; /* rebuilt at the next sync */
        return;
    }
    l->mfd = p;
    l->mfd[l->nmfd++] = fd;
}

/* The set's descriptors now, those new or changed since they were last
 * put registered (a lane opened, a request left to write); one gone:
 * the epoll set is rebuilt at the next sync. */
static void set_put(dlock_loop *l)
{
    int i, same;
    l->nlpfd = 0;
    if (l->lanes != NULL)
        lanes_pollfds(l);
    same = l->nlpfd == l->nppfd;
    for (i = 0; i < l->nlpfd; i++) {
        if (i < l->nppfd && l->ppfd[i].fd == l->lpfd[i].fd &&
            l->ppfd[i].events == l->lpfd[i].events)
            continue;
        same = same && i < l->nppfd && l->ppfd[i].fd == l->lpfd[i].fd;
        fd_put(l, &l->lpfd[i]);
        mfd_note(l, l->lpfd[i].fd);
    }
    if (!same)
        l->fds_dirty = 1;
    if (l->nlpfd > l->capppfd) {
        struct pollfd *p = realloc(l->ppfd, (size_t)l->nlpfd * sizeof *p);
        if (p == NULL) {
            l->nppfd = 0; /* all put again next time */
            return;
        }
        l->ppfd = p;
        l->capppfd = l->nlpfd;
    }
    if (l->nlpfd > 0)
        memcpy(l->ppfd, l->lpfd, (size_t)l->nlpfd * sizeof *l->ppfd);
    l->nppfd = l->nlpfd;
}

/* A new job's descriptors, registered now (the loop's fd must wake for
 * them before the next process) and noted in l->mfd; the set's too,
 * unless process puts them after its callbacks. */
static void fds_add(dlock_loop *l, const mjob *j)
{
    int i;
    for (i = 0; i < j->n; i++) {
        fd_put(l, &j->pfd[i]);
        mfd_note(l, j->pfd[i].fd);
    }
    if (!l->set_later)
        set_put(l);
}

/* Register exactly the descriptors the set and the jobs poll now in the
 * loop's epoll set (fd_put), and take out those none polls any more:
 * the set's changes only, unless a job's descriptors changed (or one of
 * the set's went). */
static void fds_sync(dlock_loop *l)
{
    int want = 0, i, m = 0;
    mjob *j;
    int *fds;
    set_put(l);
    if (!l->fds_dirty)
        return;
    l->fds_dirty = 0;
    want = l->nlpfd;
    for (j = l->jobs; j != NULL; j = j->next)
        want += j->finished ? 0 : j->n;
    fds = want > 0 ? malloc((size_t)want * sizeof *fds) : NULL;
    if (want > 0 && fds == NULL) {
        l->fds_dirty = 1;
        return; /* the wake-up times still bring process */
    }
    for (i = 0; i < l->nlpfd; i++) {
        fd_put(l, &l->lpfd[i]); /* a lane's number may be reused */
        fds[m++] = l->lpfd[i].fd;
    }
    for (j = l->jobs; j != NULL; j = j->next) {
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
    l->nmfd = m;
}

/* dlock__lanes_take's: job tag's call got something. */
static void mark(void *tag, void *ud)
{
    dloop__jready(ud, tag);
}

/* Step the jobs that may go: one of their calls got something, their
 * clock is due, or they poll descriptors of their own; every job when
 * all (something may concern any call) or a list lost an entry. */
static void jobs_go(dlock_loop *l, int all)
{
    int64_t now = dlock__now_ms();
    int i;
    mjob *j;
    if (all || l->ready_all || l->nopening > 0) {
        for (j = l->jobs; j != NULL; j = j->next) {
            if (j->finished || !(all || l->ready_all || j->kicked || j->n > 0 ||
                                 j->wake <= now))
                continue;
            j->kicked = 0;
            job_step(j);
        }
        l->ready_all = 0;
    } else {
        dloop__jheap_due(l, 0, now);
        for (i = 0; i < l->nready; i++) {
            j = l->jready[i];
            if (j == NULL)
                continue;
            j->kicked = 0;
            l->jready[i] = NULL; /* stepped: no longer on the list */
            if (!j->finished)
                job_step(j);
        }
    }
    for (i = 0; i < l->nready; i++)
        if (l->jready[i] != NULL)
            l->jready[i]->kicked = 0;
    l->nready = 0;
}

/* Complete and free the finished jobs: those on the list now (a job
 * started by a completion that finished at once is left to the next
 * process, which it signalled); every job when the list lost one. */
static void jobs_complete(dlock_loop *l)
{
    int i, n = l->nfin;
    mjob *j;
    for (i = 0; i < n; i++) {
        j = l->jfin[i];
        if (j == NULL)
            continue;
        l->jfin[i] = NULL;
        j->infin = 0;
        if (j->op != NULL)
            j->op->mn->job = NULL;
        j->done(j);
        dloop__job_free(j);
    }
    if (l->fin_all) {
        /* Completions may start jobs and cancel ops, freeing their jobs:
         * after a completion that freed another job, look again from
         * the start. */
        l->fin_all = 0;
        j = l->jobs;
        while (j != NULL) {
            mjob *next = j->next;
            unsigned freed = l->jobs_freed;
            if (!j->finished || j->infin) {
                j = next;
                continue;
            }
            if (j->op != NULL)
                j->op->mn->job = NULL;
            j->done(j);
            dloop__job_free(j);
            j = l->jobs_freed - freed > 1 ? l->jobs : next;
        }
    }
    for (i = 0; i < n; i++)
        l->jfin[i] = NULL;
    dloop__jlist_pack(l->jfin, &l->nfin);
}

/* See multi_node.h. */
void dloop__jobs_step(dlock_loop *l)
{
    int rounds = 0;
    lanes_step(l);
    do {
        int all = l->lanes == NULL || dlock__lanes_take(l->lanes, mark, l);
        if (l->lanes != NULL)
            dlock__lanes_kicked(l->lanes); /* what comes now: another round */
        if (all) /* a lane opened or closed: its descriptor put again */
            l->fds_dirty = 1;
        jobs_go(l, all);
        /* Replies read on the way (into a reader's buffer) go to their
         * calls; a call that got one, or a lane, goes again. */
        if (l->lanes != NULL)
            dlock__lanes_process(l->lanes, NULL, 0);
    } while (l->lanes != NULL && dlock__lanes_kicked(l->lanes) && ++rounds < 4);
    if (rounds == 4)
        dloop__signal(l); /* more to do: process again soon */
    jobs_complete(l);
    if (!l->in_process)
        dloop__jobs_flush(l);
}

/* See loop_impl.h. */
void dloop__jobs_flush(dlock_loop *l)
{
    l->set_later = 0;
    if (l->lanes != NULL) {
        dlock__lanes_flush(l->lanes);
        if (dlock__lanes_kicked(l->lanes))
            dloop__signal(l); /* a lane failed: its calls go on */
    }
    fds_sync(l);
}

/* See loop_impl.h. */
int64_t dloop__jobs_wake(const dlock_loop *l)
{
    if (l->nfin > 0 || l->fin_all)
        return 0;
    if (l->ready_all || l->nopening > 0) {
        const mjob *j;
        int64_t w = -1;
        for (j = l->jobs; j != NULL; j = j->next)
            if (!j->finished && (w < 0 || j->wake < w))
                w = j->wake;
        return w;
    }
    return l->njheap > 0 ? l->jheap[0].wake : -1;
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
    int i;
    while (l->jobs != NULL) {
        if (l->jobs->op != NULL)
            l->jobs->op->mn->job = NULL;
        else
            free(l->jobs->batch); /* a renewal round's */
        dloop__job_free(l->jobs);
    }
    for (i = 0; i < JSPARE_SIZES; i++) {
        while (l->jspare[i].head != NULL) {
            mjob *j = l->jspare[i].head;
            l->jspare[i].head = j->next;
            free(j);
        }
        l->jspare[i].n = 0;
    }
    dlock__lanes_free(l->lanes); /* after every call on it */
    l->lanes = NULL;
    free(l->lpfd);
    l->lpfd = NULL;
    l->nlpfd = l->caplpfd = 0;
    l->set_later = 0;
    l->fds_dirty = 1;
    fds_sync(l);
    free(l->jready);
    free(l->jheap);
    free(l->jfin);
    free(l->ppfd);
    l->jready = l->jfin = NULL;
    l->jheap = NULL;
    l->ppfd = NULL;
    l->nready = l->njheap = l->nfin = l->nppfd = 0;
    l->capready = l->capjheap = l->capfin = l->capppfd = 0;
}

/* n bytes rounded up to keep what follows them aligned. */
static size_t align_up(size_t n)
{
    size_t a = _Alignof(max_align_t);
    return (n + a - 1) / a * a;
}

/* See multi_node.h. The job, its commands, their storage, its results
 * and the extra room in one allocation (freed with it, or kept by l). */
mjob *dloop__job_new(dlock_loop *l, dlock_op *op, int ncmds, int nres,
                     size_t extra)
{
    size_t at = align_up(sizeof(mjob)), cmds, bufs, res, asize;
    char *p;
    mjob *j;
    cmds = at;
    at += align_up((size_t)ncmds * sizeof *j->cmds);
    bufs = at;
    at += align_up((size_t)ncmds * sizeof *j->bufs);
    res = at;
    at += align_up((size_t)nres * sizeof *j->res);
    /* Sizes in steps of 256 bytes, so that jobs with key copies of
     * different lengths find spares. */
    asize = (at + extra + 255) / 256 * 256;
    p = (char *)spare_take(l, asize);
    if (p == NULL && (p = malloc(asize)) == NULL)
        return NULL;
    memset(p, 0, at); /* the extra room is its user's to fill */
    j = (mjob *)p;
    j->home = l;
    j->asize = asize;
    j->op = op;
    j->ncmds = ncmds;
    j->nres = nres;
    if (ncmds > 0) {
        j->cmds = (dlock__cmd *)(p + cmds);
        j->bufs = (dlock__cmdbuf *)(p + bufs);
    }
    if (nres > 0)
        j->res = (dlock__result *)(p + res);
    if (extra > 0)
        j->extra = p + at;
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
    size_t total = 0, arr = (size_t)(n + 1) * (sizeof(char *) + sizeof(size_t));
    const char **ks;
    size_t *kls;
    char *p;
    mjob *j;
    for (i = 0; i < n; i++)
        total += i < nk ? cmd->keylens[i] : cmd->arglens[i - nk];
    /* The keys and arguments copied into the job's extra room: their
     * addresses, their lengths, then their bytes. */
    j = dloop__job_new(l, op, 1, c->ns.cluster != NULL ? 1 : c->ns.n,
                       arr + total + 1);
    if (j == NULL)
        return NULL;
    ks = (const char **)j->extra;
    kls = (size_t *)(ks + n + 1);
    for (p = (char *)(kls + n + 1), i = 0; i < n; i++) {
        const char *v = i < nk ? cmd->keys[i] : cmd->args[i - nk];
        size_t len = i < nk ? cmd->keylens[i] : cmd->arglens[i - nk];
        memcpy(p, v, len);
        ks[i] = p;
        kls[i] = len;
        p += len;
    }
    j->cmds[0] = *cmd;
    j->cmds[0].keys = ks;
    j->cmds[0].keylens = kls;
    j->cmds[0].args = ks + nk;
    j->cmds[0].arglens = kls + nk;
    j->cmds[0].pins = NULL;
    j->first = first;
    return j;
}
