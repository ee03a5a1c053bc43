/*
 * test_engine.c - unit tests of the engine (src/engine/call.c through
 * dlock__exec and dlock__cluster_exec_many) against scripted replies: a
 * tiny RESP server runs in a thread of the test on loopback ports and
 * answers each script call as the test says (NOSCRIPT, MOVED, ASK, a
 * short WAIT, silence), so the protocol's edge cases can be produced on
 * demand. What the scripts do is tested against real servers in
 * tests/integration/.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/call.h"
#include "engine/cluster_batch.h"
#include "engine/lanes.h"
#include "hold/core.h"
#include "base/slot.h"
#include "engine/step.h"

/* How a scripted server answers a script call (EVALSHA / EVAL). */
enum {
    A_OK,       /* :1 */
    A_NOSCRIPT, /* EVALSHA: NOSCRIPT; EVAL: :1 */
    A_MOVED,    /* MOVED to server 1 */
    A_ASK,      /* ASK to server 1 */
    A_NEEDASK,  /* :2 after ASKING on the connection, else MOVED to 0 */
    A_SILENT,   /* nothing, ever */
    A_ERR,      /* an error reply (ERR boom) */
    A_MUTE      /* nothing to anything, INFO on a new connection too */
};

#define NSRV 3
#define NCONN 16

typedef struct peer {
    int fd;
    char *buf;
    size_t len, cap;
    int asking; /* ASKING came before the next command */
} peer;

typedef struct srv {
    int lfd, port;
    int mode;     /* A_* */
    int wait_ack; /* WAIT's answer */
    peer conn[NCONN];
    /* Counted commands. */
    int evalsha, eval, wait, asking, accepts;
} srv;

static srv srvs[NSRV];
static int cluster_owner; /* the server CLUSTER SLOTS names */
static pthread_t thr;
static int stop_pipe[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* Send all of s (the client reads fast: loopback, small replies). */
static void say(int fd, const char *s)
{
    size_t n = strlen(s), off = 0;
    while (off < n) {
        ssize_t w = write(fd, s + off, n - off);
        if (w <= 0 && errno != EINTR)
            return;
        off += w > 0 ? (size_t)w : 0;
    }
}

/* One complete command at the head of p's buffer: its argc and argv
 * (pointers into the buffer, NUL-terminated in place). Returns the bytes
 * it took, 0 when incomplete. */
static size_t parse(peer *p, int *argc, char **argv, int max)
{
    char *s = p->buf, *end = p->buf + p->len, *nl;
    int n, i;
    if (p->len == 0 || s[0] != '*' || (nl = memchr(s, '\n', p->len)) == NULL)
        return 0;
    n = atoi(s + 1);
    s = nl + 1;
    for (i = 0; i < n; i++) {
        long l;
        if (s >= end || (nl = memchr(s, '\n', (size_t)(end - s))) == NULL)
            return 0;
        l = atol(s + 1);
        s = nl + 1;
        if (end - s < l + 2)
            return 0;
        if (i < max)
            argv[i] = s;
        s[l] = '\0';
        s += l + 2;
    }
    *argc = n < max ? n : max;
    return (size_t)(s - p->buf);
}

/* The answer of server v to a script call on key (its slot named in a
 * redirection) into out, "" for none. */
static void answer_script(srv *v, peer *p, int full, const char *key, char *out,
                          size_t len)
{
    int slot = dlock__key_slot(key, strlen(key));
    switch (v->mode) {
    case A_NOSCRIPT:
        snprintf(out, len, "%s",
                 full ? ":1\r\n" : "-NOSCRIPT No matching script.\r\n");
        break;
    case A_MOVED:
        cluster_owner = 1; /* the map says so from now on */
        /* fall through */
    case A_ASK:
        snprintf(out, len, "-%s %d 127.0.0.1:%d\r\n",
                 v->mode == A_MOVED ? "MOVED" : "ASK", slot, srvs[1].port);
        break;
    case A_NEEDASK:
        if (p->asking)
            snprintf(out, len, ":2\r\n");
        else
            snprintf(out, len, "-MOVED %d 127.0.0.1:%d\r\n", slot,
                     srvs[cluster_owner = 0].port);
        break;
    case A_SILENT:
        out[0] = '\0';
        break;
    case A_ERR:
        snprintf(out, len, "-ERR boom\r\n");
        break;
    default:
        snprintf(out, len, ":1\r\n");
    }
}

/* Answer one command of argv on peer p of server v. */
static void answer(srv *v, peer *p, int argc, char **argv)
{
    char out[512];
    int k = (int)(v - srvs), asking = p->asking;
    p->asking = 0;
    out[0] = '\0';
    if (v->mode == A_MUTE) {
        return;
    } else if (strcasecmp(argv[0], "INFO") == 0) {
        char body[200];
        snprintf(body, sizeof body,
                 "# Server\r\nrun_id:%040d\r\nredis_version:7.2.0\r\n"
                 "# Replication\r\nrole:master\r\n",
                 k + 1);
        snprintf(out, sizeof out, "$%zu\r\n%s\r\n", strlen(body), body);
    } else if (strcasecmp(argv[0], "CLUSTER") == 0 && argc > 1 &&
               strcasecmp(argv[1], "SLOTS") == 0) {
        char port[16];
        snprintf(port, sizeof port, "%d", srvs[cluster_owner].port);
        snprintf(out, sizeof out,
                 "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%s\r\n"
                 "$40\r\n%040d\r\n",
                 port, cluster_owner + 1);
    } else if (strcasecmp(argv[0], "CLUSTER") == 0) {
        snprintf(out, sizeof out, "-ERR unknown subcommand\r\n");
    } else if (strcasecmp(argv[0], "ASKING") == 0) {
        v->asking++;
        p->asking = 1;
        snprintf(out, sizeof out, "+OK\r\n");
    } else if (strcasecmp(argv[0], "EVALSHA") == 0 ||
               strcasecmp(argv[0], "EVAL") == 0) {
        int full = strcasecmp(argv[0], "EVAL") == 0;
        p->asking = asking;
        v->evalsha += !full;
        v->eval += full;
        answer_script(v, p, full, argc > 3 ? argv[3] : "", out, sizeof out);
        p->asking = 0;
    } else if (strcasecmp(argv[0], "WAIT") == 0) {
        v->wait++;
        if (v->mode != A_SILENT)
            snprintf(out, sizeof out, ":%d\r\n", v->wait_ack);
    } else {
        snprintf(out, sizeof out, "+OK\r\n");
    }
    if (out[0] != '\0')
        say(p->fd, out);
}

/* Read what peer p sent and answer every complete command. */
static void serve(srv *v, peer *p)
{
    char *argv[64];
    int argc;
    size_t used;
    ssize_t r;
    if (p->cap - p->len < 4096) {
        p->cap = p->cap * 2 + 65536;
        p->buf = realloc(p->buf, p->cap);
    }
    r = read(p->fd, p->buf + p->len, p->cap - p->len - 1);
    if (r <= 0) {
        close(p->fd);
        p->fd = -1;
        p->len = 0;
        return;
    }
    p->len += (size_t)r;
    pthread_mutex_lock(&mu);
    while ((used = parse(p, &argc, argv, 64)) > 0) {
        answer(v, p, argc, argv);
        memmove(p->buf, p->buf + used, p->len - used);
        p->len -= used;
    }
    pthread_mutex_unlock(&mu);
}

/* The servers' thread: accept and serve until the stop pipe is written. */
static void *run(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd pfd[1 + NSRV * (NCONN + 1)];
        srv *who[1 + NSRV * (NCONN + 1)];
        peer *pp[1 + NSRV * (NCONN + 1)];
        int n = 1, i, c;
        pfd[0] = (struct pollfd){.fd = stop_pipe[0], .events = POLLIN};
        for (i = 0; i < NSRV; i++) {
            pfd[n] = (struct pollfd){.fd = srvs[i].lfd, .events = POLLIN};
            who[n] = &srvs[i];
            pp[n++] = NULL;
            for (c = 0; c < NCONN; c++)
                if (srvs[i].conn[c].fd >= 0) {
                    pfd[n] = (struct pollfd){.fd = srvs[i].conn[c].fd,
                                             .events = POLLIN};
                    who[n] = &srvs[i];
                    pp[n++] = &srvs[i].conn[c];
                }
        }
        if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR)
            return NULL;
        if (pfd[0].revents)
            return NULL;
        for (i = 1; i < n; i++) {
            if (pfd[i].revents == 0)
                continue;
            if (pp[i] != NULL) {
                serve(who[i], pp[i]);
                continue;
            }
            int fd = accept(who[i]->lfd, NULL, NULL);
            pthread_mutex_lock(&mu);
            who[i]->accepts += fd >= 0;
            pthread_mutex_unlock(&mu);
            for (c = 0; fd >= 0 && c < NCONN; c++)
                if (who[i]->conn[c].fd < 0) {
                    who[i]->conn[c].fd = fd;
                    who[i]->conn[c].len = 0;
                    who[i]->conn[c].asking = 0;
                    break;
                }
            if (fd >= 0 && c == NCONN)
                close(fd);
        }
    }
}

/* Start the servers (all answering A_OK). */
static int setup(void **state)
{
    int i, c;
    (void)state;
    memset(srvs, 0, sizeof srvs);
    cluster_owner = 0;
    for (i = 0; i < NSRV; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        srvs[i].lfd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(srvs[i].lfd >= 0);
        assert_int_equal(bind(srvs[i].lfd, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(listen(srvs[i].lfd, 16), 0);
        getsockname(srvs[i].lfd, (struct sockaddr *)&a, &al);
        srvs[i].port = ntohs(a.sin_port);
        for (c = 0; c < NCONN; c++)
            srvs[i].conn[c].fd = -1;
    }
    assert_int_equal(pipe(stop_pipe), 0);
    assert_int_equal(pthread_create(&thr, NULL, run, NULL), 0);
    return 0;
}

/* Stop the servers and close everything. */
static int teardown(void **state)
{
    int i, c;
    (void)state;
    say(stop_pipe[1], "x");
    pthread_join(thr, NULL);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
    for (i = 0; i < NSRV; i++) {
        close(srvs[i].lfd);
        for (c = 0; c < NCONN; c++) {
            if (srvs[i].conn[c].fd >= 0)
                close(srvs[i].conn[c].fd);
            free(srvs[i].conn[c].buf);
        }
    }
    return 0;
}

/* A client of servers 0..n-1 (cluster: a cluster client seeded by 0). */
static dlock_client *client(int n, int cluster)
{
    char urls[NSRV][64];
    const char *u[NSRV];
    dlock_options o;
    dlock_client *c = NULL;
    char err[256] = "";
    int i;
    for (i = 0; i < n; i++) {
        snprintf(urls[i], sizeof urls[i], "%s://127.0.0.1:%d",
                 cluster ? "redis+cluster" : "redis", srvs[i].port);
        u[i] = urls[i];
    }
    dlock_options_init(&o);
    o.wait_strategy = DLOCK_WAIT_SPIN;
    o.command_timeout_ms = 2000;
    o.servers = u;
    o.nservers = (size_t)n;
    if (dlock_client_new(&c, &o, err, sizeof err) != DLOCK_OK)
        fail_msg("dlock_client_new: %s", err);
    return c;
}

/* Run one script call on key "k" (the fake servers run nothing) on the
 * nodes of mask of c, with WAIT for w replicas when w > 0, within ms.
 * Returns dlock__exec's count; res gets the outcomes. */
static int exec_k(dlock_client *c, uint64_t mask, int w, int64_t ms,
                  dlock__result *res)
{
    dlock__cmdbuf b;
    dlock__cmd_begin(&b, DLOCK__S_INSPECT);
    dlock__cmd_key(&b, "k", 1);
    dlock__cmd_arg_i64(&b, 42);
    b.cmd.wait_replicas = w;
    b.cmd.wait_timeout_ms = 100;
    return dlock__exec(&c->ns, c->scripts, mask, &b.cmd, dlock__now_ms() + ms,
                       res);
}

/* Run three such calls at once on a cluster client seeded by server 0
 * (each with WAIT for w replicas) and check that each succeeded with
 * acks. */
static void batch_k(int w, long long acks, dlock__result *res)
{
    dlock_client *c = client(1, 1);
    dlock__cmdbuf b[3];
    dlock__cmd cmds[3];
    int j;
    for (j = 0; j < 3; j++) {
        dlock__cmd_begin(&b[j], DLOCK__S_INSPECT);
        dlock__cmd_key(&b[j], "k", 1);
        b[j].cmd.wait_replicas = w;
        b[j].cmd.wait_timeout_ms = 100;
        cmds[j] = b[j].cmd;
    }
    assert_int_equal(dlock__cluster_exec_many(&c->ns, c->scripts, cmds, 3,
                                              dlock__now_ms() + 2000, res),
                     3);
    for (j = 0; j < 3; j++) {
        assert_int_equal(res[j].status, DLOCK_OK);
        assert_int_equal(res[j].acks, acks);
    }
    dlock__results_clear(res, 3);
    dlock_client_free(c);
}

/* Counted commands of a server, read under the servers' lock. */
static int count(const int *field)
{
    int v;
    pthread_mutex_lock(&mu);
    v = *field;
    pthread_mutex_unlock(&mu);
    return v;
}

/* NOSCRIPT: the source is sent once, on the same connection, and its
 * answer is the result. */
static void test_noscript(void **state)
{
    dlock_client *c = client(1, 0);
    dlock__result res[1];
    (void)state;
    srvs[0].mode = A_NOSCRIPT;
    assert_int_equal(exec_k(c, 1, 0, 2000, res), 1);
    assert_int_equal(res[0].reply->integer, 1);
    assert_int_equal(count(&srvs[0].evalsha), 1);
    assert_int_equal(count(&srvs[0].eval), 1);
    dlock__results_clear(res, 1);
    dlock_client_free(c);
}

/* WAIT short (fewer replicas than asked) after a NOSCRIPT: the acks are
 * those of the WAIT that followed the source, not the first one's. */
static void test_wait_short_after_noscript(void **state)
{
    dlock_client *c = client(1, 0);
    dlock__result res[1];
    (void)state;
    srvs[0].mode = A_NOSCRIPT;
    srvs[0].wait_ack = 1;
    assert_int_equal(exec_k(c, 1, 2, 2000, res), 1);
    assert_int_equal(res[0].reply->integer, 1);
    assert_int_equal(res[0].acks, 1);
    assert_int_equal(count(&srvs[0].wait), 2);
    dlock__results_clear(res, 1);
    dlock_client_free(c);
}

/* A node that never answers the call (silent: sent, then no answer in
 * time), and one that accepts the connection but never answers anything,
 * not even the INFO of a new connection (mute: still connecting at the
 * deadline, nothing sent): the others are asked and answer meanwhile, and
 * the step ends by its deadline. */
static void test_unanswering_node(void **state)
{
    static const int mode[2] = {A_SILENT, A_MUTE};
    static const char *const why[2] = {"no answer in time", "connecting"};
    int t;
    (void)state;
    for (t = 0; t < 2; t++) {
        dlock_client *c = client(3, 0);
        dlock__result res[3];
        srvs[2 - t].mode = mode[t];
        assert_int_equal(exec_k(c, 7, 0, 300, res), 2);
        assert_int_equal(res[0].status, DLOCK_OK);
        assert_int_equal(res[2 - t].status, DLOCK_ETIMEDOUT);
        assert_non_null(strstr(res[2 - t].err, why[t]));
        assert_int_equal(res[2 - t].sent, t == 0);
        srvs[2 - t].mode = A_OK;
        dlock__results_clear(res, 3);
        dlock_client_free(c);
    }
}

/* A call that pins (pin_out: an acquire) and gets no answer by its
 * deadline leaves its connection in pins, with one server too, so that
 * the hold's give-back goes behind it on that connection (a pooled one
 * could be read first; F6 in docs/reliability.md). Before, only a
 * Redlock's early return pinned. A call that does not pin leaves pins
 * alone. */
static void test_unanswered_pinned(void **state)
{
    dlock_client *c = client(1, 0);
    dlock__conn *pins[1] = {NULL};
    dlock__result res[1];
    dlock__cmdbuf b;
    int pin;
    (void)state;
    srvs[0].mode = A_SILENT;
    for (pin = 0; pin < 2; pin++) {
        dlock__cmd_begin(&b, DLOCK__S_INSPECT);
        dlock__cmd_key(&b, "k", 1);
        b.cmd.pins = pins;
        b.cmd.pin_out = pin;
        assert_int_equal(dlock__exec(&c->ns, c->scripts, 1, &b.cmd,
                                     dlock__now_ms() + 200, res),
                         0);
        assert_int_equal(res[0].status, DLOCK_ETIMEDOUT);
        if (pin)
            assert_non_null(pins[0]);
        else
            assert_null(pins[0]);
        dlock__results_clear(res, 1);
    }
    dlock__node_put(&c->ns, 0, pins[0], 0); /* closed: its answer never comes */
    srvs[0].mode = A_OK;
    dlock_client_free(c);
}

/* MOVED: the call goes to the node named and its answer is the result;
 * ASK: ASKING, then the call, on the node named (which refuses it
 * without ASKING); a MOVED loop ends after MAX_HOPS redirections with the
 * last one as the error. */
static void test_redirects(void **state)
{
    static const int mode0[3] = {A_MOVED, A_ASK, A_MOVED};
    static const int mode1[3] = {A_OK, A_NEEDASK, A_NEEDASK};
    static const int want[3] = {1, 2, 0};
    int t;
    (void)state;
    for (t = 0; t < 3; t++) {
        dlock_client *c = client(1, 1);
        dlock__result res[1];
        pthread_mutex_lock(&mu);
        srvs[0].mode = mode0[t];
        srvs[1].mode = mode1[t]; /* A_NEEDASK: MOVED back to 0 */
        srvs[0].evalsha = srvs[1].evalsha = srvs[1].asking = 0;
        cluster_owner = 0;
        pthread_mutex_unlock(&mu);
        assert_int_equal(exec_k(c, 1, 0, 2000, res), want[t] != 0);
        if (want[t] != 0)
            assert_int_equal(res[0].reply->integer, want[t]);
        if (t == 0)
            assert_int_equal(count(&srvs[0].evalsha), 1);
        if (t == 1)
            assert_int_equal(count(&srvs[1].asking), 1);
        if (t == 2) {
            assert_int_equal(res[0].status, DLOCK_ESERVER);
            assert_non_null(strstr(res[0].err, "MOVED"));
            assert_int_equal(count(&srvs[0].evalsha) + count(&srvs[1].evalsha),
                             6);
        }
        dlock__results_clear(res, 1);
        dlock_client_free(c);
    }
}

/* A cluster batch: the calls of one master share one connection behind
 * one WAIT, and each call gets that WAIT's acks. */
static void test_batch_one_wait(void **state)
{
    dlock__result res[3];
    (void)state;
    srvs[0].wait_ack = 1;
    batch_k(1, 1, res);
    assert_int_equal(count(&srvs[0].evalsha), 3);
    assert_int_equal(count(&srvs[0].wait), 1);
}

/* A cluster batch whose master lost its scripts: every call is sent again
 * with its source, and each gets the acks of a WAIT that followed it. */
static void test_batch_noscript(void **state)
{
    dlock__result res[3];
    (void)state;
    srvs[0].mode = A_NOSCRIPT;
    srvs[0].wait_ack = 1;
    batch_k(2, 1, res);
    assert_int_equal(count(&srvs[0].evalsha), 3);
    assert_int_equal(count(&srvs[0].eval), 3);
}

/* An error reply to a lock write with WAIT: the call ends with the
 * server's error, and WAIT's answer is still read, so the connection goes
 * back to the pool (the next call needs no new one). */
static void test_error_then_wait(void **state)
{
    dlock_client *c = client(1, 0);
    dlock__result res[1];
    int i;
    (void)state;
    srvs[0].mode = A_ERR;
    for (i = 0; i < 2; i++) {
        assert_int_equal(exec_k(c, 1, 1, 2000, res), 0);
        assert_int_equal(res[0].status, DLOCK_ESERVER);
        assert_non_null(strstr(res[0].err, "ERR boom"));
        dlock__results_clear(res, 1);
    }
    assert_int_equal(count(&srvs[0].wait), 2);
    assert_int_equal(count(&srvs[0].accepts), 1);
    dlock_client_free(c);
}

/* Drive calls ks[0..n) started on set s until all are done: the set's
 * descriptors and each call's (its opens), then the set, then the
 * calls. */
static void drive_set(dlock__lanes *s, dlock__call **ks, int n)
{
    int64_t end = dlock__now_ms() + 5000;
    for (;;) {
        struct pollfd pfd[16];
        int64_t wake;
        int i, np, ns, left = 0, at[4], cnt[4];
        np = ns = dlock__lanes_pollfds(s, pfd, 8);
        for (i = 0; i < n; i++) {
            at[i] = np;
            cnt[i] = dlock__call_pollfds(ks[i], pfd + np, 2, &wake);
            np += cnt[i];
        }
        poll(pfd, (nfds_t)np, 10);
        dlock__lanes_process(s, pfd, ns);
        for (i = 0; i < n; i++)
            left += !dlock__call_process(ks[i], pfd + at[i], cnt[i]);
        if (left == 0)
            return;
        assert_true(dlock__now_ms() < end);
    }
}

/* Three calls on one lane set, the scripts not cached there (NOSCRIPT
 * to each EVALSHA, even after an EVAL: this server keeps nothing): one
 * connection carries them all, pipelined; the first NOSCRIPT is answered
 * by its call's source, the two after it go again by SHA behind that
 * source (the pipe's one rule), then, answered NOSCRIPT once more, each
 * with its source: each call its own answer; a call after them reuses
 * the connection. */
static void test_set_shared(void **state)
{
    dlock_client *c = client(1, 0);
    dlock__lanes *s;
    dlock__lanes_ctx prev;
    dlock__call *ks[3];
    dlock__result res[3][1];
    dlock__cmdbuf b[3];
    int i;
    (void)state;
    srvs[0].mode = A_NOSCRIPT;
    assert_int_equal(dlock__lanes_new(&s, &c->ns), DLOCK_OK);
    prev = dlock__lanes_enter(s, NULL);
    for (i = 0; i < 3; i++) {
        dlock__cmd_begin(&b[i], DLOCK__S_INSPECT);
        dlock__cmd_key(&b[i], "k", 1);
        dlock__cmd_arg_i64(&b[i], 42);
        assert_int_equal(dlock__call_start(&ks[i], &c->ns, c->scripts,
                                           &b[i].cmd, 1, 1,
                                           dlock__now_ms() + 2000, res[i]),
                         DLOCK_OK);
    }
    drive_set(s, ks, 3);
    for (i = 0; i < 3; i++) {
        assert_int_equal(res[i][0].status, DLOCK_OK);
        assert_int_equal(res[i][0].reply->integer, 1);
        dlock__call_free(ks[i]);
        dlock__results_clear(res[i], 1);
    }
    assert_int_equal(count(&srvs[0].accepts), 1);
    assert_int_equal(count(&srvs[0].evalsha), 3 + 2);
    assert_int_equal(count(&srvs[0].eval), 3);
    assert_int_equal(dlock__lanes_open(s), 1);
    srvs[0].mode = A_OK;
    assert_int_equal(dlock__call_start(&ks[0], &c->ns, c->scripts, &b[0].cmd, 1,
                                       1, dlock__now_ms() + 2000, res[0]),
                     DLOCK_OK);
    drive_set(s, ks, 1);
    assert_int_equal(res[0][0].status, DLOCK_OK);
    dlock__call_free(ks[0]);
    dlock__results_clear(res[0], 1);
    assert_int_equal(count(&srvs[0].accepts), 1);
    dlock__lanes_leave(prev);
    dlock__lanes_free(s);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_short_after_noscript, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unanswering_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unanswered_pinned, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_redirects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_one_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_then_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_shared, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
