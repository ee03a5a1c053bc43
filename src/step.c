/*
 * step.c - one step of every lock operation: run one script on a set of
 * nodes in parallel and read the answers. dlock__exec() sends on every
 * node first, then drives all the connections with one poll() loop until
 * each has answered or the deadline passes, so an acquire over five
 * servers costs one round trip of the slowest healthy server, and a
 * stalled server costs at most the deadline. Also here: the script table
 * (one X-macro in step.h), the command builder, and the helpers that read
 * replies and explain a failed step.
 *
 * A single-instance lock is the case of one node; Redlock is the same code
 * with N.
 */
#include <assert.h>
#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "ident.h"
#include "opener.h"
#include "step.h"

/* Requests given up on (timed out) that one pooled connection may carry. */
#define MAX_STALE 2

/* The sources, in DLOCK__S_* order. */
static const char *const script_src[DLOCK__S_COUNT] = {
#define DLOCK__SRC(id, file) dlock__lua_##file,
    DLOCK__SCRIPT_LIST(DLOCK__SRC)
#undef DLOCK__SRC
};

/* See step.h. */
void dlock__scripts_init(dlock__script *scripts)
{
    int i;
    for (i = 0; i < DLOCK__S_COUNT; i++) {
        scripts[i].src = script_src[i];
        dlock__sha1_hex(script_src[i], scripts[i].sha);
    }
}

/* See step.h. */
void dlock__cmd_begin(dlock__cmdbuf *b, int script)
{
    b->cmd = (dlock__cmd){.script = script,
                          .keys = b->key,
                          .keylens = b->keylen,
                          .args = b->arg,
                          .arglens = b->arglen};
    b->nnum = 0;
}

/* See step.h. */
void dlock__cmd_key(dlock__cmdbuf *b, const char *key, size_t len)
{
    assert(b->cmd.nkeys < DLOCK__CMD_KEYS);
    b->key[b->cmd.nkeys] = key;
    b->keylen[b->cmd.nkeys++] = len;
}

/* See step.h. */
void dlock__cmd_arg(dlock__cmdbuf *b, const char *arg, size_t len)
{
    assert(b->cmd.nargs < DLOCK__CMD_ARGS);
    b->arg[b->cmd.nargs] = arg;
    b->arglen[b->cmd.nargs++] = len;
}

/* See step.h. Formatted without snprintf: on every request's path. */
void dlock__cmd_arg_i64(dlock__cmdbuf *b, int64_t v)
{
    char *p;
    assert(b->nnum < DLOCK__CMD_ARGS);
    p = b->num[b->nnum++];
    dlock__cmd_arg(b, p, dlock__fmt_i64(p, v));
}

/* See step.h. */
void dlock__cmd_arg_u64(dlock__cmdbuf *b, uint64_t v)
{
    char *p;
    size_t n;
    assert(b->nnum < DLOCK__CMD_ARGS);
    p = b->num[b->nnum++];
    n = dlock__fmt_u64(p, v);
    p[n] = '\0';
    dlock__cmd_arg(b, p, n);
}

/* The nodes and scripts of one dlock__exec() call. */
typedef struct fanout {
    dlock__nodeset *ns;
    const dlock__script *scripts;
} fanout;

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

static int callv_build(callv *v, const fanout *c, const dlock__cmd *cmd)
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
static int callv_send(fanout *c, dlock__conn *conn, callv *v,
                      const dlock__cmd *cmd, int full)
{
    const dlock__script *s = &c->scripts[cmd->script];
    int rc;
    v->argv[0] = full ? "EVAL" : "EVALSHA";
    v->lens[0] = full ? 4 : 7;
    v->argv[1] = full ? s->src : s->sha;
    v->lens[1] = full ? strlen(s->src) : 40;
    atomic_fetch_add(&c->ns->stats->requests, 1);
    rc = dlock__conn_append_argv(conn, v->argc, v->argv, v->lens);
    if (rc == DLOCK_OK && cmd->wait_replicas > 0) {
        /* Pipelined: WAIT counts the replicas that acknowledged this
         * connection's last write, the script's. */
        char n[24], t[24];
        const char *wv[3] = {"WAIT", n, t};
        dlock__fmt_i64(n, cmd->wait_replicas);
        dlock__fmt_i64(t, cmd->wait_timeout_ms);
        atomic_fetch_add(&c->ns->stats->requests, 1);
        rc = dlock__conn_append_argv(conn, 3, wv, NULL);
    }
    return rc;
}

enum { SLOT_IDLE, SLOT_WAIT, SLOT_DONE, SLOT_BACKOFF, SLOT_OPENING };

/* Redirections (MOVED, ASK) one call follows in a cluster before the
 * last one is reported as an error. */
#define MAX_HOPS 5

typedef struct slot {
    dlock__conn *conn;
    dlock__node *nd;  /* the node conn is to: node i, or a cluster's master */
    dlock__node *ask; /* cluster: ASK named this node for this call */
    int state;
    int full;          /* EVAL sent after NOSCRIPT */
    int retried;       /* one fresh-connection retry used */
    int fresh;         /* its connection was opened for this call */
    int skip;          /* replies to drop first (ASKING's +OK, the WAIT
                          after a NOSCRIPT) */
    redisReply *first; /* the script's reply while WAIT's is awaited */
    int hops;          /* redirections followed */
    int tries;         /* cluster: rounds of waiting for the cluster */
    int lost;          /* a request sent on a connection that then failed:
                         it may have run */
    char refused[128]; /* cluster: the last TRYAGAIN / CLUSTERDOWN, which
                          says more than a timeout it ends in */
    int64_t retry_at;  /* SLOT_BACKOFF: start again then */
    int ident;         /* INFO server sent before the call, answer pending */
    dlock__conn *pre;  /* SLOT_OPENING: the connection opener.c opened for
                          this call, used by slot_start */
    int late;          /* opened after the outcome was certain: sent with
                          the source (full), never waited for */
} slot;

/* The slot of a call's keys (all of one call share it). */
static uint16_t cmd_slot(const dlock__cmd *cmd)
{
    return cmd->nkeys > 0 ? dlock__key_slot(cmd->keys[0], cmd->keylens[0]) : 0;
}

/* Cluster: the call cannot go now (a failover or a slot migration in
 * progress, CLUSTERDOWN, a master that does not answer): try again after
 * a short backoff (10 ms doubling to 100 ms) while the deadline allows,
 * else give up with rc (r->err says why). */
static void slot_later(fanout *c, slot *s, dlock__result *r, int rc,
                       int64_t deadline_ms)
{
    int64_t d = s->tries < 4 ? 10LL << s->tries : 100;
    int64_t now = dlock__now_ms();
    s->tries++;
    s->ask = NULL;
    s->hops = 0; /* ASK, TRYAGAIN, ASK...: the deadline bounds those */
    r->status = rc;
    if (c->ns->cluster != NULL && now + d < deadline_ms) {
        s->state = SLOT_BACKOFF;
        s->retry_at = now + d;
    } else {
        s->state = SLOT_DONE;
    }
}

/* A failure worth waiting out in a cluster: the node may be gone and its
 * slots on their way to a replica. Not a bad password or TLS setup. */
static int cluster_transient(const fanout *c, int rc)
{
    return c->ns->cluster != NULL &&
           (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ESERVER);
}

/* Open (or reopen) node i's connection and send the call; push the bytes
 * out at once so the common case needs no POLLOUT round. A pooled
 * connection the server has closed fails right here (EPIPE, reset): that
 * costs the one retry on a fresh connection. In a cluster the node is the
 * master of the call's slot (or the one an ASK named: ASKING goes
 * first). */
static int slot_start(fanout *c, int i, slot *s, callv *v,
                      const dlock__cmd *cmd, int64_t deadline_ms,
                      dlock__result *r)
{
    static const char *const asking[1] = {"ASKING"};
    for (;;) {
        int rc = DLOCK_OK;
        s->conn = NULL;
        s->skip = 0;
        s->fresh = 1;
        if (c->ns->cluster == NULL)
            s->nd = &c->ns->node[i];
        else if (s->ask != NULL)
            s->nd = s->ask;
        else
            rc = dlock__cluster_route(c->ns, cmd_slot(cmd), &s->nd, deadline_ms,
                                      r->err, sizeof r->err);
        if (rc == DLOCK_OK && c->ns->cluster == NULL && cmd->pins != NULL &&
            cmd->pins[i] != NULL && !s->retried) {
            /* The hold's own connection: its earlier request (given up
             * on, answer pending) goes first. */
            s->conn = cmd->pins[i];
            cmd->pins[i] = NULL;
            s->fresh = 0;
        } else if (rc == DLOCK_OK && s->pre != NULL) {
            s->conn = s->pre; /* opened for this call (opener.c) */
            s->pre = NULL;
        } else if (rc == DLOCK_OK && c->ns->cluster == NULL) {
            rc = dlock__node_get_ex(c->ns, i, &s->conn, deadline_ms, r->err,
                                    sizeof r->err, &s->fresh);
        } else if (rc == DLOCK_OK) {
            /* A cluster's master: counted as fresh (never given up on). */
            rc = dlock__node_take(c->ns, s->nd, &s->conn, deadline_ms, r->err,
                                  sizeof r->err);
        }
        if (rc != DLOCK_OK) {
            s->conn = NULL;
            if (cluster_transient(c, rc)) {
                dlock__cluster_stale(c->ns);
                slot_later(c, s, r, rc, deadline_ms);
            } else {
                s->state = SLOT_DONE;
                r->status = rc;
            }
            return rc;
        }
        if (cmd->lock_write && c->ns->locate == NULL &&
            c->ns->cluster == NULL && atomic_load(&s->nd->replica)) {
            /* A fixed server that is a replica: a lock written there
             * (replica-read-only no) would not be seen by the master's
             * clients and vanish at the next resync. */
            char of[80];
            pthread_mutex_lock(&s->nd->mu);
            snprintf(of, sizeof of, "%s", s->nd->master_of);
            pthread_mutex_unlock(&s->nd->mu);
            dlock__node_give(c->ns, s->nd, s->conn, 1);
            s->conn = NULL;
            s->state = SLOT_DONE;
            r->status = DLOCK_EREFUSED;
            snprintf(r->err, sizeof r->err,
                     "%s is a replica%s%s%s, not a master: locks are taken "
                     "on masters only",
                     dlock__node_name(s->nd), of[0] ? " (of " : "", of,
                     of[0] ? ")" : "");
            return DLOCK_EREFUSED;
        }
        /* A node not yet identified is asked who it is on the way (a
         * Redlock must not count one server twice; ident.c). */
        s->ident = dlock__ident_wanted(c->ns, i);
        rc = s->ident ? dlock__ident_ask(s->conn) : DLOCK_OK;
        if (rc == DLOCK_OK && s->ask != NULL) {
            atomic_fetch_add(&c->ns->stats->requests, 1);
            rc = dlock__conn_append_argv(s->conn, 1, (const char **)asking,
                                         NULL);
            s->skip = 1;
        }
        if (rc == DLOCK_OK)
            rc = callv_send(c, s->conn, v, cmd, s->full);
        if (rc == DLOCK_OK)
            rc = dlock__conn_progress(s->conn, POLLOUT, r->err, sizeof r->err);
        if (rc == DLOCK_OK) {
            s->state = SLOT_WAIT;
            r->sent = 1;
            return DLOCK_OK;
        }
        dlock__node_give(c->ns, s->nd, s->conn, 0);
        s->conn = NULL;
        if (s->retried || rc == DLOCK_ENOMEM ||
            dlock__now_ms() >= deadline_ms) {
            if (cluster_transient(c, rc)) {
                dlock__cluster_stale(c->ns);
                slot_later(c, s, r, rc, deadline_ms);
                return rc;
            }
            s->state = SLOT_DONE;
            r->status = rc;
            return rc;
        }
        s->retried = 1;
    }
}

/* A connection failed under a sent call: our scripts are idempotent, so
 * retry once on a fresh connection while time remains (in a cluster,
 * then again after backoff, the map refreshed: a failover may be under
 * way). */
static void slot_fail(fanout *c, int i, slot *s, callv *v,
                      const dlock__cmd *cmd, int64_t deadline_ms,
                      dlock__result *r, int rc)
{
    dlock__node_give(c->ns, s->nd, s->conn, 0);
    s->conn = NULL;
    s->skip = 0;
    if (s->first != NULL)
        freeReplyObject(s->first);
    s->first = NULL;
    s->lost = 1;
    /* A dropped connection is what a failover looks like. */
    dlock__node_suspect(c->ns, i);
    if (!s->retried && dlock__now_ms() < deadline_ms) {
        s->retried = 1;
        slot_start(c, i, s, v, cmd, deadline_ms, r);
        return;
    }
    if (cluster_transient(c, rc)) {
        dlock__cluster_stale(c->ns);
        slot_later(c, s, r, rc, deadline_ms);
        return;
    }
    s->state = SLOT_DONE;
    r->status = rc;
}

/* Cluster: an error reply that is a redirection (MOVED: the map learns
 * the slot's new master; ASK: this call once to the node named, after
 * ASKING) or a request to wait (TRYAGAIN during a migration,
 * CLUSTERDOWN): follow it. 1 when handled (rep freed), 0 when the reply
 * stays an error. The call did not run where it was refused, so sending
 * it again is safe. */
static int slot_redirect(fanout *c, int i, slot *s, callv *v,
                         const dlock__cmd *cmd, int64_t deadline_ms,
                         dlock__result *r, redisReply *rep)
{
    dlock__node *to = NULL;
    int sl;
    dlock__redirect k =
        dlock__cluster_redirect(c->ns, s->nd, rep->str, &to, &sl);
    if (k == DLOCK__REDIR_NONE ||
        (k != DLOCK__REDIR_RETRY && s->hops >= MAX_HOPS))
        return 0;
    dlock__node_give(c->ns, s->nd, s->conn, 1);
    s->conn = NULL;
    snprintf(r->err, sizeof r->err, "%s: %s", dlock__node_name(s->nd),
             rep->str);
    freeReplyObject(rep);
    /* Refused: it did not run here (only an earlier request whose
     * connection failed might have: then an undo is still due). */
    r->sent = s->lost;
    if (k == DLOCK__REDIR_RETRY) {
        snprintf(s->refused, sizeof s->refused, "%.120s", r->err);
        slot_later(c, s, r, DLOCK_ESERVER, deadline_ms);
        return 1;
    }
    s->hops++;
    s->ask = k == DLOCK__REDIR_ASK ? to : NULL;
    slot_start(c, i, s, v, cmd, deadline_ms, r);
    return 1;
}

/* The status of an error reply: a server with a password we were not
 * given answers NOAUTH, or for a long command "unauthenticated multibulk
 * length" (authentication failures); a redirection outside cluster mode
 * means the URL names a cluster node (a usage error, said so). With
 * Sentinel, a replica (READONLY) or a server not ready (LOADING,
 * MASTERDOWN) is what a failover in progress looks like: the master is
 * located again and a retry may succeed (failover 1). */
static int error_status(const fanout *c, const slot *s, dlock__result *r,
                        const char *msg, int failover)
{
    if (c->ns->cluster == NULL &&
        (strncmp(msg, "MOVED ", 6) == 0 || strncmp(msg, "ASK ", 4) == 0)) {
        snprintf(r->err, sizeof r->err,
                 "%s: this is a Redis Cluster node (it answered %.48s): use "
                 "redis+cluster://",
                 dlock__node_name(s->nd), msg);
        return DLOCK_EINVAL;
    }
    if (failover && c->ns->locate != NULL)
        return DLOCK_ESERVER;
    /* A server with a password we were not given answers NOAUTH, or for a
     * long command "unauthenticated multibulk length": both are
     * authentication failures. NOPERM, READONLY, an unknown command are
     * refusals no retry cures (errors.c). */
    return dlock__server_error_code(msg, strlen(msg));
}

/* Finish node i with the script's reply rep (owned; its WAIT answer, if
 * any, read already): a cluster's redirection is followed, an error reply
 * becomes the node's status. */
static void slot_finish(fanout *c, int i, slot *s, callv *v,
                        const dlock__cmd *cmd, int64_t deadline_ms,
                        dlock__result *r, redisReply *rep)
{
    if (rep->type == REDIS_REPLY_ERROR && c->ns->cluster != NULL &&
        slot_redirect(c, i, s, v, cmd, deadline_ms, r, rep))
        return;
    s->state = SLOT_DONE;
    dlock__node_give(c->ns, s->nd, s->conn, 1);
    s->conn = NULL;
    if (rep->type != REDIS_REPLY_ERROR)
        atomic_fetch_or(&s->nd->scripts_ok, 1ULL << cmd->script);
    if (rep->type == REDIS_REPLY_ERROR) {
        const char *why = "";
        if (strncmp(rep->str, "READONLY", 8) == 0 ||
            strstr(rep->str, "-READONLY") != NULL)
            why = "a replica, not a master: ";
        else if (strncmp(rep->str, "LOADING", 7) == 0 ||
                 strncmp(rep->str, "MASTERDOWN", 10) == 0)
            why = "not ready: ";
        if (why[0] != '\0')
            dlock__node_suspect(c->ns, i); /* a failover may explain it */
        snprintf(r->err, sizeof r->err, "%s: %s%s", dlock__node_name(s->nd),
                 why, rep->str);
        r->status = error_status(c, s, r, rep->str, why[0] != '\0');
        freeReplyObject(rep);
        return;
    }
    r->reply = rep;
    r->status = DLOCK_OK;
}

/* Take node i's replies as they arrive, in the order they were sent:
 * INFO server's (a node being identified, ident.c), the +OK of ASKING (a
 * cluster's ASK), the script's (NOSCRIPT: send the source; in a cluster a
 * redirection is followed), then, for a lock write with wait_replicas,
 * WAIT's. */
static void slot_collect(fanout *c, int i, slot *s, callv *v,
                         const dlock__cmd *cmd, int64_t deadline_ms,
                         dlock__result *r)
{
    for (;;) {
        redisReply *rep = NULL;
        int got = dlock__conn_pop_reply(s->conn, &rep, r->err, sizeof r->err);
        if (got < 0) {
            slot_fail(c, i, s, v, cmd, deadline_ms, r, got);
            return;
        }
        if (got == 0)
            return;
        if (s->ident) { /* INFO server's answer comes first */
            dlock__ident_learn(c->ns, i, rep);
            freeReplyObject(rep);
            s->ident = 0;
            continue;
        }
        if (s->skip > 0) { /* ASKING's +OK, the WAIT after a NOSCRIPT */
            s->skip--;
            freeReplyObject(rep);
            continue;
        }
        if (s->first != NULL) {
            /* WAIT's answer: the number of replicas that acknowledged. */
            r->acks = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
            freeReplyObject(rep);
            rep = s->first;
            s->first = NULL;
            slot_finish(c, i, s, v, cmd, deadline_ms, r, rep);
            return;
        }
        if (rep->type == REDIS_REPLY_ERROR && !s->full &&
            strncmp(rep->str, "NOSCRIPT", 8) == 0) {
            static const char *const asking[1] = {"ASKING"};
            int rc = DLOCK_OK;
            /* A script it ran before is gone: its cache was flushed (or it
             * restarted), so no script of ours is known there any more. (A
             * script it never ran proves nothing about the others.) */
            if (atomic_load(&s->nd->scripts_ok) & (1ULL << cmd->script))
                atomic_store(&s->nd->scripts_ok, 0);
            freeReplyObject(rep);
            s->full = 1;
            /* Still to come on this connection: the WAIT sent with the
             * call, then ASKING's +OK (ASK) before the script's. */
            s->skip = cmd->wait_replicas > 0;
            if (s->ask != NULL) {
                rc = dlock__conn_append_argv(s->conn, 1, (const char **)asking,
                                             NULL);
                s->skip++;
            }
            if (rc == DLOCK_OK)
                rc = callv_send(c, s->conn, v, cmd, 1);
            if (rc == DLOCK_OK)
                rc = dlock__conn_progress(s->conn, POLLOUT, r->err,
                                          sizeof r->err);
            if (rc != DLOCK_OK)
                slot_fail(c, i, s, v, cmd, deadline_ms, r, rc);
            return;
        }
        if (cmd->wait_replicas > 0) {
            s->first = rep;
            continue;
        }
        slot_finish(c, i, s, v, cmd, deadline_ms, r, rep);
        return;
    }
}

/* Give up on the request in flight on conn, keeping its EVAL form for a
 * NOSCRIPT answer (dlock__conn_abandon_eval). */
static void give_up_eval(fanout *c, callv *v, const dlock__cmd *cmd,
                         dlock__conn *conn)
{
    const dlock__script *sc = &c->scripts[cmd->script];
    v->argv[0] = "EVAL";
    v->lens[0] = 4;
    v->argv[1] = sc->src;
    v->lens[1] = strlen(sc->src);
    dlock__conn_abandon_eval(conn, v->argc, v->argv, v->lens);
}

/* The outcome is certain (cmd->enough): give up on the nodes still out.
 * Their connections go to cmd->pins (pin_out), or back to the pool
 * carrying the request's EVAL form for a NOSCRIPT answer. A node where a
 * NOSCRIPT is likely is waited for all the same: one reached over a
 * connection opened for this call (it may have restarted), or one not
 * known to have this script cached (it never ran it, or answered
 * NOSCRIPT to a script it had run since it last ran this one): an
 * acquire given up on would then simply
 * not happen there, a release would lie in the pool until its resend.
 * Not a node that opened after the outcome was certain (s->late): its
 * request carries the script's source, nothing to resend. Returns the
 * nodes still waited for. */
static uint64_t abandon_rest(fanout *c, slot *slots, callv *v,
                             const dlock__cmd *cmd, dlock__result *res)
{
    uint64_t still = 0;
    int i;
    for (i = 0; i < c->ns->n; i++) {
        slot *s = &slots[i];
        if (s->state != SLOT_WAIT)
            continue;
        if (!s->late &&
            (s->fresh || s->retried ||
             !(atomic_load(&s->nd->scripts_ok) & (1ULL << cmd->script)))) {
            still |= 1ULL << i;
            continue;
        }
        if (s->ident) /* INFO's answer is unread too */
            dlock__conn_abandon(s->conn);
        if (cmd->pin_out) {
            dlock__conn_abandon(s->conn);
            cmd->pins[i] = s->conn;
        } else if (s->full) {
            dlock__node_give(c->ns, s->nd, s->conn,
                             dlock__conn_abandon(s->conn) <= MAX_STALE);
        } else {
            /* Kept whatever it carries: it must be able to resend. */
            give_up_eval(c, v, cmd, s->conn);
            dlock__node_give(c->ns, s->nd, s->conn, 1);
        }
        s->conn = NULL;
        s->state = SLOT_DONE;
        res[i].status = DLOCK_ETIMEDOUT;
        res[i].pending = 1;
        snprintf(res[i].err, sizeof res[i].err, "%s: not waited for",
                 dlock__node_name(s->nd));
    }
    return still;
}

/* Two nodes are one server (ident.c): refuse every result of a step
 * (the undo excepted: cmd->eval), so that nothing counts toward a quorum.
 * Returns 1 when refused. */
static int refuse_same_server(const dlock__nodeset *ns, const dlock__cmd *cmd,
                              uint64_t mask, dlock__result *res)
{
    char msg[DLOCK__ERRLEN];
    int i;
    if (cmd->eval || !dlock__ident_refused(ns, msg, sizeof msg))
        return 0;
    for (i = 0; i < ns->n; i++) {
        if (!(mask & (1ULL << i)))
            continue;
        if (res[i].reply != NULL)
            freeReplyObject(res[i].reply);
        res[i].reply = NULL;
        res[i].status = DLOCK_EINVAL;
        snprintf(res[i].err, sizeof res[i].err, "%s", msg);
    }
    return 1;
}

/* Several servers: open the connections the call lacks all at once
 * (opener.c), so that a node that does not answer holds up no other; the
 * nodes being opened wait in SLOT_OPENING, the others start now. Returns
 * the opener (NULL: every node started here, as with one server). */
static dlock__opener *start_all(fanout *c, slot *slots, callv *v,
                                const dlock__cmd *cmd, uint64_t mask,
                                int64_t deadline_ms, dlock__result *res)
{
    uint64_t pinned = 0, opening;
    dlock__opener *op;
    int i;
    for (i = 0; cmd->pins != NULL && i < c->ns->n; i++)
        if (cmd->pins[i] != NULL)
            pinned |= 1ULL << i;
    op = dlock__opener_start(c->ns, mask & ~pinned, deadline_ms);
    opening = dlock__opener_nodes(op);
    for (i = 0; i < c->ns->n; i++) {
        if (!(mask & (1ULL << i)))
            continue;
        if (opening & (1ULL << i))
            slots[i].state = SLOT_OPENING;
        else
            slot_start(c, i, &slots[i], v, cmd, deadline_ms, &res[i]);
    }
    return op;
}

/* Start the nodes whose connection the opener has opened since the last
 * look; one whose open failed is done, with that error. Returns the
 * nodes still being opened. */
static uint64_t take_opened(fanout *c, dlock__opener *op, slot *slots, callv *v,
                            const dlock__cmd *cmd, int64_t deadline_ms,
                            dlock__result *res)
{
    dlock__conn *conn;
    int i, rc;
    if (op == NULL)
        return 0;
    dlock__opener_ack(op);
    for (i = 0; i < c->ns->n; i++) {
        if (slots[i].state != SLOT_OPENING ||
            !dlock__opener_take(op, i, &conn, &rc, res[i].err,
                                sizeof res[i].err))
            continue;
        if (rc != DLOCK_OK) {
            slots[i].state = SLOT_DONE;
            res[i].status = rc;
            continue;
        }
        slots[i].pre = conn;
        slots[i].state = SLOT_IDLE;
        slot_start(c, i, &slots[i], v, cmd, deadline_ms, &res[i]);
    }
    return dlock__opener_nodes(op);
}

/* The step ends with nodes still being opened: nothing was sent to them
 * (their connections go to the pool when they open). */
static void give_up_opening(fanout *c, slot *slots, dlock__result *res,
                            const char *why)
{
    int i;
    for (i = 0; i < c->ns->n; i++) {
        if (slots[i].state != SLOT_OPENING)
            continue;
        slots[i].state = SLOT_DONE;
        res[i].status = DLOCK_ETIMEDOUT;
        snprintf(res[i].err, sizeof res[i].err, "%s: %s",
                 dlock__node_name(&c->ns->node[i]), why);
    }
}

/* See step.h. */
int dlock__exec(dlock__nodeset *ns, const dlock__script *scripts, uint64_t mask,
                const dlock__cmd *cmd, int64_t deadline_ms, dlock__result *res)
{
    fanout f = {ns, scripts};
    fanout *c = &f;
    slot slots[DLOCK_MAX_SERVERS];
    struct pollfd pfd[DLOCK_MAX_SERVERS + 1]; /* + the opener's */
    int idx[DLOCK_MAX_SERVERS];
    dlock__opener *op;
    callv v;
    int i, nok = 0, rc;

    memset(slots, 0, sizeof slots);
    for (i = 0; i < c->ns->n; i++)
        slots[i].full = cmd->eval;
    for (i = 0; i < c->ns->n; i++) {
        res[i].reply = NULL;
        res[i].err[0] = '\0';
        res[i].status = DLOCK_EIO;
        res[i].sent = 0;
        res[i].pending = 0;
        res[i].acks = -1;
    }
    if (cmd->wait_replicas > 0)
        deadline_ms += cmd->wait_timeout_ms;
    if (refuse_same_server(ns, cmd, mask, res))
        return 0;
    rc = callv_build(&v, c, cmd);
    if (rc != DLOCK_OK) {
        for (i = 0; i < c->ns->n; i++)
            if (mask & (1ULL << i)) {
                res[i].status = rc;
                snprintf(res[i].err, sizeof res[i].err, "out of memory");
            }
        return 0;
    }
    op = start_all(c, slots, &v, cmd, mask, deadline_ms, res);

    for (;;) {
        int n = 0, r, k, later = 0, opening;
        int64_t left, now = dlock__now_ms(), wake = deadline_ms;
        uint64_t waiting = 0, open_mask;
        open_mask = take_opened(c, op, slots, &v, cmd, deadline_ms, res);
        opening = open_mask != 0;
        for (i = 0; i < c->ns->n; i++) {
            if (slots[i].state == SLOT_BACKOFF && now >= slots[i].retry_at)
                slot_start(c, i, &slots[i], &v, cmd, deadline_ms, &res[i]);
            if (slots[i].state == SLOT_BACKOFF) {
                later++;
                if (slots[i].retry_at < wake)
                    wake = slots[i].retry_at;
                continue;
            }
            if (slots[i].state != SLOT_WAIT)
                continue;
            /* Data may already sit in the reader (TLS buffers, or a
             * reply read together with the write). */
            slot_collect(c, i, &slots[i], &v, cmd, deadline_ms, &res[i]);
            if (slots[i].state == SLOT_BACKOFF) {
                later++;
                if (slots[i].retry_at < wake)
                    wake = slots[i].retry_at;
                continue;
            }
            if (slots[i].state != SLOT_WAIT)
                continue;
            waiting |= 1ULL << i;
            pfd[n].fd = dlock__conn_fd(slots[i].conn);
            pfd[n].events = dlock__conn_events(slots[i].conn);
            pfd[n].revents = 0;
            idx[n++] = i;
        }
        /* A node still being opened may yet answer. */
        waiting |= open_mask;
        if (n == 0 && later == 0 && !opening)
            break;
        /* No early return for a lock write with wait_replicas: a grant
         * counts only once WAIT (read last on its connection) answered.
         * A node still connecting is asked all the same once it opens
         * (the opener is joined below anyway): with the script's source,
         * so that its answer need not be waited for. */
        if (cmd->enough != NULL && cmd->wait_replicas == 0 &&
            cmd->enough(res, waiting, c->ns->n, cmd->enough_ud)) {
            if (abandon_rest(c, slots, &v, cmd, res) == 0 && !opening)
                break;
            for (i = 0; i < c->ns->n; i++)
                if (slots[i].state == SLOT_OPENING)
                    slots[i].full = slots[i].late = 1;
        }
        if (waiting != 0 && n > 0) {
            /* Some were given up on: poll only the ones still waited for. */
            int k2 = 0;
            for (k = 0; k < n; k++)
                if (slots[idx[k]].state == SLOT_WAIT) {
                    pfd[k2] = pfd[k];
                    idx[k2++] = idx[k];
                }
            n = k2;
            if (n == 0 && later == 0 && !opening)
                break;
        }
        left = deadline_ms - dlock__now_ms();
        if (left <= 0) {
            for (i = 0; i < c->ns->n; i++)
                if (slots[i].state == SLOT_BACKOFF)
                    slots[i].state = SLOT_DONE; /* its last error stands */
            for (k = 0; k < n; k++) {
                i = idx[k];
                /* Keep the connection, its answer marked unwanted: what
                 * goes next to this node (an undo of this very request,
                 * say) then reaches Redis after it, in order. A new
                 * connection could be read first when a stalled server
                 * wakes. A connection with several unanswered requests is
                 * closed instead (the node looks dead). */
                int unread = 0, gave_eval = 0,
                    left_replies = slots[i].ident + slots[i].skip;
                /* In order: INFO's, ASKING's +OK (and the WAIT after a
                 * NOSCRIPT), the script's, WAIT's. */
                while (left_replies-- > 0)
                    unread = dlock__conn_abandon(slots[i].conn);
                if (slots[i].first != NULL) {
                    /* The script answered: only WAIT's is left. */
                    unread = dlock__conn_abandon(slots[i].conn);
                    freeReplyObject(slots[i].first);
                    slots[i].first = NULL;
                } else {
                    if (cmd->give_back && !slots[i].full) {
                        /* A give-back answered NOSCRIPT late must still
                         * be done: the connection then sends the
                         * source. */
                        give_up_eval(c, &v, cmd, slots[i].conn);
                        gave_eval = 1;
                    } else {
                        unread = dlock__conn_abandon(slots[i].conn);
                    }
                    if (cmd->wait_replicas > 0)
                        unread = dlock__conn_abandon(slots[i].conn);
                }
                dlock__node_give(c->ns, slots[i].nd, slots[i].conn,
                                 gave_eval ||
                                     unread <=
                                         MAX_STALE + slots[i].ident +
                                             (cmd->wait_replicas > 0 ? 2 : 0));
                slots[i].conn = NULL;
                slots[i].state = SLOT_DONE;
                res[i].status = DLOCK_ETIMEDOUT;
                /* A master that stopped answering may be failed over. */
                dlock__node_suspect(c->ns, i);
                snprintf(res[i].err, sizeof res[i].err, "%s: no answer in time",
                         dlock__node_name(slots[i].nd));
                dlock__cluster_stale(c->ns);
            }
            give_up_opening(c, slots, res, "no answer in time (connecting)");
            break;
        }
        if (wake - dlock__now_ms() < left)
            left = wake - dlock__now_ms() < 0 ? 0 : wake - dlock__now_ms();
        if (opening) {
            pfd[n].fd = dlock__opener_fd(op);
            pfd[n].events = POLLIN;
            pfd[n].revents = 0;
        }
        r = poll(pfd, (nfds_t)(n + opening), left > 60000 ? 60000 : (int)left);
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
    /* Poll failed with nodes still connecting. */
    give_up_opening(c, slots, res, "not waited for (connecting)");
    dlock__opener_finish(op);
    if (v.argv != v.argv_small) {
        free(v.argv);
        free(v.lens);
    }
    for (i = 0; i < c->ns->n; i++) {
        if (slots[i].conn != NULL) /* poll failed: give up on it */
            dlock__node_give(c->ns, slots[i].nd, slots[i].conn, 0);
        if (slots[i].first != NULL)
            freeReplyObject(slots[i].first);
        if ((res[i].status == DLOCK_EIO || res[i].status == DLOCK_ETIMEDOUT) &&
            slots[i].refused[0] != '\0') {
            /* The cluster kept refusing until time ran out: say so rather
             * than name the last connect or wait that the deadline cut. */
            res[i].status = DLOCK_ESERVER;
            snprintf(res[i].err, sizeof res[i].err, "%s", slots[i].refused);
        }
    }
    /* Found during this step: the nodes have run it, but one server must
     * not count twice. */
    if (refuse_same_server(ns, cmd, mask, res))
        return 0;
    for (i = 0; i < c->ns->n; i++)
        if ((mask & (1ULL << i)) && res[i].status == DLOCK_OK)
            nok++;
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

/* See step.h. */
int64_t dlock__step_deadline(const dlock__nodeset *ns, int64_t command_ms,
                             int64_t lease_ms)
{
    int64_t t = command_ms;
    if (ns->n > 1 && lease_ms > 0) {
        int64_t cap = lease_ms / 10 < 10 ? 10 : lease_ms / 10;
        if (cap < t)
            t = cap;
    }
    return dlock__now_ms() + t;
}

/* No majority because so many servers refused (credentials, ACL,
 * read-only replica...) that none is left: that is the refusal, which a
 * retry cannot cure, not an outage. Returns the code to report. */
static int refusal_code(const dlock__nodeset *ns, const dlock__result *res,
                        uint64_t mask, int code)
{
    int i, refused = 0, auth = 0;
    if (code != DLOCK_NO_QUORUM)
        return code;
    for (i = 0; i < ns->n; i++) {
        if (!(mask & (1ULL << i)))
            continue;
        refused += res[i].status == DLOCK_EREFUSED;
        auth += res[i].status == DLOCK_EAUTH;
    }
    if (refused + auth > ns->n - ns->quorum)
        return refused > 0 ? DLOCK_EREFUSED : DLOCK_EAUTH;
    return code;
}

/* See step.h. */
int dlock__step_error(const dlock__nodeset *ns, const dlock__msgs *msgs,
                      const dlock__result *res, uint64_t mask, int code,
                      const char *what)
{
    char *b = dlock__msgs_buf(msgs);
    size_t off = 0;
    int i, nfail = 0;
    code = refusal_code(ns, res, mask, code);
    if (b == NULL)
        return code;
    if (dlock__ident_refused(ns, NULL, 0)) {
        char msg[DLOCK__ERRLEN];
        dlock__ident_refused(ns, msg, sizeof msg);
        snprintf(b, DLOCK__MSGLEN, "%s: %s", what, msg);
        return DLOCK_EINVAL;
    }
    for (i = 0; i < ns->n; i++)
        if ((mask & (1ULL << i)) && res[i].status != DLOCK_OK)
            nfail++;
    if (ns->n == 1) {
        snprintf(b, DLOCK__MSGLEN, "%s: %s", what,
                 res[0].err[0] ? res[0].err : dlock_strerror(res[0].status));
        return code;
    }
    off = (size_t)snprintf(b, DLOCK__MSGLEN, "%s: %d of %d nodes failed", what,
                           nfail, ns->n);
    for (i = 0; i < ns->n && off < DLOCK__MSGLEN; i++) {
        if (!(mask & (1ULL << i)) || res[i].status == DLOCK_OK)
            continue;
        off += (size_t)snprintf(b + off, DLOCK__MSGLEN - off, "; %s",
                                res[i].err[0] ? res[i].err
                                              : dlock_strerror(res[i].status));
    }
    return code;
}

/* See step.h. */
long long dlock__elem_int(const redisReply *r, size_t i)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return 0;
    if (r->element[i]->type == REDIS_REPLY_INTEGER)
        return r->element[i]->integer;
    if (r->element[i]->type == REDIS_REPLY_STRING)
        return strtoll(r->element[i]->str, NULL, 10);
    return 0;
}

/* See step.h. */
void dlock__malformed(const dlock__nodeset *ns, dlock__result *res, int i,
                      const char *what)
{
    res[i].status = DLOCK_EPROTO;
    snprintf(res[i].err, sizeof res[i].err, "%s: unexpected reply to %s",
             dlock__node_name(&ns->node[i]), what);
}
