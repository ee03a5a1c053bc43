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
 * are engine calls: a fixed node set takes one call for a round (every
 * due hold of one kind in one script call per node), a cluster one call
 * per hold routed by its slot. An acquire cancelled gives back what its
 * attempt may hold (dlock__attempt_free: by the client's watchdog).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "engine/call.h"
#include "hold/attempt.h"
#include "hold/kind.h"
#include "hold/wait.h"
#include "loop/loop_impl.h"

/* A job of the engine on the loop: an attempt or a call in flight. */
typedef struct mjob {
    struct mjob *next, *prev; /* the loop's jobs */
    dlock_loop *l;
    dlock_op *op;                 /* the op it serves; NULL: a renewal */
    lbatch *batch;                /* a renewal's or an extend's holds */
    dlock__attempt_state *a;      /* an acquire's attempt, or */
    dlock__call *k;               /* a call (release, extend, renewal) */
    dlock__cmd *cmds;             /* its commands (one per hold in a cluster) */
    dlock__cmdbuf *bufs;          /* a release's storage */
    const char **ks;              /* a renewal's keys, then its arguments */
    size_t *kls;                  /* and their lengths */
    char (*num)[24];              /* its leases, formatted */
    int ncmds;                    /* cmds given to the call */
    dlock__result *res;           /* the call's outcomes */
    int nres;                     /* entries of res */
    char relid[64];               /* a release's request id */
    void (*done)(struct mjob *j); /* it finished: complete what it serves */
    struct pollfd *pfd;           /* what it polls now */
    int n, cap;
    int64_t wake; /* process it by then */
    int finished;
    int rc; /* an attempt's status */
} mjob;

/* What an op of an engine loop keeps (op->mn). */
struct mop {
    mjob *job;     /* out now, or NULL */
    dlock__wait x; /* an acquire's wait (hold/wait.h) */
};

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

/* Take j off the loop's list and free it (an attempt or call not done is
 * cut short: dlock__attempt_free gives back what it may hold). */
static void job_free(mjob *j)
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
        job_free(j);
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
        job_free(l->jobs);
    }
    fds_sync(l);
}

/* A new job for op (NULL: none), with room for ncmds commands and nres
 * results; NULL out of memory. */
static mjob *job_new(dlock_op *op, int ncmds, int nres)
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
        job_free(j);
        return NULL;
    }
    if (nres > 0 && (j->res = calloc((size_t)nres, sizeof *j->res)) == NULL) {
        job_free(j);
        return NULL;
    }
    return j;
}

/* Start j's call of its commands (j->cmds[0..ncmds) on every node of a
 * fixed set, or routed in a cluster) by the command timeout. */
static int job_call(dlock_loop *l, mjob *j)
{
    dlock_client *c = l->c;
    /* A cluster's calls are one per command, every one of them run. */
    uint64_t mask = c->ns.cluster != NULL ? ~0ULL : dlock__all_nodes(c);
    if (dlock__call_start(&j->k, &c->ns, c->scripts, j->cmds, j->ncmds, mask,
                          dlock__deadline(c, 0), j->res) != DLOCK_OK) {
        job_free(j);
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
    mjob *j = job_new(op, 0, 0);
    memset(&w, 0, sizeof w);
    w.kind = h->k.kind;
    w.lease_ms = h->lease_ms;
    w.limit = h->limit;
    op->state = ST_OUT;
    op->wake_at = -1;
    if (j == NULL || dlock__attempt_start(&j->a, op->loop->c, h->rec, &w,
                                          DLOCK__ASK_TRY, 0) != DLOCK_OK) {
        if (j != NULL)
            job_free(j);
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

/* The state every op of an engine loop keeps; DLOCK_OK or DLOCK_ENOMEM
 * (op completed). */
static int mop_new(dlock_op *op)
{
    op->mn = calloc(1, sizeof *op->mn);
    if (op->mn != NULL)
        return DLOCK_OK;
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
    if (mop_new(op) != DLOCK_OK)
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

/* ---- release, extend, renewal ------------------------------------------------ */

/* Over the outcomes of j's call: how many nodes answered hold i of the
 * call's holds with an integer in [lo, hi] (element i of an array reply
 * when arr; the reply itself otherwise), how many answered otherwise,
 * and the first failure (its index, -1 none). In a cluster, res[i] is
 * hold i's only outcome. */
static void tally(const mjob *j, int i, int arr, long long lo, long long hi,
                  int *yes, int *no, int *fail)
{
    int fixed = j->l->c->ns.cluster == NULL, a, b;
    *yes = *no = 0;
    *fail = -1;
    a = fixed ? 0 : i;
    b = fixed ? j->nres : i + 1;
    for (; a < b; a++) {
        const dlock__result *r = &j->res[a];
        long long v;
        if (r->status != DLOCK_OK) {
            if (*fail < 0)
                *fail = a;
            continue;
        }
        if (arr && r->reply->type == REDIS_REPLY_ARRAY)
            v = dlock__elem_int(r->reply, fixed ? (size_t)i : 0);
        else if (!arr && r->reply->type == REDIS_REPLY_INTEGER)
            v = r->reply->integer;
        else
            v = lo - 1;
        if (v >= lo && v <= hi)
            (*yes)++;
        else
            (*no)++;
    }
}

/* The votes a fixed set needs (a cluster's call for one hold: 1). */
static int quorum(const dlock_loop *l)
{
    return l->c->ns.cluster != NULL ? 1 : l->c->ns.quorum;
}

/* The release answered (or its time is up). */
static void release_done(mjob *j)
{
    dlock_op *op = j->op;
    int yes, no, fail;
    tally(j, 0, 0, 1, 4, &yes, &no, &fail); /* sem_release: 1, 3 */
    if (yes > 0)
        dloop__complete(op, DLOCK_OK, "%s", "");
    else if (fail < 0)
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "release: %s: not the owner (the lease expired or "
                        "another owner has it)",
                        op->hold->k.name);
    else
        dloop__complete(op, j->res[fail].status, "release: %s",
                        j->res[fail].err);
}

/* See loop_impl.h. */
void dloop__mn_release(dlock_op *op)
{
    dlock_loop *l = op->loop;
    dlock_client *c = l->c;
    dlock_hold *h = op->hold;
    dlock__release r = {
        .owner = h->owner, .depth = 1, .token = h->token, .relid = NULL};
    mjob *j;
    if (mop_new(op) != DLOCK_OK)
        return;
    j = job_new(op, 1, c->ns.cluster != NULL ? 1 : c->ns.n);
    if (j == NULL) {
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    r.relid = j->relid;
    r.relidlen = dlock__request_id(c, j->relid);
    dlock__kind_of(h->k.kind)->release_cmd(&j->bufs[0], c, &h->k, &r);
    j->cmds[0] = j->bufs[0].cmd;
    j->cmds[0].give_back = 1;
    /* Behind the acquire's requests still out (Redlock's pins). */
    j->cmds[0].pins = h->rec != NULL ? h->rec->pins : NULL;
    j->done = release_done;
    op->state = ST_OUT;
    op->mn->job = j;
    if (job_call(l, j) != DLOCK_OK) {
        op->mn->job = NULL;
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    }
}

/* The holds' renewal script (extend.lua, sem_extend.lua, rw_extend.lua:
 * keys, then (owner, lease) per hold) for b's holds (one kind), with
 * their leases: one command for them all on a fixed set, one per hold in
 * a cluster (each routed by its slot). DLOCK_OK or DLOCK_ENOMEM. */
static int extend_cmds(mjob *j, const lbatch *b)
{
    const dlock__kind *kd = dlock__kind_of(b->h[0]->k.kind);
    int per = kd->extend_keys, n = b->n, i;
    int fixed = j->l->c->ns.cluster == NULL;
    j->ks = malloc((size_t)(per + 2) * (size_t)n * sizeof *j->ks);
    j->kls = malloc((size_t)(per + 2) * (size_t)n * sizeof *j->kls);
    j->num = malloc((size_t)n * sizeof *j->num);
    if (j->ks == NULL || j->kls == NULL || j->num == NULL)
        return DLOCK_ENOMEM;
    for (i = 0; i < n; i++) {
        const char **args = j->ks + per * n;
        size_t *al = j->kls + per * n;
        j->ks[per * i] = b->h[i]->k.key;
        j->kls[per * i] = b->h[i]->k.keylen;
        if (per == 2) {
            j->ks[2 * i + 1] = b->h[i]->k.rkey;
            j->kls[2 * i + 1] = b->h[i]->k.rkeylen;
        }
        args[2 * i] = b->h[i]->owner;
        al[2 * i] = strlen(b->h[i]->owner);
        args[2 * i + 1] = j->num[i];
        al[2 * i + 1] = dlock__fmt_i64(j->num[i], b->h[i]->lease_ms);
    }
    for (i = 0; i < (fixed ? 1 : n); i++) {
        dlock__cmd *cmd = &j->cmds[i];
        int m = fixed ? n : 1;
        cmd->script = kd->extend_script;
        cmd->nkeys = per * m;
        cmd->keys = j->ks + per * i;
        cmd->keylens = j->kls + per * i;
        cmd->nargs = 2 * m;
        cmd->args = j->ks + per * n + 2 * i;
        cmd->arglens = j->kls + per * n + 2 * i;
    }
    return DLOCK_OK;
}

/* A job renewing (or extending) b's holds; NULL out of memory. */
static mjob *extend_job(dlock_loop *l, dlock_op *op, lbatch *b)
{
    dlock_client *c = l->c;
    int fixed = c->ns.cluster == NULL;
    mjob *j = job_new(op, fixed ? 1 : b->n, fixed ? c->ns.n : b->n);
    if (j == NULL)
        return NULL;
    j->l = l; /* not linked yet: read by extend_cmds */
    j->batch = b;
    if (extend_cmds(j, b) != DLOCK_OK) {
        j->l = NULL;
        job_free(j);
        return NULL;
    }
    j->l = NULL;
    return j;
}

/* What the servers said of hold i of j's renewal: 1 renewed (a
 * majority), 0 not ours any more (too many said no for a majority),
 * -1 not known (failures: try again). *fail: the first failure. */
static int renew_verdict(const mjob *j, int i, int *fail)
{
    const dlock_loop *l = j->l;
    int yes, no, voters = l->c->ns.cluster != NULL ? 1 : l->c->ns.n;
    tally(j, i, 1, 1, 1, &yes, &no, fail);
    if (yes >= quorum(l))
        return 1;
    if (voters - no < quorum(l))
        return 0;
    return -1;
}

/* A renewal round answered (or its time is up). */
static void renew_done(mjob *j)
{
    lbatch *b = j->batch;
    dlock_loop *l = j->l;
    int64_t now = dlock__now_ms();
    int i, fail;
    for (i = 0; i < b->n; i++) {
        dlock_hold *h = b->h[i];
        int v;
        if (h == NULL)
            continue; /* released meanwhile */
        h->batch = NULL;
        h->renewing = 0;
        v = renew_verdict(j, i, &fail);
        if (v == 1 && h->status == DLOCK_OK) {
            dloop__renewed(h, b->sent_ms, h->lease_ms);
        } else if (v == 0) {
            dloop__lost(h, DLOCK_NOT_OWNER);
        } else if (v < 0) {
            /* Try again soon; the validity running out reports it. */
            h->renew_at = now + 100;
            if (l->renew_min < 0 || h->renew_at < l->renew_min)
                l->renew_min = h->renew_at;
        }
    }
    free(b);
}

/* See loop_impl.h. */
int dloop__mn_renew(dlock_loop *l, lbatch *b)
{
    mjob *j = extend_job(l, NULL, b);
    if (j == NULL)
        return DLOCK_ENOMEM;
    j->done = renew_done;
    return job_call(l, j);
}

/* An extend answered (or its time is up). */
static void extend_done(mjob *j)
{
    dlock_op *op = j->op;
    int fail, v = renew_verdict(j, 0, &fail);
    if (v == 1) {
        dloop__renewed(op->hold, j->batch->sent_ms, op->lease_ms);
        dloop__complete(op, DLOCK_OK, "%s", "");
    } else if (v == 0) {
        dloop__lost(op->hold, DLOCK_NOT_OWNER);
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "extend: %s: not the owner (the lease expired or "
                        "another owner has it)",
                        op->hold->k.name);
    } else {
        dloop__complete(op, fail >= 0 ? j->res[fail].status : DLOCK_EIO,
                        "extend: %s", fail >= 0 ? j->res[fail].err : "");
    }
    free(j->batch);
    j->batch = NULL;
}

/* See loop_impl.h. */
int dloop__mn_extend(dlock_op *op)
{
    dlock_loop *l = op->loop;
    lbatch *b;
    mjob *j;
    int rc;
    if (op->mn == NULL && (op->mn = calloc(1, sizeof *op->mn)) == NULL)
        return DLOCK_ENOMEM;
    b = malloc(sizeof *b + sizeof *b->h);
    if (b == NULL)
        return DLOCK_ENOMEM;
    b->n = 1;
    b->h = (dlock_hold **)(b + 1);
    b->h[0] = op->hold;
    b->sent_ms = dlock__now_ms();
    j = extend_job(l, op, b);
    if (j == NULL) {
        free(b);
        return DLOCK_ENOMEM;
    }
    j->done = extend_done;
    op->mn->job = j;
    rc = job_call(l, j);
    if (rc != DLOCK_OK) {
        op->mn->job = NULL;
        free(b);
    }
    return rc;
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
        job_free(j);        /* an attempt cut short gives back */
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
void dloop__mn_rec_free(dlock_hold *h)
{
    if (h->rec == NULL)
        return;
    dlock__held_drop_pins(h->loop->c, h->rec);
    dlock__held_free(h->rec);
    h->rec = NULL;
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
