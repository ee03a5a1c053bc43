/*
 * net.c - opening a connection: name lookup bounded by the connect
 * deadline, a non-blocking connect over TCP (every address in turn) or a
 * unix socket, TLS when the endpoint asks for it (tls.c), then AUTH and
 * SELECT. Every socket is non-blocking and CLOEXEC from birth; every step
 * is bounded by one monotonic deadline.
 *
 * Layer: the top of the transport (conn.c below it, tls.c beside it);
 * node.c calls dlock__conn_open(). The open is a machine of steps
 * (dlock__opening: connect, TLS, the login's replies) that
 * dlock__conn_open waits for one by one, and that the engine drives
 * without blocking beside its other connections.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "io/conn_io.h"
#include "base/errors.h"
#include "io/net.h"
#include "io/tls.h"

/* ---- connecting -------------------------------------------------------- */

/* The outcome of a non-blocking connect on fd that poll() said is done:
 * 0, or a DLOCK code with the message in err (naming what and disp). */
static int connect_result(int fd, const char *disp, const char *what, char *err,
                          size_t errlen)
{
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        soerr = errno;
    if (soerr != 0)
        return dlock__fail(err, errlen, DLOCK_EIO, "connect %s%s: %s", disp,
                           what, strerror(soerr));
    return DLOCK_OK;
}

/*
 * Finish a non-blocking connect on fd before the deadline. Returns 0, or
 * a DLOCK code with the message in err (which names what and disp).
 */
static int connect_wait(int fd, const char *disp, const char *what,
                        int64_t deadline_ms, char *err, size_t errlen)
{
    short rev = 0;
    if (!dlock__wait_fd(fd, POLLOUT, deadline_ms, &rev))
        return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                           "connect %s%s: timed out", disp, what);
    return connect_result(fd, disp, what, err, errlen);
}

/* Connect to the unix socket ep->path. Returns the fd, or -1 with the
 * code in *code and a message in err. */
static int open_unix(const dlock__endpoint *ep, int64_t deadline_ms, int *code,
                     char *err, size_t errlen)
{
    struct sockaddr_un sa;
    size_t plen = ep->path != NULL ? strlen(ep->path) : 0;
    int fd;

    if (plen == 0 || plen >= sizeof sa.sun_path) {
        *code = dlock__fail(err, errlen, DLOCK_EIO,
                            "connect %s: bad unix socket path",
                            ep->display != NULL ? ep->display : "");
        return -1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, ep->path, plen + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        *code = dlock__fail(err, errlen,
                            errno == ENOMEM || errno == ENOBUFS ? DLOCK_ENOMEM
                                                                : DLOCK_EIO,
                            "socket for %s: %s", ep->path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        if (errno == EINTR)
            continue;
        if (errno == EINPROGRESS) {
            *code = connect_wait(fd, ep->path, "", deadline_ms, err, errlen);
            if (*code == DLOCK_OK)
                return fd;
            break;
        }
        /* A unix listener with a full backlog says EAGAIN at once rather
         * than letting us wait: retry briefly until the deadline. */
        if (errno == EAGAIN && dlock__now_ms() < deadline_ms) {
            poll(NULL, 0, 1);
            continue;
        }
        *code = dlock__fail(err, errlen,
                            errno == EAGAIN ? DLOCK_ETIMEDOUT : DLOCK_EIO,
                            "connect %s: %s", ep->path, strerror(errno));
        break;
    }
    close(fd);
    return -1;
}

/* The resolver; a unit test replaces it with a slow one. */
dlock__resolve_fn dlock__resolver = getaddrinfo;

/* One name lookup, shared by the caller and the thread doing it; the last
 * of the two to let go frees it. */
typedef struct lookup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, done, rc, err_no;
    struct addrinfo hints, *res;
    char port[16];
    char host[];
} lookup;

static void lookup_unref(lookup *lk)
{
    int last;
    pthread_mutex_lock(&lk->mu);
    last = --lk->refs == 0;
    pthread_mutex_unlock(&lk->mu);
    if (!last)
        return;
    if (lk->res != NULL)
        freeaddrinfo(lk->res);
    pthread_cond_destroy(&lk->cv);
    pthread_mutex_destroy(&lk->mu);
    free(lk);
}

static void *lookup_main(void *arg)
{
    lookup *lk = arg;
    struct addrinfo *res = NULL;
    int rc = dlock__resolver(lk->host, lk->port, &lk->hints, &res);
    int e = errno;
    pthread_mutex_lock(&lk->mu);
    lk->rc = rc;
    lk->err_no = e;
    lk->res = res;
    lk->done = 1;
    pthread_cond_signal(&lk->cv);
    pthread_mutex_unlock(&lk->mu);
    lookup_unref(lk);
    return NULL;
}

/*
 * getaddrinfo() bounded by deadline_ms: getaddrinfo has no timeout (a DNS
 * server that does not answer holds it for the resolver's own timeouts,
 * 5 s or more per try), so a name that is not an IP literal is looked up
 * on a short-lived detached thread while the caller waits at most until
 * the deadline. Past it, the caller gets EAI_AGAIN with *timed_out set,
 * and the thread frees the lookup when it finishes. IP literals resolve
 * at once, here.
 */
static int resolve(const char *host, const char *port,
                   const struct addrinfo *hints, struct addrinfo **res,
                   int64_t deadline_ms, int *timed_out)
{
    size_t hl = strlen(host);
    lookup *lk;
    pthread_t t;
    pthread_attr_t attr;
    int rc, started;

    *timed_out = 0;
    *res = NULL;
    if (dlock__is_ip_literal(host) ||
        (lk = calloc(1, sizeof *lk + hl + 1)) == NULL)
        return dlock__resolver(host, port, hints, res);
    pthread_mutex_init(&lk->mu, NULL);
    dlock__cond_init(&lk->cv);
    lk->refs = 2;
    lk->hints = *hints;
    snprintf(lk->port, sizeof lk->port, "%s", port);
    memcpy(lk->host, host, hl + 1);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&t, &attr, lookup_main, lk) == 0;
    pthread_attr_destroy(&attr);
    if (!started) {
        lk->refs = 1;
        lookup_unref(lk);
        return dlock__resolver(host, port, hints, res);
    }
    dlock__nb_blocking();
    pthread_mutex_lock(&lk->mu);
    while (!lk->done &&
           dlock__cond_wait_until(&lk->cv, &lk->mu, deadline_ms) == 0)
        ;
    if (lk->done) {
        rc = lk->rc;
        errno = lk->err_no;
        *res = lk->res;
        lk->res = NULL; /* ours now */
    } else {
        rc = EAI_AGAIN;
        *timed_out = 1;
    }
    pthread_mutex_unlock(&lk->mu);
    lookup_unref(lk);
    return rc;
}

/*
 * Copy the server's text (len bytes at s) into dst (dstlen bytes) with
 * every occurrence of secret replaced by "***", and no prefix of it left
 * at the end (where the copy or the server cut it short): a server that
 * echoes its arguments in an error must not put the password into our
 * messages.
 */
static void scrub_copy(char *dst, size_t dstlen, const char *s, size_t len,
                       const char *secret)
{
    size_t slen = secret != NULL ? strlen(secret) : 0;
    size_t i = 0, j = 0, k;
    while (i < len && j + 1 < dstlen) {
        if (slen > 0 && len - i >= slen && memcmp(s + i, secret, slen) == 0) {
            for (k = 0; k < 3 && j + 1 < dstlen; k++)
                dst[j++] = '*';
            i += slen;
        } else {
            dst[j++] = s[i++];
        }
    }
    dst[j] = '\0';
    if (slen > 1) {
        /* Cut short here, or by the server: drop a tail that could be the
         * password's start. */
        for (k = slen - 1; k > 0; k--) {
            if (k <= j && memcmp(dst + j - k, secret, k) == 0) {
                dst[j - k] = '\0';
                break;
            }
        }
    }
}

/* The status for SELECT's error reply: a database the server does not
 * have (the URL's /DB out of range) or SELECT refused (cluster mode, an
 * ACL) is a configuration no retry cures, DLOCK_EREFUSED; a server not
 * ready yet (LOADING, BUSY, MASTERDOWN) may answer later,
 * DLOCK_ESERVER. */
static int select_error_code(const char *msg, size_t len)
{
    static const char *const later[] = {"LOADING", "BUSY", "MASTERDOWN",
                                        "TRYAGAIN"};
    size_t i;
    for (i = 0; i < sizeof later / sizeof later[0]; i++)
        if (len >= strlen(later[i]) &&
            memcmp(msg, later[i], strlen(later[i])) == 0)
            return DLOCK_ESERVER;
    return dlock__server_error_code(msg, len) == DLOCK_EAUTH ? DLOCK_EAUTH
                                                             : DLOCK_EREFUSED;
}

/* ---- opening in steps ---------------------------------------------------- */

enum { O_CONNECT, O_TLS, O_LOGIN };

/* One connection being opened (see net.h). */
struct dlock__opening {
    const dlock__endpoint *ep;
    dlock__tls_ctx *tls;
    dlock__conn *c;
    int phase;
    int64_t deadline_ms;
    short want;                      /* O_TLS: what the handshake waits for */
    struct addrinfo *res, *ai;       /* TCP: the addresses, the one tried */
    int literal;                     /* ep->host is an IP address */
    char what[INET6_ADDRSTRLEN + 8]; /* " (address)" after a name */
    int nlogin, iauth, isel, got;    /* AUTH / SELECT and their replies */
    redisReply *rep[2];
};

/* Queue AUTH [user] password and SELECT db as configured (answered
 * first). DLOCK_OK or DLOCK_ENOMEM. */
static int login_queue(dlock__opening *o, char *err, size_t errlen)
{
    const dlock__endpoint *ep = o->ep;
    const char *argv[3];
    size_t lens[3];
    char dbuf[16];
    int argc = 0;
    o->iauth = o->isel = -1;
    if (ep->password != NULL) {
        argv[argc] = "AUTH";
        lens[argc++] = 4;
        if (ep->user != NULL) {
            argv[argc] = ep->user;
            lens[argc++] = strlen(ep->user);
        }
        argv[argc] = ep->password;
        lens[argc++] = strlen(ep->password);
        if (dlock__conn_append_argv(o->c, argc, argv, lens) != DLOCK_OK)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        o->iauth = o->nlogin++;
    }
    if (ep->db != 0) {
        snprintf(dbuf, sizeof dbuf, "%d", ep->db);
        argv[0] = "SELECT";
        lens[0] = 6;
        argv[1] = dbuf;
        lens[1] = strlen(dbuf);
        if (dlock__conn_append_argv(o->c, 2, argv, lens) != DLOCK_OK)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        o->isel = o->nlogin++;
    }
    return DLOCK_OK;
}

/* AUTH must have said OK (else DLOCK_EAUTH with the server's words),
 * SELECT too (else select_error_code's status). */
static int login_check(dlock__opening *o, char *err, size_t errlen)
{
    dlock__conn *c = o->c;
    int i, r = DLOCK_OK;
    for (i = 0; i < o->nlogin && r == DLOCK_OK; i++) {
        redisReply *x = o->rep[i];
        char text[161];
        if (x->type == REDIS_REPLY_STATUS && x->len == 2 &&
            memcmp(x->str, "OK", 2) == 0)
            continue;
        if (x->type == REDIS_REPLY_ERROR)
            scrub_copy(text, sizeof text, x->str, x->len, o->ep->password);
        if (x->type == REDIS_REPLY_ERROR && i == o->iauth)
            r = dlock__fail(err, errlen, DLOCK_EAUTH, "AUTH to %s: %s", c->peer,
                            text);
        else if (x->type == REDIS_REPLY_ERROR && i == o->isel)
            r = dlock__fail(err, errlen, select_error_code(x->str, x->len),
                            "SELECT %d on %s: %s", o->ep->db, c->peer, text);
        else
            r = dlock__fail(err, errlen, DLOCK_EPROTO,
                            "protocol error from %s: unexpected reply to %s",
                            c->peer, i == o->iauth ? "AUTH" : "SELECT");
    }
    if (r == DLOCK_OK && c->dead)
        r = dlock__fail(err, errlen, DLOCK_EIO,
                        "connection closed by %s after logging in", c->peer);
    return r;
}

/* Take the login's replies that are complete; DLOCK_OK once all are in
 * and the output is written. */
static int login_replies(dlock__opening *o)
{
    redisReply *rep;
    while (o->got < o->nlogin &&
           dlock__conn_pop_reply(o->c, &rep, NULL, 0) == 1)
        o->rep[o->got++] = rep;
    return o->got == o->nlogin && dlock__conn_flushed(o->c) ? DLOCK_OK
                                                            : DLOCK__OPEN_AGAIN;
}

/* O_LOGIN with revents: write, read, and judge the login's replies. */
static int login_step(dlock__opening *o, short revents, char *err,
                      size_t errlen)
{
    char msg[DLOCK__ERRLEN];
    int r;
    if (o->nlogin == 0)
        return DLOCK_OK;
    if (login_replies(o) == DLOCK_OK)
        return login_check(o, err, errlen);
    if (revents == 0)
        return DLOCK__OPEN_AGAIN;
    r = dlock__conn_progress(o->c, revents, msg, sizeof msg);
    /* The peer may have answered and then closed: take what is complete
     * before reporting the failure. */
    if (login_replies(o) == DLOCK_OK)
        return login_check(o, err, errlen);
    if (r != DLOCK_OK)
        return dlock__fail(err, errlen, r, "%s", msg);
    return DLOCK__OPEN_AGAIN;
}

/* The connection is made: TCP options, then TLS or the login. */
static int connected(dlock__opening *o, char *err, size_t errlen)
{
    int one = 1, r;
    o->c->tcp = o->ep->kind != DLOCK__EP_UNIX;
    if (o->c->tcp) {
        /* Small commands must not wait for Nagle; keepalive finds a peer
         * that vanished while an idle pooled connection waited. */
        setsockopt(o->c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(o->c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    o->phase = O_LOGIN;
    if (o->ep->kind != DLOCK__EP_TLS)
        return login_step(o, 0, err, errlen);
    o->phase = O_TLS;
    r = dlock__tls_begin(o->c, o->tls, o->ep->host, err, errlen);
    return r == DLOCK_OK ? dlock__opening_step(o, 0, err, errlen) : r;
}

/* Connect over TCP to o->ai, else to the next addresses in turn, until
 * one connects or is in progress (DLOCK__OPEN_AGAIN, poll for POLLOUT),
 * or the deadline or the list ends (the last failure's code). */
static int tcp_try(dlock__opening *o, int64_t deadline_ms, int code, char *err,
                   size_t errlen)
{
    const dlock__endpoint *ep = o->ep;
    for (; o->ai != NULL; o->ai = o->ai->ai_next) {
        struct addrinfo *ai = o->ai;
        char addr[INET6_ADDRSTRLEN] = "";
        const void *a =
            ai->ai_family == AF_INET6
                ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        int fd, g;
        inet_ntop(ai->ai_family, a, addr, sizeof addr);
        o->what[0] = '\0';
        if (!o->literal)
            snprintf(o->what, sizeof o->what, " (%s)", addr);
        if (dlock__now_ms() >= deadline_ms)
            return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                               "connect %s%s: timed out", ep->display, o->what);
        fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            code = dlock__fail(err, errlen, DLOCK_EIO, "socket for %s: %s",
                               ep->display, strerror(errno));
            continue;
        }
        while ((g = connect(fd, ai->ai_addr, ai->ai_addrlen)) != 0 &&
               errno == EINTR)
            ;
        o->c->fd = fd;
        if (g == 0)
            return connected(o, err, errlen);
        if (errno == EINPROGRESS)
            return DLOCK__OPEN_AGAIN;
        code = dlock__fail(err, errlen, DLOCK_EIO, "connect %s%s: %s",
                           ep->display, o->what, strerror(errno));
        close(fd);
        o->c->fd = -1;
    }
    return code;
}

/* Look ep->host up (bounded by the deadline) and start connecting. */
static int tcp_start(dlock__opening *o, int64_t deadline_ms, char *err,
                     size_t errlen)
{
    const dlock__endpoint *ep = o->ep;
    struct addrinfo hints;
    char port[16];
    int g, timed_out;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(port, sizeof port, "%d", ep->port);
    g = resolve(ep->host, port, &hints, &o->res, deadline_ms, &timed_out);
    if (timed_out)
        return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                           "resolve %s: no answer in time", ep->host);
    if (g != 0)
        return dlock__fail(err, errlen,
                           g == EAI_MEMORY ? DLOCK_ENOMEM : DLOCK_EIO,
                           "resolve %s: %s", ep->host,
                           g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
    o->literal = dlock__is_ip_literal(ep->host);
    o->ai = o->res;
    return tcp_try(o, deadline_ms,
                   dlock__fail(err, errlen, DLOCK_EIO, "connect %s: no address",
                               ep->display),
                   err, errlen);
}

/* See net.h. */
int dlock__opening_start(dlock__opening **out, const dlock__endpoint *ep,
                         dlock__tls_ctx *tls, int64_t deadline_ms, char *err,
                         size_t errlen)
{
    dlock__opening *o;
    int r = DLOCK_OK;
    *out = NULL;
    if (ep == NULL || (ep->kind == DLOCK__EP_TLS && tls == NULL) ||
        (ep->kind != DLOCK__EP_UNIX && ep->host == NULL))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "connect: no usable endpoint%s",
                           ep != NULL && ep->kind == DLOCK__EP_TLS
                               ? " (rediss:// without a TLS context)"
                               : "");
    o = calloc(1, sizeof *o);
    if (o == NULL ||
        (o->c = dlock__conn_new(ep->display != NULL ? ep->display
                                : ep->path != NULL  ? ep->path
                                                    : ep->host)) == NULL) {
        free(o);
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    *out = o;
    o->ep = ep;
    o->tls = tls;
    o->deadline_ms = deadline_ms;
    r = login_queue(o, err, errlen);
    if (r != DLOCK_OK)
        return r;
    if (ep->kind != DLOCK__EP_UNIX)
        return tcp_start(o, deadline_ms, err, errlen);
    /* A unix socket connects at once (or waits out a full backlog). */
    o->c->fd = open_unix(ep, deadline_ms, &r, err, errlen);
    return o->c->fd < 0 ? r : connected(o, err, errlen);
}

/* See net.h. */
void dlock__opening_poll(const dlock__opening *o, int *fd, short *events)
{
    *fd = o->c->fd;
    *events = o->phase == O_CONNECT ? POLLOUT
              : o->phase == O_TLS   ? o->want
                                    : dlock__conn_events(o->c);
}

/* See net.h. */
int dlock__opening_step(dlock__opening *o, short revents, char *err,
                        size_t errlen)
{
    int r;
    if (o->phase == O_CONNECT) {
        if (revents == 0)
            return DLOCK__OPEN_AGAIN;
        r = connect_result(o->c->fd, o->ep->display, o->what, err, errlen);
        if (r == DLOCK_OK)
            return connected(o, err, errlen);
        close(o->c->fd);
        o->c->fd = -1;
        o->ai = o->ai->ai_next;
        return tcp_try(o, o->deadline_ms, r, err, errlen);
    }
    if (o->phase == O_LOGIN)
        return login_step(o, revents, err, errlen);
    r = dlock__tls_step(o->c, &o->want, err, errlen);
    if (r == DLOCK__TLS_AGAIN)
        return DLOCK__OPEN_AGAIN;
    if (r != DLOCK_OK)
        return r;
    o->phase = O_LOGIN;
    return login_step(o, 0, err, errlen);
}

/* See net.h. */
int dlock__opening_timeout(dlock__opening *o, char *err, size_t errlen)
{
    if (o->phase == O_CONNECT)
        return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                           "connect %s%s: timed out", o->ep->display, o->what);
    if (o->phase == O_TLS)
        return dlock__tls_timeout(o->c, err, errlen);
    return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                       "%s did not answer in time", o->c->peer);
}

/* See net.h. */
dlock__conn *dlock__opening_conn(const dlock__opening *o)
{
    return o->c;
}

/* See net.h. */
dlock__conn *dlock__opening_take(dlock__opening *o)
{
    dlock__conn *c = o->c;
    o->c = NULL;
    return c;
}

/* See net.h. */
void dlock__opening_free(dlock__opening *o)
{
    int i;
    if (o == NULL)
        return;
    for (i = 0; i < o->got; i++)
        freeReplyObject(o->rep[i]);
    if (o->res != NULL)
        freeaddrinfo(o->res);
    dlock__conn_close(o->c);
    free(o);
}

/* Open a connection to ep; see net.h: the steps above, each waited for
 * here. Every failure closes what was opened and leaves *out NULL. */
int dlock__conn_open(dlock__conn **out, const dlock__endpoint *ep,
                     dlock__tls_ctx *tls, int64_t deadline_ms, char *err,
                     size_t errlen)
{
    dlock__opening *o;
    int r = dlock__opening_start(&o, ep, tls, deadline_ms, err, errlen);
    *out = NULL;
    while (r == DLOCK__OPEN_AGAIN) {
        int fd;
        short ev, rev = 0;
        dlock__opening_poll(o, &fd, &ev);
        if (!dlock__wait_fd(fd, ev, deadline_ms, &rev))
            r = dlock__opening_timeout(o, err, errlen);
        else
            r = dlock__opening_step(o, rev, err, errlen);
    }
    if (r == DLOCK_OK)
        *out = dlock__opening_take(o);
    dlock__opening_free(o);
    return r;
}
