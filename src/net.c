/*
 * net.c - opening a connection: name lookup bounded by the connect
 * deadline, a non-blocking connect over TCP (every address in turn) or a
 * unix socket, TLS when the endpoint asks for it (tls.c), then AUTH and
 * SELECT. Every socket is non-blocking and CLOEXEC from birth; every step
 * is bounded by one monotonic deadline.
 *
 * Layer: the top of the transport (conn.c below it, tls.c beside it);
 * node.c calls dlock__conn_open().
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

#include "conn_io.h"
#include "errors.h"
#include "net.h"
#include "tls.h"

/* ---- connecting -------------------------------------------------------- */

/*
 * Finish a non-blocking connect on fd before the deadline. Returns 0, or
 * a DLOCK code with the message in err (which names what and disp).
 */
static int connect_wait(int fd, const char *disp, const char *what,
                        int64_t deadline_ms, char *err, size_t errlen)
{
    short rev = 0;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (!dlock__wait_fd(fd, POLLOUT, deadline_ms, &rev))
        return dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                           "connect %s%s: timed out", disp, what);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        soerr = errno;
    if (soerr != 0)
        return dlock__fail(err, errlen, DLOCK_EIO, "connect %s%s: %s", disp,
                           what, strerror(soerr));
    return DLOCK_OK;
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

/* Connect over TCP to each address ep->host resolves to, in turn, until
 * one answers or the deadline passes. Returns the fd or -1 (code in
 * *code, message in err: the last address's failure). */
static int open_tcp(const dlock__endpoint *ep, int64_t deadline_ms, int *code,
                    char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[16], what[INET6_ADDRSTRLEN + 8];
    int fd = -1, one = 1, g, literal, timed_out;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(port, sizeof port, "%d", ep->port);
    g = resolve(ep->host, port, &hints, &res, deadline_ms, &timed_out);
    if (timed_out) {
        *code = dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                            "resolve %s: no answer in time", ep->host);
        return -1;
    }
    if (g != 0) {
        *code =
            dlock__fail(err, errlen, g == EAI_MEMORY ? DLOCK_ENOMEM : DLOCK_EIO,
                        "resolve %s: %s", ep->host,
                        g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return -1;
    }
    literal = dlock__is_ip_literal(ep->host);
    if (res == NULL)
        *code = dlock__fail(err, errlen, DLOCK_EIO, "connect %s: no address",
                            ep->display);
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        char addr[INET6_ADDRSTRLEN] = "";
        const void *a =
            ai->ai_family == AF_INET6
                ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        inet_ntop(ai->ai_family, a, addr, sizeof addr);
        what[0] = '\0';
        if (!literal)
            snprintf(what, sizeof what, " (%s)", addr);

        if (dlock__now_ms() >= deadline_ms) {
            *code = dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                                "connect %s%s: timed out", ep->display, what);
            break;
        }
        fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd < 0) {
            *code = dlock__fail(err, errlen, DLOCK_EIO, "socket for %s: %s",
                                ep->display, strerror(errno));
            continue;
        }
        while ((g = connect(fd, ai->ai_addr, ai->ai_addrlen)) != 0 &&
               errno == EINTR)
            ;
        if (g == 0) {
            *code = DLOCK_OK;
        } else if (errno == EINPROGRESS) {
            *code =
                connect_wait(fd, ep->display, what, deadline_ms, err, errlen);
        } else {
            *code = dlock__fail(err, errlen, DLOCK_EIO, "connect %s%s: %s",
                                ep->display, what, strerror(errno));
        }
        if (*code == DLOCK_OK)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        /* Small commands must not wait for Nagle; keepalive finds a peer
         * that vanished while an idle pooled connection waited. */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    return fd;
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

/* Append AUTH / SELECT as configured and check their replies: AUTH must
 * say OK (else DLOCK_EAUTH with the server's words), SELECT too (else
 * select_error_code's status). */
static int login(dlock__conn *c, const dlock__endpoint *ep, int64_t deadline_ms,
                 char *err, size_t errlen)
{
    const char *argv[3];
    size_t lens[3];
    redisReply *rep[2] = {NULL, NULL};
    char dbuf[16];
    int n = 0, i, r, iauth = -1, isel = -1;

    if (ep->password != NULL) {
        int argc = 0;
        argv[argc] = "AUTH";
        lens[argc++] = 4;
        if (ep->user != NULL) {
            argv[argc] = ep->user;
            lens[argc++] = strlen(ep->user);
        }
        argv[argc] = ep->password;
        lens[argc++] = strlen(ep->password);
        if (dlock__conn_append_argv(c, argc, argv, lens) != DLOCK_OK)
            return dlock__conn_die(
                c, dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory"));
        iauth = n++;
    }
    if (ep->db != 0) {
        snprintf(dbuf, sizeof dbuf, "%d", ep->db);
        argv[0] = "SELECT";
        lens[0] = 6;
        argv[1] = dbuf;
        lens[1] = strlen(dbuf);
        if (dlock__conn_append_argv(c, 2, argv, lens) != DLOCK_OK)
            return dlock__conn_die(
                c, dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory"));
        isel = n++;
    }
    if (n == 0)
        return DLOCK_OK;
    r = dlock__conn_roundtrip(c, n, rep, deadline_ms, -1, err, errlen);
    if (r != DLOCK_OK)
        return r;
    for (i = 0; i < n && r == DLOCK_OK; i++) {
        redisReply *x = rep[i];
        int is_ok;
        char text[161];
        if (x == NULL) {
            /* Not possible after a successful roundtrip; be safe. */
            r = dlock__fail(err, errlen, DLOCK_EPROTO, "no reply from %s",
                            c->peer);
            break;
        }
        is_ok = x->type == REDIS_REPLY_STATUS && x->len == 2 &&
                memcmp(x->str, "OK", 2) == 0;
        if (is_ok)
            continue;
        if (x->type == REDIS_REPLY_ERROR)
            scrub_copy(text, sizeof text, x->str, x->len, ep->password);
        if (x->type == REDIS_REPLY_ERROR && i == iauth)
            r = dlock__fail(err, errlen, DLOCK_EAUTH, "AUTH to %s: %s", c->peer,
                            text);
        else if (x->type == REDIS_REPLY_ERROR && i == isel)
            r = dlock__fail(err, errlen, select_error_code(x->str, x->len),
                            "SELECT %d on %s: %s", ep->db, c->peer, text);
        else
            r = dlock__fail(err, errlen, DLOCK_EPROTO,
                            "protocol error from %s: unexpected reply to %s",
                            c->peer, i == iauth ? "AUTH" : "SELECT");
    }
    for (i = 0; i < n; i++)
        freeReplyObject(rep[i]);
    if (r == DLOCK_OK && c->dead)
        r = dlock__fail(err, errlen, DLOCK_EIO,
                        "connection closed by %s after logging in", c->peer);
    return r == DLOCK_OK ? DLOCK_OK : dlock__conn_die(c, r);
}

/* Open a connection to ep; see net.h. Every failure closes what was
 * opened and leaves *out NULL. */
int dlock__conn_open(dlock__conn **out, const dlock__endpoint *ep,
                     dlock__tls_ctx *tls, int64_t deadline_ms, char *err,
                     size_t errlen)
{
    dlock__conn *c;
    int r = DLOCK_OK;

    *out = NULL;
    if (ep == NULL || (ep->kind == DLOCK__EP_TLS && tls == NULL) ||
        (ep->kind != DLOCK__EP_UNIX && ep->host == NULL))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "connect: no usable endpoint%s",
                           ep != NULL && ep->kind == DLOCK__EP_TLS
                               ? " (rediss:// without a TLS context)"
                               : "");
    c = dlock__conn_new(ep->display != NULL ? ep->display
                        : ep->path != NULL  ? ep->path
                                            : ep->host);
    if (c == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");

    if (ep->kind == DLOCK__EP_UNIX)
        c->fd = open_unix(ep, deadline_ms, &r, err, errlen);
    else
        c->fd = open_tcp(ep, deadline_ms, &r, err, errlen);
    if (c->fd < 0)
        goto fail;
    c->tcp = ep->kind != DLOCK__EP_UNIX;
    if (ep->kind == DLOCK__EP_TLS) {
        r = dlock__tls_start(c, tls, ep->host, deadline_ms, err, errlen);
        if (r != DLOCK_OK)
            goto fail;
    }
    r = login(c, ep, deadline_ms, err, errlen);
    if (r != DLOCK_OK)
        goto fail;
    *out = c;
    return DLOCK_OK;

fail:
    dlock__conn_close(c);
    return r;
}
