/*
 * loop.c - the dlock_loop object (include/dlock_loop.h): its descriptor
 * (an epoll set over the loop's connections and an eventfd that says
 * "process has work": a completion queued outside process, a connection
 * to open), its clock, process, the completion queue, the holds and the
 * table of names the loop holds or is acquiring (a second acquire of one
 * is BUSY, never re-entered).
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/conn.h"
#include "loop/loop_impl.h"

#define NAME_BUCKETS 4096
#define SUB_BUCKETS 1024
/* Pooled blocks: a request of up to REQ_BLOCK bytes with its copies (an
 * acquire's, a fenced set's of a short value), a hold whose keys take up
 * to HOLD_KEYS bytes (a name of about 100); larger ones are malloc'd. */
#define REQ_BLOCK 768
#define HOLD_KEYS 640

void *dloop__pool_get(lpool *p)
{
    void *b = p->free;
    if (b == NULL)
        return malloc(p->size);
    memcpy(&p->free, b, sizeof(void *));
    p->n--;
    return b;
}

void dloop__pool_put(lpool *p, void *b)
{
    if (p->n >= LPOOL_MAX) {
        free(b);
        return;
    }
    memcpy(b, &p->free, sizeof(void *));
    p->free = b;
    p->n++;
}

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
    l->cmd.fd = l->sub.fd = -1;
    l->renew_min = -1;
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

void dloop__signal(dlock_loop *l)
{
    uint64_t one = 1;
    if (l->signalled)
        return;
    l->signalled = 1;
    if (write(l->evfd, &one, sizeof one) < 0) {
        /* a full counter is still readable */
    }
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

void dloop__complete(dlock_op *op, int status, const char *fmt, ...)
{
    dlock_loop *l = op->loop;
    va_list ap;
    if (op->state == ST_DONE)
        return;
    if (fmt != NULL) { /* first: the arguments may name the hold */
        va_start(ap, fmt);
        if (strcmp(fmt, "%s") == 0) { /* a success's "": no formatting */
            const char *m = va_arg(ap, const char *);
            size_t n = strnlen(m, sizeof op->err - 1);
            memcpy(op->err, m, n);
            op->err[n] = '\0';
        } else {
            vsnprintf(op->err, sizeof op->err, fmt, ap);
        }
        va_end(ap);
    }
    op->status = status;
    dloop__ev_op_ended(op, status);
    dloop__op_abort(op); /* detaches its request, subscription, sleep */
    op->state = ST_DONE;
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        l->ops = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    op->dnext = NULL;
    if (l->dqt != NULL)
        l->dqt->dnext = op;
    else
        l->dq = op;
    l->dqt = op;
    if (!l->in_process)
        dloop__signal(l);
}

int dloop__hold_op(dlock_op **op, dlock_op **out, dlock_loop *l, dlock_hold *h,
                   int type, int ok, dlock_op_cb cb, void *ud, const char *what)
{
    *op = NULL;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (h == NULL || h->loop != l || !h->held || h->gone || cb == NULL || !ok)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "%s: no hold of this loop, no callback, or "
                                "a bad argument",
                                what);
    *op = dloop__op_new(l, type, cb, ud);
    if (*op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = *op;
    (*op)->hold = h;
    return DLOCK_OK;
}

dlock_op *dloop__op_new(dlock_loop *l, int type, dlock_op_cb cb, void *ud)
{
    /* A leader look carries two dlock_leader_info (2 KB) after it; every
     * other op is a pool block. */
    size_t extra = type == OP_LEADER ? 2 * sizeof(dlock_leader_info) : 0;
    dlock_op *op =
        extra > 0 ? malloc(sizeof *op + extra) : dloop__pool_get(&l->op_pool);
    if (op == NULL)
        return NULL;
    memset(op, 0, sizeof *op);
    if (extra > 0) {
        op->leader = (dlock_leader_info *)(op + 1);
        op->known = op->leader + 1;
        memset(op->leader, 0, extra);
    } else {
        op->pooled = 1;
    }
    op->loop = l;
    op->type = type;
    op->cb = cb;
    op->ud = ud;
    op->deadline = op->wake_at = -1;
    op->t0_us = dlock__now_us();
    op->next = l->ops;
    if (l->ops != NULL)
        l->ops->prev = op;
    l->ops = op;
    return op;
}

/* NAME's hash (all its bits: a hold keeps it, the table masks it). */
static size_t name_hash(const char *s, size_t n)
{
    size_t h = 5381, i;
    for (i = 0; i < n; i++)
        h = h * 33 + (unsigned char)s[i];
    return h;
}

dlock_hold *dloop__name_find(dlock_loop *l, const char *name)
{
    size_t n = strlen(name), hv = name_hash(name, n);
    dlock_hold *h = l->names[hv & (l->nbuckets - 1)];
    /* The hash first: a chain's other holds are not read past it. */
    while (h != NULL && (h->nhash != hv || h->k.namelen != n ||
                         memcmp(h->k.name, name, n) != 0))
        h = h->tnext;
    return h;
}

void dloop__name_drop(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    dlock_hold **p = &l->names[h->nhash & (l->nbuckets - 1)];
    while (*p != NULL && *p != h)
        p = &(*p)->tnext;
    if (*p == h) {
        *p = h->tnext;
        l->nnames--;
    }
    h->tnext = NULL;
}

/* Double the name table (100,000 holds keep short chains); when out of
 * memory the chains grow longer instead. */
static void names_grow(dlock_loop *l)
{
    size_t old = l->nbuckets, i;
    dlock_hold **tab = calloc(old * 2, sizeof *tab), **prev = l->names;
    if (tab == NULL)
        return;
    l->names = tab;
    l->nbuckets = old * 2;
    for (i = 0; i < old; i++)
        while (prev[i] != NULL) {
            dlock_hold *h = prev[i];
            size_t b = h->nhash & (l->nbuckets - 1);
            prev[i] = h->tnext;
            h->tnext = tab[b];
            tab[b] = h;
        }
    free(prev);
}

/* A new hold of kind (DLOCK__KIND_*) for NAME (keys, a fresh owner id);
 * an exclusive lock's goes in the name table (a permit's does not: one
 * loop may hold several permits of one semaphore, each its own owner). */
dlock_hold *dloop__hold_new(dlock_loop *l, const char *name, int kind)
{
    const dlock_client *c = l->c;
    size_t nlen = strlen(name), ks = dlock__keys_size(c, name);
    dlock_hold *h;
    size_t b;
    if (dloop__heap_reserve(l, l->nholds + 1) != DLOCK_OK)
        return NULL;
    h = ks <= HOLD_KEYS ? dloop__pool_get(&l->hold_pool)
                        : malloc(sizeof *h + ks);
    if (h == NULL)
        return NULL;
    l->nholds++;
    memset(h, 0, sizeof *h);
    h->pooled = ks <= HOLD_KEYS;
    h->loop = l;
    dlock__keys_fill(&h->k, (char *)(h + 1), c, name);
    /* "<client id>:0:<hold number>": thread 0, no thread owns it. */
    memcpy(h->owner, c->idhex, 32);
    memcpy(h->owner + 32, ":0:", 3);
    dlock__fmt_u64(h->owner + 35, atomic_fetch_add(&l->c->hold_seq, 1) + 1);
    h->status = DLOCK_OK;
    h->renew_at = -1;
    h->refs = 1;
    h->k.kind = kind;
    if (kind != DLOCK__KIND_LOCK)
        return h;
    if (l->nnames >= l->nbuckets)
        names_grow(l);
    h->nhash = name_hash(name, nlen);
    b = h->nhash & (l->nbuckets - 1);
    h->tnext = l->names[b];
    l->names[b] = h;
    l->nnames++;
    return h;
}

/* Drop one reference; the last frees h (out of the name table and the
 * loop's holds, its renewal batch slot cleared). */
void dloop__hold_unref(dlock_hold *h)
{
    dlock_loop *l = h->loop;
    if (--h->refs > 0)
        return;
    dloop__hold_unsched(h);
    l->nholds--;
    dloop__name_drop(h);
    dloop__mn_rec_free(h);
    dloop__wd_drop(h);
    if (h->batch != NULL)
        h->batch->h[h->slot] = NULL;
    if (h->held) {
        if (h->hprev != NULL)
            h->hprev->hnext = h->hnext;
        else if (l->holds == h)
            l->holds = h->hnext;
        if (h->hnext != NULL)
            h->hnext->hprev = h->hprev;
    }
    free(h->why);
    h->why = NULL;
    if (h->pooled)
        dloop__pool_put(&l->hold_pool, h);
    else
        free(h);
}

int dlock_loop_fd(const dlock_loop *l)
{
    return l != NULL ? l->epfd : -1;
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
            (short)((l->cmd.ev & EPOLLIN || l->cmd.conn ? POLLIN : 0) |
                    (l->cmd.ev & EPOLLOUT ? POLLOUT : 0));
        lc[n++] = &l->cmd;
    }
    if (l->sub.fd >= 0) {
        p[n].fd = l->sub.fd;
        p[n].events =
            (short)((l->sub.ev & EPOLLIN || l->sub.conn ? POLLIN : 0) |
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
    if (l->cmd.conn != NULL)
        dlock__conn_progress(l->cmd.conn, POLLOUT, NULL, 0);
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
    free(l);
}

const char *dlock_op_errmsg(const dlock_op *op)
{
    return op != NULL ? op->err : "";
}

const char *dlock_op_value(const dlock_op *op, size_t *len, uint64_t *fence)
{
    if (op == NULL || (op->type != OP_FGET && op->type != OP_FREAD)) {
        if (len != NULL)
            *len = 0;
        if (fence != NULL)
            *fence = 0;
        return NULL;
    }
    if (len != NULL)
        *len = op->gotlen;
    if (fence != NULL)
        *fence = op->fence;
    return op->has_got ? op->got : NULL;
}

const char *dlock_hold_name(const dlock_hold *h)
{
    return h != NULL ? h->k.name : "";
}

uint64_t dlock_hold_token(const dlock_hold *h)
{
    return h != NULL ? h->token : 0;
}

const char *dlock_hold_owner(const dlock_hold *h)
{
    return h != NULL ? h->owner : "";
}

int64_t dlock_hold_validity_ms(const dlock_hold *h)
{
    int64_t left;
    if (h == NULL || h->status != DLOCK_OK)
        return 0;
    if (h->wd != NULL) /* the watchdog renews it */
        return dlock_lock_validity_ms(h->wd);
    left = h->valid_until - dlock__now_ms();
    return left > 0 ? left : 0;
}

int dlock_hold_status(const dlock_hold *h)
{
    if (h == NULL)
        return DLOCK_EINVAL;
    if (h->status == DLOCK_OK && h->wd != NULL)
        return dlock_lock_status(h->wd);
    if (h->status == DLOCK_OK && dlock__now_ms() >= h->valid_until)
        return DLOCK_NOT_OWNER;
    return h->status;
}
