/*
 * node.c - the servers of a client: one dlock__node per server URL, each
 * with a small pool of idle connections, and dlock__exec(), which runs one
 * script on any set of nodes in parallel from the calling thread.
 *
 * A single-instance lock is the case of one node; Redlock is the same code
 * with N. dlock__exec() sends on every node first, then drives all the
 * connections with one poll() loop until each has answered or the
 * deadline passes, so an acquire over five servers costs one round trip
 * of the slowest healthy server, and a stalled server costs at most the
 * deadline.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_NODES 64

/* Requests given up on (timed out) that one pooled connection may carry. */
#define MAX_STALE 2

/* Parse every server URL into its node and apply the options' user and
 * password over the URL's. DLOCK_OK, DLOCK_EINVAL or DLOCK_ENOMEM. */
int dlock__nodes_init(dlock_client *c, char *err, size_t errlen)
{
    int i;
    c->nodes = calloc((size_t)c->nnodes, sizeof *c->nodes);
    if (c->nodes == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    for (i = 0; i < c->nnodes; i++) {
        dlock__node *n = &c->nodes[i];
        int rc = dlock__url_parse(&n->ep, c->servers[i], err, errlen);
        if (rc != DLOCK_OK)
            return rc;
        if (c->username != NULL) {
            free(n->ep.user);
            n->ep.user = strdup(c->username);
            if (n->ep.user == NULL)
                return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        }
        if (c->password != NULL) {
            free(n->ep.password);
            n->ep.password = strdup(c->password);
            if (n->ep.password == NULL)
                return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        }
        n->idle = calloc((size_t)c->opts.pool_size, sizeof *n->idle);
        if (n->idle == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        pthread_mutex_init(&n->mu, NULL);
    }
    return DLOCK_OK;
}

/* Close every pooled connection and free the nodes. */
void dlock__nodes_free(dlock_client *c)
{
    int i, j;
    if (c->nodes == NULL)
        return;
    for (i = 0; i < c->nnodes; i++) {
        dlock__node *n = &c->nodes[i];
        for (j = 0; j < n->nidle; j++)
            dlock__conn_close(n->idle[j]);
        free(n->idle);
        if (n->idle != NULL)
            pthread_mutex_destroy(&n->mu);
        dlock__endpoint_clear(&n->ep);
    }
    free(c->nodes);
    c->nodes = NULL;
}

/* Pop an idle connection or open a new one. With several nodes, a node
 * whose last connect timed out is skipped for 500 ms so that Redlock does
 * not wait out a connect timeout to an unreachable server on every call. */
int dlock__node_get(dlock_client *c, int i, dlock__conn **out,
                    int64_t deadline_ms, char *err, size_t errlen)
{
    dlock__node *n = &c->nodes[i];
    int64_t now, dl;
    int rc;

    pthread_mutex_lock(&n->mu);
    if (n->nidle > 0) {
        *out = n->idle[--n->nidle];
        pthread_mutex_unlock(&n->mu);
        return DLOCK_OK;
    }
    now = dlock__now_ms();
    if (c->nnodes > 1 && now < n->down_until_ms) {
        pthread_mutex_unlock(&n->mu);
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "%s: down (connect timed out moments ago)",
                           n->ep.display);
    }
    pthread_mutex_unlock(&n->mu);

    dl = now + c->opts.connect_timeout_ms;
    if (deadline_ms >= 0 && deadline_ms < dl)
        dl = deadline_ms;
    rc = dlock__conn_open(out, &n->ep, c->tls, dl, err, errlen);
    if (rc == DLOCK_OK)
        atomic_fetch_add(&c->stats.reconnects, 1);
    if (rc != DLOCK_OK) {
        /* Only a connect that timed out is worth skipping next time: a
         * refused one costs a round trip and must not hide a node that
         * has just come back. */
        if (rc == DLOCK_ETIMEDOUT) {
            pthread_mutex_lock(&n->mu);
            n->down_until_ms = dlock__now_ms() + 500;
            pthread_mutex_unlock(&n->mu);
        }
        *out = NULL;
    }
    return rc;
}

/* Return a connection to the pool if it is healthy (ok) and there is
 * room; close it otherwise. */
void dlock__node_put(dlock_client *c, int i, dlock__conn *conn, int ok)
{
    dlock__node *n = &c->nodes[i];
    if (conn == NULL)
        return;
    if (ok) {
        pthread_mutex_lock(&n->mu);
        if (n->nidle < c->opts.pool_size) {
            n->idle[n->nidle++] = conn;
            conn = NULL;
        }
        pthread_mutex_unlock(&n->mu);
    }
    dlock__conn_close(conn);
}

/* Free the replies of res[0..n-1]. */
void dlock__results_clear(dlock__result *res, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        if (res[i].reply != NULL)
            freeReplyObject(res[i].reply);
        res[i].reply = NULL;
        res[i].status = DLOCK_EIO;
        res[i].err[0] = '\0';
    }
}

/* The argv of one script call: EVALSHA or EVAL, then keys and args. */
typedef struct callv {
    int argc;
    const char **argv;
    size_t *lens;
    char nkeys[24];
    const char *argv_small[32]; /* every call but a large renewal batch */
    size_t lens_small[32];
} callv;

static int callv_build(callv *v, const dlock_client *c, const dlock__cmd *cmd)
{
    int i, k = 0;
    v->argc = 3 + cmd->nkeys + cmd->nargs;
    if (v->argc <= 32) {
        v->argv = v->argv_small;
        v->lens = v->lens_small;
    } else {
        v->argv = malloc((size_t)v->argc * sizeof *v->argv);
        v->lens = malloc((size_t)v->argc * sizeof *v->lens);
        if (v->argv == NULL || v->lens == NULL) {
            free(v->argv);
            free(v->lens);
            return DLOCK_ENOMEM;
        }
    }
    dlock__fmt_i64(v->nkeys, cmd->nkeys);
    v->argv[k] = "EVALSHA";
    v->lens[k++] = 7;
    v->argv[k] = c->scripts[cmd->script].sha;
    v->lens[k++] = 40;
    v->argv[k] = v->nkeys;
    v->lens[k++] = strlen(v->nkeys);
    for (i = 0; i < cmd->nkeys; i++, k++) {
        v->argv[k] = cmd->keys[i];
        v->lens[k] = cmd->keylens[i];
    }
    for (i = 0; i < cmd->nargs; i++, k++) {
        v->argv[k] = cmd->args[i];
        v->lens[k] = cmd->arglens[i];
    }
    return DLOCK_OK;
}

/* Queue the call on conn: by SHA, or with the full source (after a
 * NOSCRIPT). */
static int callv_send(dlock_client *c, dlock__conn *conn, callv *v,
                      const dlock__cmd *cmd, int full)
{
    const dlock__script *s = &c->scripts[cmd->script];
    v->argv[0] = full ? "EVAL" : "EVALSHA";
    v->lens[0] = full ? 4 : 7;
    v->argv[1] = full ? s->src : s->sha;
    v->lens[1] = full ? strlen(s->src) : 40;
    atomic_fetch_add(&c->stats.requests, 1);
    return dlock__conn_append_argv(conn, v->argc, v->argv, v->lens);
}

enum { SLOT_IDLE, SLOT_WAIT, SLOT_DONE };

typedef struct slot {
    dlock__conn *conn;
    int state;
    int full;    /* EVAL sent after NOSCRIPT */
    int retried; /* one fresh-connection retry used */
} slot;

/* Open (or reopen) node i's connection and send the call; push the bytes
 * out at once so the common case needs no POLLOUT round. A pooled
 * connection the server has closed fails right here (EPIPE, reset): that
 * costs the one retry on a fresh connection. */
static int slot_start(dlock_client *c, int i, slot *s, callv *v,
                      const dlock__cmd *cmd, int64_t deadline_ms,
                      dlock__result *r)
{
    for (;;) {
        int rc =
            dlock__node_get(c, i, &s->conn, deadline_ms, r->err, sizeof r->err);
        if (rc != DLOCK_OK) {
            s->conn = NULL;
            s->state = SLOT_DONE;
            r->status = rc;
            return rc;
        }
        rc = callv_send(c, s->conn, v, cmd, s->full);
        if (rc == DLOCK_OK)
            rc = dlock__conn_progress(s->conn, POLLOUT, r->err, sizeof r->err);
        if (rc == DLOCK_OK) {
            s->state = SLOT_WAIT;
            r->sent = 1;
            return DLOCK_OK;
        }
        dlock__node_put(c, i, s->conn, 0);
        s->conn = NULL;
        if (s->retried || rc == DLOCK_ENOMEM ||
            dlock__now_ms() >= deadline_ms) {
            s->state = SLOT_DONE;
            r->status = rc;
            return rc;
        }
        s->retried = 1;
    }
}

/* A connection failed under a sent call: our scripts are idempotent, so
 * retry once on a fresh connection while time remains. */
static void slot_fail(dlock_client *c, int i, slot *s, callv *v,
                      const dlock__cmd *cmd, int64_t deadline_ms,
                      dlock__result *r, int rc)
{
    dlock__node_put(c, i, s->conn, 0);
    s->conn = NULL;
    if (!s->retried && dlock__now_ms() < deadline_ms) {
        s->retried = 1;
        slot_start(c, i, s, v, cmd, deadline_ms, r);
        return;
    }
    s->state = SLOT_DONE;
    r->status = rc;
}

/* Take node i's reply if it has arrived; handle NOSCRIPT. */
static void slot_collect(dlock_client *c, int i, slot *s, callv *v,
                         const dlock__cmd *cmd, int64_t deadline_ms,
                         dlock__result *r)
{
    redisReply *rep = NULL;
    int got = dlock__conn_pop_reply(s->conn, &rep, r->err, sizeof r->err);
    if (got < 0) {
        slot_fail(c, i, s, v, cmd, deadline_ms, r, got);
        return;
    }
    if (got == 0)
        return;
    if (rep->type == REDIS_REPLY_ERROR && !s->full &&
        strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        int rc;
        freeReplyObject(rep);
        s->full = 1;
        rc = callv_send(c, s->conn, v, cmd, 1);
        if (rc == DLOCK_OK)
            rc = dlock__conn_progress(s->conn, POLLOUT, r->err, sizeof r->err);
        if (rc != DLOCK_OK)
            slot_fail(c, i, s, v, cmd, deadline_ms, r, rc);
        return;
    }
    s->state = SLOT_DONE;
    dlock__node_put(c, i, s->conn, 1);
    s->conn = NULL;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(r->err, sizeof r->err, "%s: %s", c->nodes[i].ep.display,
                 rep->str);
        /* A server with a password we were not given answers NOAUTH, or
         * for a long command "unauthenticated multibulk length": both are
         * authentication failures. */
        r->status = strncmp(rep->str, "NOAUTH", 6) == 0 ||
                            strstr(rep->str, "unauthenticated") != NULL
                        ? DLOCK_EAUTH
                        : DLOCK_ESERVER;
        freeReplyObject(rep);
        return;
    }
    r->reply = rep;
    r->status = DLOCK_OK;
}

/* See internal.h. */
int dlock__exec(dlock_client *c, uint64_t mask, const dlock__cmd *cmd,
                int64_t deadline_ms, dlock__result *res)
{
    slot slots[MAX_NODES];
    struct pollfd pfd[MAX_NODES];
    int idx[MAX_NODES];
    callv v;
    int i, nok = 0, rc;

    memset(slots, 0, sizeof slots);
    for (i = 0; i < c->nnodes; i++)
        slots[i].full = cmd->eval;
    for (i = 0; i < c->nnodes; i++) {
        res[i].reply = NULL;
        res[i].err[0] = '\0';
        res[i].status = DLOCK_EIO;
        res[i].sent = 0;
    }
    rc = callv_build(&v, c, cmd);
    if (rc != DLOCK_OK) {
        for (i = 0; i < c->nnodes; i++)
            if (mask & (1ULL << i)) {
                res[i].status = rc;
                snprintf(res[i].err, sizeof res[i].err, "out of memory");
            }
        return 0;
    }
    for (i = 0; i < c->nnodes; i++)
        if (mask & (1ULL << i))
            slot_start(c, i, &slots[i], &v, cmd, deadline_ms, &res[i]);

    for (;;) {
        int n = 0, r, k;
        int64_t left;
        for (i = 0; i < c->nnodes; i++) {
            if (slots[i].state != SLOT_WAIT)
                continue;
            /* Data may already sit in the reader (TLS buffers, or a
             * reply read together with the write). */
            slot_collect(c, i, &slots[i], &v, cmd, deadline_ms, &res[i]);
            if (slots[i].state != SLOT_WAIT)
                continue;
            pfd[n].fd = dlock__conn_fd(slots[i].conn);
            pfd[n].events = dlock__conn_events(slots[i].conn);
            pfd[n].revents = 0;
            idx[n++] = i;
        }
        if (n == 0)
            break;
        left = deadline_ms - dlock__now_ms();
        if (left <= 0) {
            for (k = 0; k < n; k++) {
                i = idx[k];
                /* Keep the connection, its answer marked unwanted: what
                 * goes next to this node (an undo of this very request,
                 * say) then reaches Redis after it, in order. A new
                 * connection could be read first when a stalled server
                 * wakes. A connection with several unanswered requests is
                 * closed instead (the node looks dead). */
                dlock__node_put(c, i, slots[i].conn,
                                dlock__conn_abandon(slots[i].conn) <=
                                    MAX_STALE);
                slots[i].conn = NULL;
                slots[i].state = SLOT_DONE;
                res[i].status = DLOCK_ETIMEDOUT;
                snprintf(res[i].err, sizeof res[i].err, "%s: no answer in time",
                         c->nodes[i].ep.display);
            }
            break;
        }
        r = poll(pfd, (nfds_t)n, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno != EINTR)
            break;
        for (k = 0; k < n && r > 0; k++) {
            i = idx[k];
            if (pfd[k].revents == 0)
                continue;
            rc = dlock__conn_progress(slots[i].conn, pfd[k].revents, res[i].err,
                                      sizeof res[i].err);
            if (rc != DLOCK_OK)
                slot_fail(c, i, &slots[i], &v, cmd, deadline_ms, &res[i], rc);
        }
    }
    if (v.argv != v.argv_small) {
        free(v.argv);
        free(v.lens);
    }
    for (i = 0; i < c->nnodes; i++) {
        if (slots[i].conn != NULL) /* poll failed: give up on it */
            dlock__node_put(c, i, slots[i].conn, 0);
        if ((mask & (1ULL << i)) && res[i].status == DLOCK_OK)
            nok++;
    }
    return nok;
}

/* SHA1 of a script as 40 hex digits (what EVALSHA wants). */
void dlock__sha1_hex(const char *src, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0, i;
    EVP_Digest(src, strlen(src), md, &len, EVP_sha1(), NULL);
    for (i = 0; i < len && i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[40] = '\0';
}
