/*
 * cluster_batch.c - several script calls at once on a Redis Cluster (see
 * cluster_batch.h for why: the watchdog's renewal round over many slots).
 *
 * One call of dlock__cluster_exec_many() runs in passes. A pass groups
 * the calls still to do by the node they go to (the master the slot map
 * names for their slot, or the node an ASK named), takes one connection
 * per node, writes every call of that node on it (ASKING first where an
 * ASK said so) and then one WAIT, and drives all the connections with one
 * poll() loop. Redis runs a connection's commands in order, so that WAIT
 * counts the replicas that have every call before it: one wait per master,
 * however many slots, and the masters wait at the same time.
 *
 * A call's state: TODO (to send in the next pass) -> SENT (written in this
 * pass; its script reply, once read, waits in res for the WAIT) -> DONE
 * (res final). A reply that asks for another try puts the call back to
 * TODO: NOSCRIPT (send the source), MOVED / ASK (another node), TRYAGAIN /
 * CLUSTERDOWN, or a connection that failed under it (after a backoff, the
 * map refreshed). Only this thread touches the state; the connections
 * come from the nodes' pools (node.c) and go back there.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cluster_batch.h"

/* Redirections one call follows in a row (as step.c). */
#define MAX_HOPS 5

enum { C_TODO, C_SENT, C_DONE };

/* One call's state across passes. */
typedef struct call {
    int state;
    int full;          /* send the source (EVAL): it answered NOSCRIPT */
    int hops;          /* MOVED / ASK followed */
    dlock__node *ask;  /* an ASK named this node: ASKING, then the call */
    int asked;         /* ASKING went before it in this pass */
    int later;         /* go again only after a backoff */
    int lane;          /* its lane in this pass, -1: none */
    char refused[128]; /* the last TRYAGAIN / CLUSTERDOWN */
} call;

/* One node's connection in one pass. */
typedef struct lane {
    dlock__node *nd;
    dlock__conn *conn;
    int *calls; /* its calls in the order written */
    int n;
    int k;      /* calls[k]'s reply is the next one expected */
    int asking; /* calls[k]'s ASKING +OK has been read */
    int done;
} lane;

typedef struct batch {
    dlock__nodeset *ns;
    const dlock__script *scripts;
    const dlock__cmd *cmds;
    dlock__result *res;
    call *cl;
    int m;
    int wait; /* WAIT after each lane's calls */
    int64_t deadline;
} batch;

/* A failure of call j (res[j].err set): transient ones (the node may be
 * gone, its slots on their way to a replica) go again after a backoff,
 * with the map refreshed; the rest are final. */
static void call_failed(batch *b, int j, int rc)
{
    b->res[j].status = rc;
    if (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ESERVER) {
        dlock__cluster_stale(b->ns);
        b->cl[j].state = C_TODO;
        b->cl[j].later = 1;
    } else {
        b->cl[j].state = C_DONE;
    }
}

/* Queue call j on conn: by SHA, or with the source after a NOSCRIPT. */
static int send_call(batch *b, dlock__conn *conn, int j)
{
    const dlock__cmd *cmd = &b->cmds[j];
    const dlock__script *s = &b->scripts[cmd->script];
    int argc = 3 + cmd->nkeys + cmd->nargs, i, k = 0, rc;
    const char **argv = malloc((size_t)argc * sizeof *argv);
    size_t *lens = malloc((size_t)argc * sizeof *lens);
    char nkeys[24];

    if (argv == NULL || lens == NULL) {
        free(argv);
        free(lens);
        return DLOCK_ENOMEM;
    }
    argv[k] = b->cl[j].full ? "EVAL" : "EVALSHA";
    lens[k++] = b->cl[j].full ? 4 : 7;
    argv[k] = b->cl[j].full ? s->src : s->sha;
    lens[k++] = b->cl[j].full ? strlen(s->src) : 40;
    argv[k] = nkeys;
    lens[k++] = dlock__fmt_i64(nkeys, cmd->nkeys);
    for (i = 0; i < cmd->nkeys; i++, k++) {
        argv[k] = cmd->keys[i];
        lens[k] = cmd->keylens[i];
    }
    for (i = 0; i < cmd->nargs; i++, k++) {
        argv[k] = cmd->args[i];
        lens[k] = cmd->arglens[i];
    }
    atomic_fetch_add(&b->ns->stats->requests, 1);
    rc = dlock__conn_append_argv(conn, argc, argv, lens);
    free(argv);
    free(lens);
    return rc;
}

/* Write lane ln's calls (and its WAIT) on its connection. */
static int lane_send(batch *b, lane *ln)
{
    static const char *const asking[1] = {"ASKING"};
    int i, rc = DLOCK_OK;
    for (i = 0; i < ln->n && rc == DLOCK_OK; i++) {
        int j = ln->calls[i];
        b->cl[j].asked = b->cl[j].ask != NULL;
        if (b->cl[j].asked) {
            atomic_fetch_add(&b->ns->stats->requests, 1);
            rc = dlock__conn_append_argv(ln->conn, 1, (const char **)asking,
                                         NULL);
        }
        if (rc == DLOCK_OK)
            rc = send_call(b, ln->conn, j);
        b->cl[j].state = C_SENT;
        b->res[j].sent = 1;
    }
    if (rc == DLOCK_OK && b->wait) {
        char n[24], t[24];
        const char *wv[3] = {"WAIT", n, t};
        dlock__fmt_i64(n, b->cmds[0].wait_replicas);
        dlock__fmt_i64(t, b->cmds[0].wait_timeout_ms);
        atomic_fetch_add(&b->ns->stats->requests, 1);
        rc = dlock__conn_append_argv(ln->conn, 3, wv, NULL);
    }
    return rc;
}

/* Lane ln's connection failed (or was never had): every call of it not
 * answered yet (a script reply without its WAIT counts as not answered:
 * the call is idempotent and goes again) fails with rc and err. */
static void lane_fail(batch *b, lane *ln, int rc, const char *err)
{
    int i;
    dlock__node_give(b->ns, ln->nd, ln->conn, 0);
    ln->conn = NULL;
    ln->done = 1;
    for (i = 0; i < ln->n; i++) {
        int j = ln->calls[i];
        dlock__result *r = &b->res[j];
        if (b->cl[j].state != C_SENT)
            continue;
        if (r->reply != NULL)
            freeReplyObject(r->reply);
        r->reply = NULL;
        snprintf(r->err, sizeof r->err, "%s", err);
        call_failed(b, j, rc);
    }
}

/* Every reply of lane ln is in: its connection goes back to the pool and
 * its answered calls are done (acks: WAIT's answer, -1 without one). */
static void lane_finish(batch *b, lane *ln, long long acks)
{
    int i;
    dlock__node_give(b->ns, ln->nd, ln->conn, 1);
    ln->conn = NULL;
    ln->done = 1;
    for (i = 0; i < ln->n; i++) {
        int j = ln->calls[i];
        if (b->cl[j].state != C_SENT)
            continue;
        b->cl[j].state = C_DONE;
        b->res[j].status = DLOCK_OK;
        b->res[j].acks = acks;
    }
}

/* An error reply rep (owned) to call j, answered by node nd: a request
 * to go again (NOSCRIPT, a redirection, TRYAGAIN / CLUSTERDOWN) puts it
 * back to TODO; anything else is its final status. */
static void call_error(batch *b, int j, dlock__node *nd, redisReply *rep)
{
    call *cl = &b->cl[j];
    dlock__result *r = &b->res[j];
    dlock__node *to = NULL;
    dlock__redirect k;
    const char *why = "";
    int sl;

    if (!cl->full && strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        /* A script it ran before is gone: its cache was flushed. */
        int script = b->cmds[j].script;
        if (atomic_load(&nd->scripts_ok) & (1ULL << script))
            atomic_store(&nd->scripts_ok, 0);
        cl->full = 1;
        cl->state = C_TODO;
        r->status = DLOCK_ESERVER; /* stands if no time is left to resend */
        snprintf(r->err, sizeof r->err, "%s: %s", dlock__node_name(nd),
                 rep->str);
        freeReplyObject(rep);
        return;
    }
    k = dlock__cluster_redirect(b->ns, nd, rep->str, &to, &sl);
    if (k != DLOCK__REDIR_NONE &&
        (k == DLOCK__REDIR_RETRY || cl->hops < MAX_HOPS)) {
        snprintf(r->err, sizeof r->err, "%s: %s", dlock__node_name(nd),
                 rep->str);
        r->status = DLOCK_ESERVER;
        cl->state = C_TODO;
        cl->ask = k == DLOCK__REDIR_ASK ? to : NULL;
        if (k == DLOCK__REDIR_RETRY) {
            snprintf(cl->refused, sizeof cl->refused, "%.120s", r->err);
            cl->later = 1;
            cl->hops = 0;
        } else {
            cl->hops++;
        }
        freeReplyObject(rep);
        return;
    }
    if (strncmp(rep->str, "READONLY", 8) == 0 ||
        strstr(rep->str, "-READONLY") != NULL)
        why = "a replica, not a master: ";
    else if (strncmp(rep->str, "LOADING", 7) == 0 ||
             strncmp(rep->str, "MASTERDOWN", 10) == 0)
        why = "not ready: ";
    snprintf(r->err, sizeof r->err, "%s: %s%s", dlock__node_name(nd), why,
             rep->str);
    r->status = dlock__server_error_code(rep->str, strlen(rep->str));
    cl->state = C_DONE;
    freeReplyObject(rep);
}

/* Take lane ln's replies as they arrive, in the order written: per call
 * ASKING's +OK (when asked) and the script's, then WAIT's. */
static void lane_collect(batch *b, lane *ln)
{
    while (!ln->done) {
        char err[DLOCK__ERRLEN];
        redisReply *rep = NULL;
        int j, got = dlock__conn_pop_reply(ln->conn, &rep, err, sizeof err);
        if (got < 0) {
            lane_fail(b, ln, got, err);
            return;
        }
        if (got == 0)
            return;
        if (ln->k >= ln->n) { /* WAIT's answer */
            long long acks =
                rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
            freeReplyObject(rep);
            lane_finish(b, ln, acks);
            return;
        }
        j = ln->calls[ln->k];
        if (b->cl[j].asked && !ln->asking) {
            ln->asking = 1;
            freeReplyObject(rep);
            continue;
        }
        ln->asking = 0;
        ln->k++;
        if (rep->type == REDIS_REPLY_ERROR) {
            call_error(b, j, ln->nd, rep);
        } else {
            atomic_fetch_or(&ln->nd->scripts_ok, 1ULL << b->cmds[j].script);
            b->res[j].reply = rep;
        }
        if (ln->k >= ln->n && !b->wait)
            lane_finish(b, ln, -1);
    }
}

/* Group the calls to do now into lanes, one per node; calls[] (m
 * entries) holds the lanes' lists. Returns the number of lanes. A call
 * whose slot has no known master fails (call_failed). */
static int lanes_make(batch *b, lane *lanes, int *calls)
{
    int j, l, nl = 0, off = 0;
    for (j = 0; j < b->m; j++) {
        call *cl = &b->cl[j];
        dlock__node *nd = cl->ask;
        int rc;
        cl->lane = -1;
        if (cl->state != C_TODO)
            continue;
        if (nd == NULL) {
            const dlock__cmd *cmd = &b->cmds[j];
            uint16_t slot = cmd->nkeys > 0
                                ? dlock__key_slot(cmd->keys[0], cmd->keylens[0])
                                : 0;
            rc = dlock__cluster_route(b->ns, slot, &nd, b->deadline,
                                      b->res[j].err, sizeof b->res[j].err);
            if (rc != DLOCK_OK) {
                call_failed(b, j, rc);
                continue;
            }
        }
        for (l = 0; l < nl && lanes[l].nd != nd; l++)
            ;
        if (l == nl) {
            if (nl == DLOCK_MAX_SERVERS) { /* the table has no more */
                snprintf(b->res[j].err, sizeof b->res[j].err,
                         "more than %d cluster nodes", DLOCK_MAX_SERVERS);
                cl->state = C_DONE;
                continue;
            }
            memset(&lanes[nl++], 0, sizeof *lanes);
            lanes[l].nd = nd;
        }
        cl->lane = l;
        lanes[l].n++;
    }
    for (l = 0; l < nl; l++) {
        lanes[l].calls = calls + off;
        off += lanes[l].n;
        lanes[l].n = 0;
    }
    for (j = 0; j < b->m; j++)
        if (b->cl[j].lane >= 0) {
            lane *ln = &lanes[b->cl[j].lane];
            ln->calls[ln->n++] = j;
        }
    return nl;
}

/* The deadline passed with lanes still out: their calls get no answer
 * (the connections are closed: they may carry a reply on its way). */
static void lanes_timeout(batch *b, lane *lanes, int nl)
{
    int l;
    for (l = 0; l < nl; l++) {
        char err[DLOCK__ERRLEN];
        if (lanes[l].done)
            continue;
        snprintf(err, sizeof err, "%s: no answer in time",
                 dlock__node_name(lanes[l].nd));
        lane_fail(b, &lanes[l], DLOCK_ETIMEDOUT, err);
    }
    /* No retry after the deadline: lane_fail made them TODO. */
    for (l = 0; l < b->m; l++)
        if (b->cl[l].state == C_TODO)
            b->cl[l].state = C_DONE;
}

/* One pass: send every call to do now, one lane per node, and read the
 * answers of all lanes with one poll() loop. */
static void pass(batch *b, int *calls)
{
    lane lanes[DLOCK_MAX_SERVERS];
    struct pollfd pfd[DLOCK_MAX_SERVERS];
    int idx[DLOCK_MAX_SERVERS];
    int nl = lanes_make(b, lanes, calls), l, rc;

    for (l = 0; l < nl; l++) {
        lane *ln = &lanes[l];
        char err[DLOCK__ERRLEN];
        err[0] = '\0';
        rc = dlock__node_take(b->ns, ln->nd, &ln->conn, b->deadline, err,
                              sizeof err);
        if (rc != DLOCK_OK) {
            ln->conn = NULL;
            for (int i = 0; i < ln->n; i++)
                b->cl[ln->calls[i]].state = C_SENT; /* for lane_fail */
            lane_fail(b, ln, rc, err);
            continue;
        }
        rc = lane_send(b, ln);
        if (rc == DLOCK_OK)
            rc = dlock__conn_progress(ln->conn, POLLOUT, err, sizeof err);
        if (rc != DLOCK_OK)
            lane_fail(b, ln, rc, err[0] ? err : "out of memory");
    }
    for (;;) {
        int n = 0, k, r;
        int64_t left;
        for (l = 0; l < nl; l++) {
            if (!lanes[l].done)
                lane_collect(b, &lanes[l]);
            if (lanes[l].done)
                continue;
            pfd[n].fd = dlock__conn_fd(lanes[l].conn);
            pfd[n].events = dlock__conn_events(lanes[l].conn);
            pfd[n].revents = 0;
            idx[n++] = l;
        }
        if (n == 0)
            return;
        left = b->deadline - dlock__now_ms();
        if (left <= 0) {
            lanes_timeout(b, lanes, nl);
            return;
        }
        r = poll(pfd, (nfds_t)n, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno != EINTR) {
            for (k = 0; k < n; k++)
                lane_fail(b, &lanes[idx[k]], DLOCK_EIO, "poll failed");
            return;
        }
        for (k = 0; k < n && r > 0; k++) {
            char err[DLOCK__ERRLEN];
            if (pfd[k].revents == 0)
                continue;
            rc = dlock__conn_progress(lanes[idx[k]].conn, pfd[k].revents, err,
                                      sizeof err);
            if (rc != DLOCK_OK)
                lane_fail(b, &lanes[idx[k]], rc, err);
        }
    }
}

/* Before the next pass: the calls that asked for a backoff wait it
 * (10 ms doubling to 100 ms, as step.c). 0, or -1 when the deadline
 * comes first (the calls still to do keep their last status). */
static int backoff(batch *b, int *tries)
{
    int j, later = 0;
    int64_t d;
    for (j = 0; j < b->m; j++)
        if (b->cl[j].state == C_TODO && b->cl[j].later) {
            later = 1;
            b->cl[j].later = 0;
        }
    if (!later)
        return dlock__now_ms() < b->deadline ? 0 : -1;
    d = *tries < 4 ? 10LL << *tries : 100;
    (*tries)++;
    if (dlock__now_ms() + d >= b->deadline)
        return -1;
    poll(NULL, 0, (int)d);
    return 0;
}

/* See cluster_batch.h. */
int dlock__cluster_exec_many(dlock__nodeset *ns, const dlock__script *scripts,
                             const dlock__cmd *cmds, int m, int64_t deadline_ms,
                             dlock__result *res)
{
    batch b = {.ns = ns, .scripts = scripts, .cmds = cmds, .res = res, .m = m};
    int *calls;
    int j, nok = 0, tries = 0;

    for (j = 0; j < m; j++) {
        res[j].reply = NULL;
        res[j].err[0] = '\0';
        res[j].status = DLOCK_EIO;
        res[j].sent = 0;
        res[j].pending = 0;
        res[j].acks = -1;
    }
    if (m <= 0)
        return 0;
    b.wait = cmds[0].wait_replicas > 0;
    b.deadline = deadline_ms + (b.wait ? cmds[0].wait_timeout_ms : 0);
    b.cl = calloc((size_t)m, sizeof *b.cl);
    calls = malloc((size_t)m * sizeof *calls);
    if (b.cl == NULL || calls == NULL) {
        free(b.cl);
        free(calls);
        for (j = 0; j < m; j++) {
            res[j].status = DLOCK_ENOMEM;
            snprintf(res[j].err, sizeof res[j].err, "out of memory");
        }
        return 0;
    }
    for (j = 0; j < m; j++)
        b.cl[j].full = cmds[j].eval;
    for (;;) {
        int todo = 0;
        for (j = 0; j < m; j++)
            todo += b.cl[j].state == C_TODO;
        if (todo == 0 || backoff(&b, &tries) < 0)
            break;
        pass(&b, calls);
    }
    for (j = 0; j < m; j++) {
        if (b.cl[j].state == C_TODO && res[j].err[0] == '\0') {
            res[j].status = DLOCK_ETIMEDOUT; /* never sent: no time left */
            snprintf(res[j].err, sizeof res[j].err,
                     "%s: no time left to send it", dlock__node_name(ns->node));
        }
        if (res[j].status != DLOCK_OK && res[j].reply != NULL) {
            freeReplyObject(res[j].reply);
            res[j].reply = NULL;
        }
        if ((res[j].status == DLOCK_EIO || res[j].status == DLOCK_ETIMEDOUT) &&
            b.cl[j].refused[0] != '\0') {
            /* The cluster kept refusing until time ran out: say so. */
            res[j].status = DLOCK_ESERVER;
            snprintf(res[j].err, sizeof res[j].err, "%s", b.cl[j].refused);
        }
        nok += res[j].status == DLOCK_OK;
    }
    free(b.cl);
    free(calls);
    return nok;
}
