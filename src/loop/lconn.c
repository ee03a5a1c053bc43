/*
 * lconn.c - what a loop's two connections to its server share (their
 * epoll registration, their non-blocking opens, their I/O step), and the
 * command connection: an io/pipe.h pipe (requests pipelined, answers
 * matched in FIFO order, WAIT shared, NOSCRIPT answered by the pipe's
 * rule; here a request unanswered past the command timeout ends the
 * connection). The subscriber is lsub.c's (SUBSCRIBE per channel some
 * operation waits on; messages handed to waits.c through the loop's
 * hooks). Both are opened without blocking (node.h:
 * dlock__node_opening_*) from process.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "io/conn.h"
#include "io/pipe.h"
#include "loop/loop_impl.h"
#include "topo/node.h"

/* lc's descriptor now (its connection's or its open's) and the poll
 * events it waits for; -1 when it has none. */
static int cur_fd(const lconn *lc, short *pev)
{
    int fd = -1;
    *pev = 0;
    if (lc->open != NULL) {
        dlock__node_opening_poll(lc->open, &fd, pev);
    } else if (lc->p.conn != NULL) {
        fd = dlock__conn_fd(lc->p.conn);
        *pev = dlock__conn_events(lc->p.conn);
    }
    return fd;
}

/* See loop_impl.h. A number registered before and no longer lc's was
 * closed (which took it out of the set): it is not touched, since it may
 * be reused by now. */
void dloop__lc_reg(dlock_loop *l, lconn *lc)
{
    short pev;
    int fd = cur_fd(lc, &pev);
    uint32_t ev = 0;
    struct epoll_event e;
    if (pev & POLLIN)
        ev |= EPOLLIN;
    if (pev & POLLOUT)
        ev |= EPOLLOUT;
    if (fd == lc->fd && ev == lc->ev)
        return;
    lc->fd = fd;
    lc->ev = ev;
    if (fd < 0)
        return;
    memset(&e, 0, sizeof e);
    e.events = ev;
    e.data.ptr = lc;
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &e) != 0 && errno == ENOENT)
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &e);
}

/* See loop_impl.h. An open connection's descriptor is deleted first,
 * tidily; an open that failed or timed out is not asked (its state may be
 * gone). */
void dloop__lc_unreg(dlock_loop *l, lconn *lc)
{
    if (lc->fd >= 0 && lc->open == NULL && lc->p.conn != NULL &&
        dlock__conn_fd(lc->p.conn) == lc->fd)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, lc->fd, NULL);
    lc->fd = -1;
    lc->ev = 0;
}

/* Put r's command into the connection's output buffer and r on its
 * pipe, due (answered by then, or the connection ends) at the command
 * timeout from now. */
static int append(dlock_loop *l, lreq *r)
{
    int64_t due = dlock__now_ms() + l->c->opts.command_timeout_ms;
    int rc;
    r->appended = 1;
    if (l->cmd.p.wait_out) /* a WAIT ahead holds the line up */
        due += l->c->ns.wait_timeout_ms;
    rc = dlock__conn_append_argv(l->cmd.p.conn, r->argc, r->argv, r->argvlen);
    if (rc == DLOCK_OK)
        rc = dlock__pipe_push(&l->cmd.p, (dlock__pentry){.who = r, .due = due},
                              NULL);
    return rc;
}

static void lreq_free(dlock_loop *l, lreq *r)
{
    if (r->pooled)
        dloop__pool_put(&l->req_pool, r);
    else
        free(r);
}

/* End every request of the command connection with rc / err and close
 * it: those written (the pipe tells each: cmd_lost), then those waiting
 * for it to open. The callbacks may queue new requests (they go on a
 * fresh list). */
static void cmd_fail(dlock_loop *l, int rc, const char *err)
{
    lreq *r = l->cmd.head, *next;
    l->cmd.head = l->cmd.tail = NULL;
    dloop__lc_unreg(l, &l->cmd);
    dlock__node_opening_free(l->cmd.open);
    l->cmd.open = NULL;
    dlock__pipe_fail(&l->cmd.p, rc, err);
    for (; r != NULL; r = next) {
        next = r->next;
        l->cmd.nreq--;
        if (r->fn != NULL)
            r->fn(l, r->ctx, rc, NULL, err, r->appended);
        lreq_free(l, r);
    }
}

/* The connection opened: queue everything waiting for it. */
static void cmd_opened(dlock_loop *l)
{
    lreq *r;
    char err[LOOP_ERRLEN];
    if (dlock__node_refuses_locks(&l->c->ns, &l->c->ns.node[0], err,
                                  sizeof err)) {
        cmd_fail(l, DLOCK_EREFUSED, err);
        return;
    }
    dloop__ev_count(l, DLOOP_EV_RECONNECT);
    while ((r = l->cmd.head) != NULL) {
        if (append(l, r) != DLOCK_OK) {
            cmd_fail(l, DLOCK_ENOMEM, "out of memory");
            return;
        }
        l->cmd.head = r->next;
        if (l->cmd.head == NULL)
            l->cmd.tail = NULL;
    }
}

/* Put r into the command connection's output when it is open, else at
 * the end of the requests waiting for it (process opens it). */
static void enqueue(dlock_loop *l, lreq *r)
{
    r->next = NULL;
    l->cmd.nreq++;
    dloop__ev_count(l, DLOOP_EV_REQUEST);
    if (l->cmd.p.conn != NULL) {
        if (append(l, r) == DLOCK_OK) {
            dloop__lc_reg(l, &l->cmd);
            return;
        }
        /* Waiting (none else does: the connection is open), so that the
         * failure tells it too. */
        l->cmd.head = l->cmd.tail = r;
        cmd_fail(l, DLOCK_ENOMEM, "out of memory");
        return;
    }
    if (l->cmd.tail != NULL)
        l->cmd.tail->next = r;
    else
        l->cmd.head = r;
    l->cmd.tail = r;
    dloop__signal(l);
}

/* A zeroed request of argc arguments for script (-1: a plain command)
 * answered to fn(ctx), with room for bytes of copies after its argv and
 * lengths (*cur: where they go; the caller fills them), or NULL. One
 * block: the request, argv, lengths and a copy of every key and argument
 * (the request outlives its requester's buffers), from l's pool when
 * small. */
static lreq *lreq_new(dlock_loop *l, int argc, size_t bytes, int script,
                      lreq_fn fn, void *ctx, char **cur)
{
    size_t need =
        sizeof(lreq) + argc * (sizeof(char *) + sizeof(size_t)) + bytes;
    int pooled = need <= l->req_pool.size;
    lreq *r = pooled ? dloop__pool_get(&l->req_pool) : malloc(need);
    if (r == NULL)
        return NULL;
    memset(r, 0, sizeof *r);
    r->pooled = pooled;
    r->argv = (const char **)(r + 1);
    r->argvlen = (size_t *)(r->argv + argc);
    r->argc = argc;
    r->script = script;
    r->fn = fn;
    r->ctx = ctx;
    *cur = (char *)(r->argvlen + argc);
    return r;
}

/* Copy n strings (s, lens) into r's buffer at *cur as arguments from
 * index at on; the end of the copies in *cur. */
static void lreq_copy(lreq *r, char **cur, int at, int n, const char **s,
                      const size_t *lens)
{
    int i;
    for (i = 0; i < n; i++) {
        memcpy(*cur, s[i], lens[i]);
        r->argv[at + i] = *cur;
        r->argvlen[at + i] = lens[i];
        *cur += lens[i];
    }
}

/* The sum of lens[0..n). */
static size_t lens_sum(int n, const size_t *lens)
{
    size_t t = 0;
    int i;
    for (i = 0; i < n; i++)
        t += lens[i];
    return t;
}

int dloop__send(dlock_loop *l, int script, int nkeys, const char **keys,
                const size_t *keylens, int nargs, const char **args,
                const size_t *arglens, lreq_fn fn, void *ctx, lreq **out)
{
    int argc = 3 + nkeys + nargs;
    char *cur;
    lreq *r =
        lreq_new(l, argc, lens_sum(nkeys, keylens) + lens_sum(nargs, arglens),
                 script, fn, ctx, &cur);
    if (r == NULL)
        return DLOCK_ENOMEM;
    r->argv[0] = "EVALSHA";
    r->argvlen[0] = 7;
    r->argv[1] = l->c->scripts[script].sha;
    r->argvlen[1] = 40;
    r->argvlen[2] = dlock__fmt_i64(r->nk, nkeys);
    r->argv[2] = r->nk;
    lreq_copy(r, &cur, 3, nkeys, keys, keylens);
    lreq_copy(r, &cur, 3 + nkeys, nargs, args, arglens);
    if (out != NULL)
        *out = r;
    enqueue(l, r);
    return DLOCK_OK;
}

int dloop__send_plain(dlock_loop *l, int argc, const char **argv,
                      const size_t *argvlen, lreq_fn fn, void *ctx, lreq **out)
{
    char *cur;
    lreq *r = lreq_new(l, argc, lens_sum(argc, argvlen), -1, fn, ctx, &cur);
    if (r == NULL)
        return DLOCK_ENOMEM;
    lreq_copy(r, &cur, 0, argc, argv, argvlen);
    if (out != NULL)
        *out = r;
    enqueue(l, r);
    return DLOCK_OK;
}

int dloop__send_cmd(dlock_loop *l, const dlock__cmd *cmd, lreq_fn fn, void *ctx,
                    lreq **out)
{
    if (cmd->raw) { /* the plain command args[0] keys... args[1..] */
        const char *argv[DLOCK__CMD_KEYS + DLOCK__CMD_ARGS];
        size_t lens[DLOCK__CMD_KEYS + DLOCK__CMD_ARGS];
        int i, n = 0;
        argv[n] = cmd->args[0], lens[n++] = cmd->arglens[0];
        for (i = 0; i < cmd->nkeys; i++)
            argv[n] = cmd->keys[i], lens[n++] = cmd->keylens[i];
        for (i = 1; i < cmd->nargs; i++)
            argv[n] = cmd->args[i], lens[n++] = cmd->arglens[i];
        return dloop__send_plain(l, n, argv, lens, fn, ctx, out);
    }
    return dloop__send(l, cmd->script, cmd->nkeys, (const char **)cmd->keys,
                       cmd->keylens, cmd->nargs, (const char **)cmd->args,
                       cmd->arglens, fn, ctx, out);
}

/* NOSCRIPT for r, the request whose answer the pipe hands now: send it
 * again at the end of the queue, by SHA or with the source as the pipe's
 * one rule says (dlock__pipe_noscript: the source once per script and
 * connection, the others by SHA behind it). */
static void resend_eval(dlock_loop *l, lreq *r)
{
    r->appended = 0;
    if (dlock__pipe_noscript(&l->cmd.p, r->script, r->again)) {
        r->again = 1;
        enqueue(l, r);
        return;
    }
    r->eval = 1;
    r->argv[0] = "EVAL";
    r->argv[1] = l->c->scripts[r->script].src;
    r->argvlen[0] = 4;
    r->argvlen[1] = strlen(r->argv[1]);
    enqueue(l, r);
}

/* rc and err for an error reply rep of the command connection. */
static int reply_rc(dlock_loop *l, const redisReply *rep, char *err, size_t len)
{
    int fo;
    return dlock__reply_error(&l->c->ns, &l->c->ns.node[0], rep->str, err, len,
                              &fo);
}

/* The pipe's words to the loop (pipe.h: dlock__pipe_ops; ud: the loop). */

/* Hand rep, an answer of the command connection, to r's requester (an
 * error reply as its status and words). */
static void answer(dlock_loop *l, const lreq *r, const redisReply *rep)
{
    char err[LOOP_ERRLEN];
    if (r->fn == NULL)
        return;
    if (rep->type == REDIS_REPLY_ERROR)
        r->fn(l, r->ctx, reply_rc(l, rep, err, sizeof err), NULL, err, 1);
    else
        r->fn(l, r->ctx, DLOCK_OK, rep, "", 1);
}

/* An answer rep (owned) for request e->who: a NOSCRIPT sends it again,
 * anything else is its answer. */
static void cmd_take(void *ud, const dlock__pentry *e, redisReply *rep)
{
    dlock_loop *l = ud;
    lreq *r = e->who;
    l->cmd.nreq--;
    if (rep->type == REDIS_REPLY_ERROR && r->script >= 0 && !r->eval &&
        strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        resend_eval(l, r);
    } else {
        answer(l, r, rep);
        lreq_free(l, r);
    }
    freeReplyObject(rep);
}

/* The shared WAIT answered rep for stub w->who (durable.c). */
static void cmd_acked(void *ud, const dlock__pwaiter *w, const redisReply *rep)
{
    answer(ud, w->who, rep);
    free(w->who);
}

/* The connection failed: request who (a 0) or a WAIT's stub (a 1, not
 * pooled: lreq_free frees it) ends with rc / err. */
static void cmd_lost(void *ud, void *who, int a, int rc, const char *err)
{
    dlock_loop *l = ud;
    lreq *r = who;
    if (a == 0)
        l->cmd.nreq--;
    if (r->fn != NULL)
        r->fn(l, r->ctx, rc, NULL, err, 1);
    lreq_free(l, r);
}

/* A WAIT written: one more request. */
static void cmd_waited(void *ud)
{
    dloop__ev_count(ud, DLOOP_EV_REQUEST);
}

static const dlock__pipe_ops cmd_pipe = {cmd_take, cmd_acked, cmd_lost,
                                         cmd_waited};

/* See loop_impl.h. */
void dloop__conns_init(dlock_loop *l)
{
    dlock__pipe_init(&l->cmd.p, NULL, &cmd_pipe, l);
    dlock__pipe_init(&l->sub.p, NULL, NULL, NULL);
    l->cmd.fd = l->sub.fd = -1;
}

/* See loop_impl.h. */
void dloop__lc_io(dlock_loop *l, lconn *lc, const lconn_ops *ops, short revents)
{
    char err[LOOP_ERRLEN];
    int rc;
    if (lc->open != NULL) {
        rc = dlock__node_opening_step(lc->open, revents, &lc->p.conn, err,
                                      sizeof err);
        if (rc == DLOCK__OPEN_AGAIN)
            return;
        if (rc != DLOCK_OK) { /* the fail frees the open */
            ops->fail(l, rc, err);
            return;
        }
        dlock__node_opening_free(lc->open);
        lc->open = NULL;
        ops->opened(l);
        revents = POLLOUT;
    }
    if (lc->p.conn == NULL)
        return;
    rc = dlock__conn_progress(lc->p.conn, revents, err, sizeof err);
    if (rc == DLOCK_OK)
        rc = ops->collect(l, err, sizeof err);
    if (rc != DLOCK_OK)
        ops->fail(l, rc, err);
}

/* The command connection's answers, to their requests. */
static int cmd_collect(dlock_loop *l, char *err, size_t len)
{
    int rc = dlock__pipe_collect(&l->cmd.p, err, len);
    return rc < 0 && l->cmd.p.conn != NULL ? DLOCK_EPROTO : DLOCK_OK;
}

static const lconn_ops cmd_ops = {cmd_opened, cmd_collect, cmd_fail};

void dloop__cmd_io(dlock_loop *l, short revents)
{
    dloop__lc_io(l, &l->cmd, &cmd_ops, revents);
}

/* See loop_impl.h. */
int dloop__lc_open(dlock_loop *l, lconn *lc, char *err, size_t errlen)
{
    int fresh = 0;
    int rc;
    lc->open_dl = dlock__now_ms() + l->c->opts.connect_timeout_ms;
    rc = dlock__node_opening_start(&lc->open, &l->c->ns, 0, lc->open_dl,
                                   &lc->p.conn, &fresh, err, errlen);
    if (rc == DLOCK__OPEN_AGAIN)
        return rc;
    lc->open = NULL;
    return rc;
}

/* When the command connection's oldest expected answer is due (it
 * expects one). */
static int64_t head_due(const dlock_loop *l)
{
    const dlock__pipe *p = &l->cmd.p;
    return p->qhead < p->qlen ? p->q[p->qhead].due : INT64_MAX;
}

/* See loop_impl.h. */
void dloop__cmd_time(dlock_loop *l, int64_t now)
{
    char err[LOOP_ERRLEN];
    int rc;
    if (l->cmd.open != NULL &&
        now >= dlock__node_opening_deadline(l->cmd.open)) {
        rc = dlock__node_opening_timeout(l->cmd.open, err, sizeof err);
        cmd_fail(l, rc, err);
    } else if (l->cmd.p.conn != NULL && !dlock__pipe_idle(&l->cmd.p) &&
               now >= head_due(l)) {
        snprintf(err, sizeof err, "%s: no answer in time",
                 dlock__conn_peer(l->cmd.p.conn));
        cmd_fail(l, DLOCK_ETIMEDOUT, err);
    }
    if (l->cmd.p.conn == NULL && l->cmd.open == NULL && l->cmd.head != NULL) {
        rc = dloop__lc_open(l, &l->cmd, err, sizeof err);
        if (rc == DLOCK_OK)
            cmd_opened(l);
        else if (rc != DLOCK__OPEN_AGAIN)
            cmd_fail(l, rc, err);
    }
}

/* See loop_impl.h. */
int64_t dloop__cmd_wake(const dlock_loop *l)
{
    if (l->cmd.open != NULL)
        return dlock__node_opening_deadline(l->cmd.open);
    if (l->cmd.p.conn != NULL && l->cmd.p.qhead < l->cmd.p.qlen)
        return head_due(l);
    return l->cmd.p.conn == NULL && l->cmd.head != NULL ? 0 : -1;
}

/* See loop_impl.h. */
void dloop__cmd_fail(dlock_loop *l, int rc, const char *err)
{
    cmd_fail(l, rc, err);
}
