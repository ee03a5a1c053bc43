/*
 * ask.c - one question to one server, as steps (see ask.h): the
 * connection opened (net.c's dlock__opening, the question queued behind
 * the login from the start) or given, then the reply collected
 * (dlock__conn_collect). What a locate asks the sentinels and a node's
 * check asks a candidate, without blocking the caller's thread.
 */
#include <poll.h>
#include <stdlib.h>

#include "io/ask.h"

struct dlock__asking {
    dlock__opening *net; /* connecting and logging in; NULL once done */
    dlock__conn *conn;   /* then: the reply awaited on it */
    redisReply *reply;
    int got;
    int64_t deadline;
};

/* The connection is there (opened, or given): the reply is next. */
static int collect(dlock__asking *a, short revents, char *err, size_t errlen)
{
    int r = dlock__conn_collect(a->conn, 1, &a->reply, &a->got, revents, err,
                                errlen);
    if (r == 1)
        return DLOCK_OK;
    return r == 0 ? DLOCK__OPEN_AGAIN : r;
}

/* The open is done: take its connection and write what was queued. */
static int net_done(dlock__asking *a, char *err, size_t errlen)
{
    a->conn = dlock__opening_take(a->net);
    dlock__opening_free(a->net);
    a->net = NULL;
    return collect(a, POLLOUT, err, errlen);
}

/* See ask.h. */
int dlock__asking_start(dlock__asking **out, const dlock__endpoint *ep,
                        dlock__tls_ctx *tls, dlock__conn *conn, int argc,
                        const char **argv, int64_t deadline_ms, char *err,
                        size_t errlen)
{
    dlock__asking *a = calloc(1, sizeof *a);
    int rc;
    *out = NULL;
    if (a == NULL) {
        dlock__conn_close(conn);
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    a->deadline = deadline_ms;
    a->conn = conn;
    if (conn == NULL)
        rc = dlock__opening_start(&a->net, ep, tls, deadline_ms, err, errlen);
    else
        rc = DLOCK_OK;
    if ((rc == DLOCK_OK || rc == DLOCK__OPEN_AGAIN) &&
        dlock__conn_append_argv(conn != NULL ? conn
                                             : dlock__opening_conn(a->net),
                                argc, argv, NULL) != DLOCK_OK)
        rc = dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (rc == DLOCK_OK)
        rc = a->net != NULL ? net_done(a, err, errlen)
                            : collect(a, POLLOUT, err, errlen);
    if (rc != DLOCK_OK && rc != DLOCK__OPEN_AGAIN) {
        dlock__asking_free(a);
        return rc;
    }
    *out = a;
    return rc;
}

/* See ask.h. */
void dlock__asking_poll(const dlock__asking *a, int *fd, short *events)
{
    if (a->net != NULL) {
        dlock__opening_poll(a->net, fd, events);
        return;
    }
    *fd = dlock__conn_fd(a->conn);
    *events = dlock__conn_events(a->conn);
}

/* See ask.h. */
int dlock__asking_step(dlock__asking *a, short revents, char *err,
                       size_t errlen)
{
    int rc;
    if (a->net == NULL)
        return collect(a, revents, err, errlen);
    rc = dlock__opening_step(a->net, revents, err, errlen);
    return rc == DLOCK_OK ? net_done(a, err, errlen) : rc;
}

/* See ask.h. */
int dlock__asking_timeout(dlock__asking *a, char *err, size_t errlen)
{
    if (a->net != NULL)
        return dlock__opening_timeout(a->net, err, errlen);
    return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                       "%s did not answer in time", dlock__conn_peer(a->conn));
}

/* See ask.h. */
int64_t dlock__asking_deadline(const dlock__asking *a)
{
    return a->deadline;
}

/* See ask.h. */
int dlock__asking_opened(const dlock__asking *a)
{
    return a->net == NULL;
}

/* See ask.h. */
redisReply *dlock__asking_reply(dlock__asking *a)
{
    redisReply *r = a->reply;
    a->reply = NULL;
    return r;
}

/* See ask.h. */
dlock__conn *dlock__asking_conn(dlock__asking *a)
{
    dlock__conn *c = a->conn;
    a->conn = NULL;
    return c;
}

/* See ask.h. */
void dlock__asking_free(dlock__asking *a)
{
    if (a == NULL)
        return;
    dlock__opening_free(a->net);
    dlock__conn_close(a->conn);
    if (a->reply != NULL)
        freeReplyObject(a->reply);
    free(a);
}

/* See ask.h. */
int dlock__asking_wait(dlock__asking *a, int rc, char *err, size_t errlen)
{
    while (rc == DLOCK__OPEN_AGAIN) {
        int fd;
        short ev;
        dlock__asking_poll(a, &fd, &ev);
        rc = dlock__asking_step(a, dlock__poll_until(fd, ev, a->deadline), err,
                                errlen);
        if (rc == DLOCK__OPEN_AGAIN && dlock__now_ms() >= a->deadline)
            rc = dlock__asking_timeout(a, err, errlen);
    }
    return rc;
}
