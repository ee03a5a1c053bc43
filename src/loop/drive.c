/*
 * drive.c - the dlock_loop object made, driven and freed
 * (include/dlock_loop.h): dlock_loop_new (its epoll set, its eventfd,
 * and the hooks through which the lower files of src/loop/ reach the
 * upper ones), the loop's timeout, process (the connections, the
 * engine's jobs, the holds' and the operations' clocks, then the
 * callbacks of the completed operations, in order), cancel and free. The
 * top of src/loop/: it calls every file below it, none calls it.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/conn.h"
#include "loop/loop_impl.h"

#define NAME_BUCKETS 4096
#define SUB_BUCKETS 1024

/* Free every block p keeps. */
static void pool_drain(lpool *p)
{
    while (p->free != NULL)
        free(dloop__pool_get(p));
}

int dlock_loop_new(dlock_loop **out, dlock_client *c)
{
    dlock_loop *l;
    struct epoll_event e;
    if (out != NULL)
        *out = NULL;
    if (out == NULL || c == NULL)
        return c != NULL ? dlock__set_error(c, DLOCK_EINVAL, "out is NULL")
                         : DLOCK_EINVAL;
    l = calloc(1, sizeof *l);
    if (l == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    l->c = c;
    l->engine = c->ns.n != 1 || c->ns.cluster != NULL || c->ns.locate != NULL;
    dloop__conns_init(l);
    l->renew_min = -1;
    /* The hooks: the lower files' calls up (loop_impl.h). */
    l->op_end = dloop__op_abort;
    l->on_message = dloop__on_message;
    l->on_subscribed = dloop__on_subscribed;
    l->sub_lost = dloop__sub_lost;
    l->engine_acquire = dloop__mn_acquire;
    l->nbuckets = NAME_BUCKETS;
    l->nsubs = SUB_BUCKETS;
    l->op_pool.size = sizeof(dlock_op);
    l->req_pool.size = REQ_BLOCK;
    l->hold_pool.size = sizeof(dlock_hold) + HOLD_KEYS;
    l->names = calloc(l->nbuckets, sizeof *l->names);
    l->subs = calloc(l->nsubs, sizeof *l->subs);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    memset(&e, 0, sizeof e);
    e.events = EPOLLIN;
    e.data.ptr = NULL;
    if (l->names == NULL || l->subs == NULL || l->epfd < 0 || l->evfd < 0 ||
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &e) != 0) {
        int rc = l->names == NULL || l->subs == NULL ? DLOCK_ENOMEM : DLOCK_EIO;
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->evfd >= 0)
            close(l->evfd);
        free(l->names);
        free(l->subs);
        free(l);
        return dlock__set_error(c, rc, "dlock_loop_new: %s",
                                rc == DLOCK_EIO ? strerror(errno)
                                                : "out of memory");
    }
    *out = l;
    return DLOCK_OK;
}

/* Run the callbacks of the completed operations, in order. */
static void run_done(dlock_loop *l)
{
    while (l->dq != NULL) {
        dlock_op *op = l->dq;
        l->dq = op->dnext;
        if (l->dq == NULL)
            l->dqt = NULL;
        if (op->cb != NULL)
            op->cb(op, op->status, op->type == OP_LEADER ? NULL : op->hold,
                   op->ud);
        /* A release's hold, a leader wait's (its keys), the reference of
         * an engine loop's extend go with the op. */
        if ((op->type == OP_RELEASE || op->type == OP_LEADER || op->href) &&
            op->hold != NULL)
            dloop__hold_unref(op->hold);
        free(op->got);
        free(op->key);
        free(op->multi);
        if (op->pooled)
            dloop__pool_put(&l->op_pool, op);
        else
            free(op);
    }
}

int64_t dlock_loop_timeout_ms(const dlock_loop *l)
{
    int64_t w, o, now;
    if (l == NULL)
        return -1;
    if (l->dq != NULL || l->signalled)
        return 0;
    w = dloop__conns_wake(l);
    o = dloop__ops_wake(l);
    if (o >= 0 && (w < 0 || o < w))
        w = o;
    o = dloop__jobs_wake(l);
    if (o >= 0 && (w < 0 || o < w))
        w = o;
    if (l->renew_min >= 0 && (w < 0 || l->renew_min < w))
        w = l->renew_min;
    if (w < 0)
        return -1;
    now = dlock__now_ms();
    return w <= now ? 0 : w - now;
}

/* Read what the sockets have without waiting. */
static void poll_conns(dlock_loop *l)
{
    struct pollfd p[2];
    lconn *lc[2];
    int n = 0, i;
    uint64_t v;
    /* Only this loop's thread signals (dloop__signal): unsignalled, the
     * eventfd is empty and needs no read. */
    if (l->signalled && read(l->evfd, &v, sizeof v) < 0) {
        /* a full counter is read anyway; nothing else to do */
    }
    l->signalled = 0;
    if (l->cmd.fd >= 0) {
        p[n].fd = l->cmd.fd;
        p[n].events =
            (short)((l->cmd.ev & EPOLLIN || l->cmd.p.conn ? POLLIN : 0) |
                    (l->cmd.ev & EPOLLOUT ? POLLOUT : 0));
        lc[n++] = &l->cmd;
    }
    if (l->sub.fd >= 0) {
        p[n].fd = l->sub.fd;
        p[n].events =
            (short)((l->sub.ev & EPOLLIN || l->sub.p.conn ? POLLIN : 0) |
                    (l->sub.ev & EPOLLOUT ? POLLOUT : 0));
        lc[n++] = &l->sub;
    }
    if (n == 0 || poll(p, (nfds_t)n, 0) <= 0)
        return;
    for (i = 0; i < n; i++) {
        if (p[i].revents == 0)
            continue;
        if (lc[i] == &l->cmd)
            dloop__cmd_io(l, p[i].revents);
        else
            dloop__sub_io(l, p[i].revents);
    }
}

int dlock_loop_process(dlock_loop *l)
{
    int64_t now;
    if (l == NULL)
        return DLOCK_EINVAL;
    l->in_process = 1;
    poll_conns(l);
    dloop__jobs_run(l);
    now = dlock__now_ms();
    dloop__holds_time(l, now);
    dloop__ops_time(l, now);
    dloop__conns_time(l, now);
    l->in_process = 0;
    run_done(l);
    dloop__jobs_flush(l); /* what the jobs wrote, in one write per server */
    dloop__conns_update(l);
    if (l->dq != NULL)
        dloop__signal(l);
    return DLOCK_OK;
}

void dlock_op_cancel(dlock_op *op)
{
    dlock_loop *l;
    if (op == NULL || op->state == ST_DONE)
        return;
    l = op->loop;
    dloop__complete(op, DLOCK_CANCELED, "cancelled");
    /* Run its callback now, from here (the queue keeps order: run every
     * completion queued before it too). */
    if (!l->in_process)
        run_done(l);
    dloop__conns_update(l);
}

void dlock_loop_free(dlock_loop *l)
{
    dlock_hold *h, *n;
    if (l == NULL)
        return;
    while (l->ops != NULL)
        dloop__complete(l->ops, DLOCK_CANCELED, "the loop was freed");
    l->in_process = 1;
    run_done(l);
    /* Best effort: what was queued (give-backs) is written once. */
    if (l->cmd.p.conn != NULL)
        dlock__conn_progress(l->cmd.p.conn, POLLOUT, NULL, 0);
    dloop__conns_close(l);
    dloop__jobs_free(l);
    free(l->mfd);
    for (h = l->holds; h != NULL; h = n) {
        n = h->hnext;
        free(h->why);
        dloop__wd_drop(h);
        dloop__mn_rec_free(h);
        free(h);
    }
    pool_drain(&l->op_pool);
    pool_drain(&l->req_pool);
    pool_drain(&l->hold_pool);
    close(l->epfd);
    close(l->evfd);
    free(l->names);
    free(l->subs);
    free(l->heap);
    free(l->otm);
    free(l);
}
