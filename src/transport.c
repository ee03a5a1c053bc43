/*
 * transport.c - one connection to one Redis server: TCP, unix socket or
 * TLS, with hiredis's reply reader beneath it.
 *
 * We own the socket instead of using redisContext so that:
 *   - every socket is non-blocking and CLOEXEC from birth, and every
 *     connect, handshake and command is bounded by a monotonic deadline;
 *   - one thread can poll() many connections (node.c fans one script out
 *     to every server at once): dlock__conn_events() says what to wait
 *     for, dlock__conn_progress() does the I/O poll() allowed;
 *   - TLS is ours (OpenSSL 3), with verification on by default, and
 *     nothing, plain or TLS, can raise SIGPIPE: plain writes use
 *     send(MSG_NOSIGNAL), and TLS goes through a small BIO of our own whose
 *     writes are send(MSG_NOSIGNAL) too (OpenSSL's socket BIO uses write(),
 *     which raises SIGPIPE when the peer is gone). The library never
 *     touches signal dispositions or masks.
 *
 * hiredis only parses replies (redisReader); commands are formatted
 * here (see dlock__conn_append_argv for why). A connection is dead after any failure; callers
 * close it and open another.
 *
 * Threads: a dlock__conn is used by one thread at a time. A dlock__tls_ctx
 * is shared by the connections of one client (SSL_CTX is thread-safe for
 * SSL_new) and must outlive them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "internal.h"

/* How much one read takes from the socket; one TLS record fits. */
#define READ_CHUNK 16384
/* Reads per progress call on a plain socket before yielding to the caller
 * (poll is level-triggered, so nothing is lost by stopping). */
#define READ_ROUNDS 64
/* Bytes of the peer's first answer kept to explain a failed handshake. */
#define FIRST_KEEP 48

struct dlock__tls_ctx {
    SSL_CTX *ssl_ctx;
    BIO_METHOD *bio_meth; /* our MSG_NOSIGNAL socket BIO */
    char *server_name;    /* name to verify instead of the URL's host */
    int insecure;
    int client_cert; /* a client certificate is configured */
};

/* State of our socket BIO, inside the connection it belongs to. */
typedef struct sockbio {
    int fd;
    int last_errno;                  /* of the last failed recv/send */
    unsigned char first[FIRST_KEEP]; /* the peer's first bytes */
    size_t nfirst;
} sockbio;

struct dlock__conn {
    int fd;
    SSL *ssl;   /* NULL on plain connections */
    sockbio sb; /* the BIO's state (TLS) */
    redisReader *reader;
    char *out; /* queued output: out[outpos..outlen) */
    size_t outpos, outlen, outcap;
    size_t tls_wlen;      /* length of an SSL_write to repeat, 0 if none */
    int read_wants_write; /* SSL_read wanted the socket writable */
    int write_wants_read; /* SSL_write wanted the socket readable */
    int dead;
    int tcp; /* TCP or TLS (not a unix socket) */
    int handshaken;
    int client_cert; /* TLS with a client certificate */
    uint64_t nread;  /* bytes of reply stream received */
    char *peer;      /* ep->display */
    int stale;       /* replies still to come that nobody waits for */
};

/* ---- our socket BIO ---------------------------------------------------- */

/* BIO write: send() with MSG_NOSIGNAL so a closed peer gives EPIPE, not a
 * signal. Sets the retry flag on EAGAIN as OpenSSL expects. */
static int sb_write(BIO *b, const char *buf, size_t len, size_t *written)
{
    sockbio *sb = BIO_get_data(b);
    ssize_t n;
    BIO_clear_retry_flags(b);
    do {
        n = send(sb->fd, buf, len, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n >= 0) {
        *written = (size_t)n;
        return 1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        BIO_set_retry_write(b);
    else
        sb->last_errno = errno;
    *written = 0;
    return 0;
}

/* BIO read: recv(), remembering the first bytes the peer ever sent so a
 * handshake failure can say "this is not TLS". 0 bytes = end of stream. */
static int sb_read(BIO *b, char *buf, size_t len, size_t *readbytes)
{
    sockbio *sb = BIO_get_data(b);
    ssize_t n;
    BIO_clear_retry_flags(b);
    do {
        n = recv(sb->fd, buf, len, 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        size_t keep = FIRST_KEEP - sb->nfirst;
        if (keep > (size_t)n)
            keep = (size_t)n;
        memcpy(sb->first + sb->nfirst, buf, keep);
        sb->nfirst += keep;
        *readbytes = (size_t)n;
        return 1;
    }
    *readbytes = 0;
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            BIO_set_retry_read(b);
        else
            sb->last_errno = errno;
    }
    return 0;
}

/* BIO control: only what libssl asks of a transport BIO. */
static long sb_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    sockbio *sb = BIO_get_data(b);
    (void)num;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_C_GET_FD:
        if (sb == NULL)
            return -1;
        if (ptr != NULL)
            *(int *)ptr = sb->fd;
        return sb->fd;
    default:
        return 0;
    }
}

/* BIO create: nothing to allocate; the connection sets data and init. */
static int sb_create(BIO *b)
{
    BIO_set_init(b, 0);
    BIO_set_data(b, NULL);
    return 1;
}

/* BIO destroy: the state belongs to the connection, the fd too. */
static int sb_destroy(BIO *b)
{
    BIO_set_data(b, NULL);
    BIO_set_init(b, 0);
    return 1;
}

/* ---- TLS context ------------------------------------------------------- */

/* The reason text of the oldest OpenSSL error on this thread's queue, or
 * fallback. */
static const char *ssl_reason(const char *fallback)
{
    unsigned long e = ERR_peek_error();
    const char *r;
    if (e == 0)
        return fallback;
    /* A failed fopen() and the like: OpenSSL keeps errno as the reason. */
    if (ERR_SYSTEM_ERROR(e))
        return strerror(ERR_GET_REASON(e));
    r = ERR_reason_error_string(e);
    return r != NULL ? r : fallback;
}

/* Fail building the TLS context: message with OpenSSL's reason. */
static int ctx_fail(char *err, size_t errlen, const char *what,
                    const char *file)
{
    int r = dlock__fail(err, errlen, DLOCK_ETLS, "TLS: %s %s: %s", what,
                        file != NULL ? file : "", ssl_reason("unknown error"));
    ERR_clear_error();
    return r;
}

/* Build the client-side SSL_CTX and our BIO method from opts. On failure
 * everything made so far is freed and *out is NULL. */
int dlock__tls_ctx_new(dlock__tls_ctx **out, const dlock__tls_opts *opts,
                       char *err, size_t errlen)
{
    dlock__tls_ctx *t;
    int r = DLOCK_OK;

    *out = NULL;
    ERR_clear_error();
    t = calloc(1, sizeof *t);
    if (t == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    t->insecure = opts != NULL && opts->insecure;
    t->ssl_ctx = SSL_CTX_new(TLS_client_method());
    if (t->ssl_ctx == NULL) {
        r = ctx_fail(err, errlen, "cannot create the context", NULL);
        goto fail;
    }
    /* A fixed type, not BIO_get_new_index(): that index is a process-wide
     * counter with ~127 values, and one BIO method per client would use it
     * up. The type is only used to find BIOs in a chain by kind. */
    t->bio_meth = BIO_meth_new(BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                               "dlock socket");
    if (t->bio_meth == NULL || !BIO_meth_set_write_ex(t->bio_meth, sb_write) ||
        !BIO_meth_set_read_ex(t->bio_meth, sb_read) ||
        !BIO_meth_set_ctrl(t->bio_meth, sb_ctrl) ||
        !BIO_meth_set_create(t->bio_meth, sb_create) ||
        !BIO_meth_set_destroy(t->bio_meth, sb_destroy)) {
        r = dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(t->ssl_ctx, TLS1_2_VERSION);
    /* Our output buffer may move between a partial SSL_write and its
     * retry (more commands appended), and partial writes let us advance
     * through a large pipeline record by record. */
    SSL_CTX_set_mode(t->ssl_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                     SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(t->ssl_ctx,
                       t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);

    if (opts != NULL && (opts->ca_file != NULL || opts->ca_dir != NULL)) {
        if (SSL_CTX_load_verify_locations(t->ssl_ctx, opts->ca_file,
                                          opts->ca_dir) != 1) {
            r = ctx_fail(err, errlen, "cannot load the CA",
                         opts->ca_file != NULL ? opts->ca_file : opts->ca_dir);
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ssl_ctx) != 1) {
        r = ctx_fail(err, errlen, "cannot load the system CA store", NULL);
        goto fail;
    }

    if (opts != NULL && opts->key_file != NULL && opts->cert_file == NULL) {
        r = dlock__fail(err, errlen, DLOCK_ETLS,
                        "TLS: a client key was given without a client "
                        "certificate");
        goto fail;
    }
    if (opts != NULL && opts->cert_file != NULL) {
        const char *key =
            opts->key_file != NULL ? opts->key_file : opts->cert_file;
        if (SSL_CTX_use_certificate_chain_file(t->ssl_ctx, opts->cert_file) !=
            1) {
            r = ctx_fail(err, errlen, "cannot load the client certificate",
                         opts->cert_file);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ssl_ctx, key, SSL_FILETYPE_PEM) !=
            1) {
            r = ctx_fail(err, errlen, "cannot load the client key", key);
            goto fail;
        }
        if (SSL_CTX_check_private_key(t->ssl_ctx) != 1) {
            r = ctx_fail(err, errlen,
                         "the client key does not match the certificate", key);
            goto fail;
        }
    }
    if (opts != NULL && opts->server_name != NULL &&
        opts->server_name[0] != '\0') {
        t->server_name = strdup(opts->server_name);
        if (t->server_name == NULL) {
            r = dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
            goto fail;
        }
    }
    t->client_cert = opts != NULL && opts->cert_file != NULL;
    *out = t;
    return DLOCK_OK;

fail:
    dlock__tls_ctx_free(t);
    ERR_clear_error();
    return r;
}

/* Free the TLS context. Every connection made with it must be closed
 * first. Accepts NULL. */
void dlock__tls_ctx_free(dlock__tls_ctx *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ssl_ctx);
    BIO_meth_free(ctx->bio_meth);
    free(ctx->server_name);
    free(ctx);
}

/* ---- helpers ----------------------------------------------------------- */

/* Mark the connection dead and pass the code through. */
static int die(dlock__conn *c, int code)
{
    c->dead = 1;
    return code;
}

/* Write a printable rendering of the n bytes at s into buf (size len) for
 * messages: non-printable bytes become '.'. */
static void printable(char *buf, size_t len, const unsigned char *s, size_t n)
{
    size_t i, j = 0;
    for (i = 0; i < n && j + 1 < len; i++) {
        unsigned char ch = s[i];
        if (ch == '\r' || ch == '\n')
            break;
        buf[j++] = (char)((ch >= 0x20 && ch < 0x7f) ? ch : '.');
    }
    buf[j] = '\0';
}

/* The hint added to "closed"/"reset" messages of a plain TCP connection
 * that never received a byte: that is how a TLS port treats a plain
 * client (OpenSSL rejects the first bytes and the server resets). */
static const char *plain_hint(const dlock__conn *c)
{
    return c->ssl == NULL && c->tcp && c->nread == 0
               ? " before any reply (is it a TLS port? then use rediss://)"
               : "";
}

/* Fail for a socket error (errno value e) on a plain connection, as
 * "connection closed/reset by PEER" or "OP PEER: strerror". */
static int sock_fail(dlock__conn *c, const char *op, int e, char *err,
                     size_t errlen)
{
    if (e == 0 || e == EPIPE)
        return die(c, dlock__fail(err, errlen, DLOCK_EIO,
                                  "connection closed by %s%s", c->peer,
                                  plain_hint(c)));
    if (e == ECONNRESET)
        return die(c, dlock__fail(err, errlen, DLOCK_EIO,
                                  "connection reset by %s%s", c->peer,
                                  plain_hint(c)));
    return die(c, dlock__fail(err, errlen, DLOCK_EIO, "%s %s: %s", op, c->peer,
                              strerror(e)));
}

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

/* The end of a "connection closed/reset" message on a TLS connection:
 * when, and for a fresh connection without a client certificate the
 * likely cause (TLS 1.3 servers refuse a missing certificate after the
 * client's handshake is done, and their reset can overtake the alert). */
static const char *tls_hint(const dlock__conn *c, int during)
{
    if (during)
        return " during the TLS handshake";
    if (c->nread == 0 && !c->client_cert)
        return " before any reply (does the server require a client "
               "certificate?)";
    return "";
}

/*
 * Explain a failed TLS operation: e is SSL_get_error()'s verdict, during
 * says "handshake" or not. Returns the DLOCK code (ETLS for TLS failures,
 * EIO for a closed or broken socket) with a message in err; clears the
 * thread's OpenSSL error queue.
 */
static int tls_fail(dlock__conn *c, int e, int during, char *err, size_t errlen)
{
    unsigned long ec = ERR_peek_error();
    int reason = ec != 0 ? ERR_GET_REASON(ec) : 0;
    int lib_ssl = ec != 0 && ERR_GET_LIB(ec) == ERR_LIB_SSL;
    long vr = SSL_get_verify_result(c->ssl);
    const char *pre = during ? "TLS handshake with" : "TLS connection to";
    int code;

    if (during && lib_ssl && reason == SSL_R_CERTIFICATE_VERIFY_FAILED &&
        vr != X509_V_OK) {
        code = dlock__fail(err, errlen, DLOCK_ETLS,
                           "TLS handshake with %s: certificate verify "
                           "failed: %s",
                           c->peer, X509_verify_cert_error_string(vr));
    } else if (during && c->sb.nfirst > 0 && c->sb.first[0] != 0x16 &&
               c->sb.first[0] != 0x15) {
        /* The peer's first bytes are not a TLS handshake or alert record:
         * typically a plain Redis port answering "-ERR ...". */
        char sample[FIRST_KEEP + 1];
        ssize_t more;
        /* OpenSSL read only a record header; take the rest of the line
         * if it is already here, to show what the peer is. */
        do {
            more = recv(c->fd, c->sb.first + c->sb.nfirst,
                        FIRST_KEEP - c->sb.nfirst, MSG_DONTWAIT);
        } while (more < 0 && errno == EINTR);
        if (more > 0)
            c->sb.nfirst += (size_t)more;
        printable(sample, sizeof sample, c->sb.first, c->sb.nfirst);
        code = dlock__fail(err, errlen, DLOCK_ETLS,
                           "TLS handshake with %s: the server did not answer "
                           "with TLS: is it a TLS port? (it sent \"%s\")",
                           c->peer, sample);
    } else if (e == SSL_ERROR_ZERO_RETURN ||
               (e == SSL_ERROR_SYSCALL && c->sb.last_errno == 0) ||
               (lib_ssl && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
        code = dlock__fail(err, errlen, DLOCK_EIO, "connection closed by %s%s",
                           c->peer, tls_hint(c, during));
    } else if (e == SSL_ERROR_SYSCALL &&
               (c->sb.last_errno == ECONNRESET || c->sb.last_errno == EPIPE)) {
        code = dlock__fail(err, errlen, DLOCK_EIO, "connection %s by %s%s",
                           c->sb.last_errno == EPIPE ? "closed" : "reset",
                           c->peer, tls_hint(c, during));
    } else if (e == SSL_ERROR_SYSCALL) {
        code = dlock__fail(err, errlen, DLOCK_EIO, "%s %s: %s", pre, c->peer,
                           strerror(c->sb.last_errno));
    } else {
        code = dlock__fail(err, errlen, DLOCK_ETLS, "%s %s: %s", pre, c->peer,
                           ssl_reason("protocol failure"));
    }
    ERR_clear_error();
    return die(c, code);
}

/* Run the TLS handshake on c's socket before the deadline, verifying the
 * server as configured in tls (or against host). */
static int tls_handshake(dlock__conn *c, dlock__tls_ctx *tls, const char *host,
                         int64_t deadline_ms, char *err, size_t errlen)
{
    const char *name = tls->server_name != NULL ? tls->server_name : host;
    int ip = dlock__is_ip_literal(name);
    BIO *bio;

    ERR_clear_error();
    c->ssl = SSL_new(tls->ssl_ctx);
    bio = c->ssl != NULL ? BIO_new(tls->bio_meth) : NULL;
    if (bio == NULL) {
        ERR_clear_error();
        return die(c, dlock__fail(err, errlen, DLOCK_ENOMEM,
                                  "TLS with %s: out of memory", c->peer));
    }
    c->sb.fd = c->fd;
    c->client_cert = tls->client_cert;
    BIO_set_data(bio, &c->sb);
    BIO_set_init(bio, 1);
    SSL_set_bio(c->ssl, bio, bio);

    /* SNI carries names only (RFC 6066), never IP literals. */
    if (!ip && SSL_set_tlsext_host_name(c->ssl, name) != 1)
        return tls_fail(c, SSL_ERROR_SSL, 1, err, errlen);
    if (!tls->insecure) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
        int ok;
        if (ip) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(vp, name);
        } else {
            X509_VERIFY_PARAM_set_hostflags(
                vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = X509_VERIFY_PARAM_set1_host(vp, name, 0);
        }
        if (ok != 1)
            return tls_fail(c, SSL_ERROR_SSL, 1, err, errlen);
    }
    SSL_set_connect_state(c->ssl);

    for (;;) {
        int r, e;
        short want, rev = 0;
        ERR_clear_error();
        r = SSL_connect(c->ssl);
        if (r == 1)
            break;
        e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ)
            want = POLLIN;
        else if (e == SSL_ERROR_WANT_WRITE)
            want = POLLOUT;
        else
            return tls_fail(c, e, 1, err, errlen);
        if (!dlock__wait_fd(c->fd, want, deadline_ms, &rev)) {
            ERR_clear_error();
            return die(c, dlock__fail(
                              err, errlen, DLOCK_ETIMEDOUT,
                              "TLS handshake with %s: no answer in time%s",
                              c->peer,
                              c->sb.nfirst == 0 ? " (is it a TLS port?)" : ""));
        }
    }
    c->handshaken = 1;
    return DLOCK_OK;
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

/* Append AUTH / SELECT as configured and check their replies: AUTH must
 * say OK (else DLOCK_EAUTH with the server's words), SELECT too (else
 * DLOCK_ESERVER). */
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
            return die(c,
                       dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory"));
        iauth = n++;
    }
    if (ep->db != 0) {
        snprintf(dbuf, sizeof dbuf, "%d", ep->db);
        argv[0] = "SELECT";
        lens[0] = 6;
        argv[1] = dbuf;
        lens[1] = strlen(dbuf);
        if (dlock__conn_append_argv(c, 2, argv, lens) != DLOCK_OK)
            return die(c,
                       dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory"));
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
            r = dlock__fail(err, errlen, DLOCK_ESERVER, "SELECT %d on %s: %s",
                            ep->db, c->peer, text);
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
    return r == DLOCK_OK ? DLOCK_OK : die(c, r);
}

/* Open a connection to ep; see internal.h. Every failure closes what was
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
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    c->fd = -1;
    c->sb.fd = -1;
    c->peer = strdup(ep->display != NULL ? ep->display
                     : ep->path != NULL  ? ep->path
                                         : ep->host);
    c->reader = redisReaderCreate();
    if (c->peer == NULL || c->reader == NULL) {
        dlock__conn_close(c);
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }

    if (ep->kind == DLOCK__EP_UNIX)
        c->fd = open_unix(ep, deadline_ms, &r, err, errlen);
    else
        c->fd = open_tcp(ep, deadline_ms, &r, err, errlen);
    if (c->fd < 0)
        goto fail;
    c->tcp = ep->kind != DLOCK__EP_UNIX;
    if (ep->kind == DLOCK__EP_TLS) {
        r = tls_handshake(c, tls, ep->host, deadline_ms, err, errlen);
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

/* Close the socket (with a best-effort TLS close_notify on a healthy
 * connection) and free everything. Accepts NULL. */
void dlock__conn_close(dlock__conn *c)
{
    if (c == NULL)
        return;
    if (c->ssl != NULL) {
        if (c->handshaken && !c->dead && c->tls_wlen == 0) {
            /* One non-blocking close_notify; its outcome does not matter.
             * Not after a failure, nor in the middle of a record. */
            SSL_shutdown(c->ssl);
        }
        SSL_free(c->ssl);
        ERR_clear_error();
    }
    if (c->fd >= 0) {
        /* Read what has arrived first: closing a TCP socket with unread
         * data sends a reset, and a reset can make the server drop a
         * request of ours it has received but not read yet (an undo
         * queued behind a request that timed out, say). */
        char buf[4096];
        int k;
        for (k = 0; k < 16; k++) {
            ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r <= 0 && !(r < 0 && errno == EINTR))
                break;
        }
        close(c->fd);
    }
    if (c->reader != NULL)
        redisReaderFree(c->reader);
    free(c->out);
    free(c->peer);
    free(c);
}

/* ---- commands and I/O -------------------------------------------------- */

/* Append "<prefix><n>\r\n" at p; returns the new end. */
static char *put_len(char *p, char prefix, size_t n)
{
    *p++ = prefix;
    p += dlock__fmt_u64(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* Format the command as RESP straight into the output queue. Our own
 * formatter rather than hiredis's redisFormatCommandArgv: that one
 * sprintf()s every length and made up close to half of the client's
 * instructions per lock cycle (callgrind). */
int dlock__conn_append_argv(dlock__conn *c, int argc, const char **argv,
                            const size_t *argvlen)
{
    size_t need, len = 3 + 20;
    char *p;
    int i;

    if (argc <= 0)
        return DLOCK_EINVAL;
    for (i = 0; i < argc; i++)
        len +=
            1 + 20 + 2 + (argvlen != NULL ? argvlen[i] : strlen(argv[i])) + 2;
    /* Reclaim what was already written before growing. Moving the unsent
     * bytes is fine even under a pending SSL_write retry: the context has
     * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER and the bytes stay the same. */
    if (c->outpos > 0 && c->outlen + len > c->outcap) {
        memmove(c->out, c->out + c->outpos, c->outlen - c->outpos);
        c->outlen -= c->outpos;
        c->outpos = 0;
    }
    need = c->outlen + len;
    if (need > c->outcap) {
        size_t cap = c->outcap > 0 ? c->outcap : 1024;
        char *np;
        while (cap < need)
            cap *= 2;
        np = realloc(c->out, cap);
        if (np == NULL)
            return DLOCK_ENOMEM;
        c->out = np;
        c->outcap = cap;
    }
    p = put_len(c->out + c->outlen, '*', (size_t)argc);
    for (i = 0; i < argc; i++) {
        size_t n = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        p = put_len(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    c->outlen = (size_t)(p - c->out);
    return DLOCK_OK;
}

/* The socket of c, for poll(). */
int dlock__conn_fd(const dlock__conn *c)
{
    return c->fd;
}

/* 1 when nothing is queued for writing. */
int dlock__conn_flushed(const dlock__conn *c)
{
    return c->outpos >= c->outlen;
}

/* The events to poll for now. POLLIN is always wanted, so that a peer
 * that closes or answers while we are still writing is noticed. POLLOUT
 * while output is queued, unless TLS said its write must first read (then
 * a writable socket would only wake us in a loop), or when TLS said a
 * read must first write. */
short dlock__conn_events(const dlock__conn *c)
{
    short ev = POLLIN;
    if ((c->outpos < c->outlen && !c->write_wants_read) ||
        (c->ssl != NULL && c->read_wants_write))
        ev |= POLLOUT;
    return ev;
}

/* The peer's name for messages. */
const char *dlock__conn_peer(const dlock__conn *c)
{
    return c->peer;
}

/* Write as much queued output as the socket takes now. DLOCK_OK when it
 * all went or the socket is full; an error otherwise. */
static int flush_out(dlock__conn *c, char *err, size_t errlen)
{
    while (c->outpos < c->outlen) {
        size_t left = c->outlen - c->outpos;
        if (c->ssl != NULL) {
            /* A retried SSL_write must repeat the same length. */
            size_t len = c->tls_wlen != 0 ? c->tls_wlen
                         : left > INT_MAX ? INT_MAX
                                          : left;
            int n, e;
            ERR_clear_error();
            n = SSL_write(c->ssl, c->out + c->outpos, (int)len);
            c->write_wants_read = 0;
            if (n > 0) {
                c->outpos += (size_t)n;
                c->tls_wlen = 0;
                continue;
            }
            e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                c->tls_wlen = len;
                c->write_wants_read = e == SSL_ERROR_WANT_READ;
                return DLOCK_OK;
            }
            return tls_fail(c, e, 0, err, errlen);
        } else {
            ssize_t n = send(c->fd, c->out + c->outpos, left, MSG_NOSIGNAL);
            if (n >= 0) {
                c->outpos += (size_t)n;
                continue;
            }
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return DLOCK_OK;
            return sock_fail(c, "write to", errno, err, errlen);
        }
    }
    c->outpos = c->outlen = 0;
    return DLOCK_OK;
}

/* The reply reader failed (not RESP, or out of memory): the connection is
 * dead. */
static int reader_failed(dlock__conn *c, char *err, size_t errlen)
{
    return die(c, dlock__fail(err, errlen,
                              c->reader->err == REDIS_ERR_OOM ? DLOCK_ENOMEM
                                                              : DLOCK_EPROTO,
                              "protocol error from %s: %s", c->peer,
                              c->reader->errstr));
}

/* Hand n received bytes to the reply reader. */
static int feed(dlock__conn *c, const char *buf, size_t n, char *err,
                size_t errlen)
{
    if (c->ssl == NULL && c->nread == 0 && n >= 2 &&
        ((unsigned char)buf[0] == 0x15 || (unsigned char)buf[0] == 0x16) &&
        buf[1] == 0x03) {
        /* A TLS alert or handshake record where RESP should be: a plain
         * client talking to a TLS port. */
        return die(c, dlock__fail(err, errlen, DLOCK_EPROTO,
                                  "protocol error from %s: the server "
                                  "answered with TLS: is it a TLS port? "
                                  "(use rediss://)",
                                  c->peer));
    }
    c->nread += n;
    if (redisReaderFeed(c->reader, buf, n) != REDIS_OK)
        return reader_failed(c, err, errlen);
    return DLOCK_OK;
}

/* Read everything that can be read now into the reader. For TLS this
 * drains OpenSSL's buffer too: poll() cannot see data OpenSSL already
 * holds. DLOCK_OK, or an error (EOF included: the peer closed). */
static int fill_in(dlock__conn *c, char *err, size_t errlen)
{
    char buf[READ_CHUNK];
    int rounds;
    for (rounds = 0;; rounds++) {
        int r;
        if (c->ssl != NULL) {
            int n, e;
            ERR_clear_error();
            n = SSL_read(c->ssl, buf, sizeof buf);
            if (n > 0) {
                c->read_wants_write = 0;
                r = feed(c, buf, (size_t)n, err, errlen);
                if (r != DLOCK_OK)
                    return r;
                continue;
            }
            e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_READ) {
                c->read_wants_write = 0;
                return DLOCK_OK;
            }
            if (e == SSL_ERROR_WANT_WRITE) {
                c->read_wants_write = 1;
                return DLOCK_OK;
            }
            return tls_fail(c, e, 0, err, errlen);
        } else {
            ssize_t n;
            if (rounds >= READ_ROUNDS)
                return DLOCK_OK;
            n = recv(c->fd, buf, sizeof buf, 0);
            if (n > 0) {
                r = feed(c, buf, (size_t)n, err, errlen);
                if (r != DLOCK_OK)
                    return r;
                if ((size_t)n < sizeof buf)
                    return DLOCK_OK;
                continue;
            }
            if (n == 0)
                return sock_fail(c, "read from", 0, err, errlen);
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return DLOCK_OK;
            return sock_fail(c, "read from", errno, err, errlen);
        }
    }
}

/* Do the I/O poll() reported as possible; see internal.h. Reading is tried
 * on POLLIN/POLLHUP/POLLERR (and on POLLOUT when TLS wanted it for a
 * read), writing whenever output is queued: a write that cannot proceed
 * costs one EAGAIN. */
int dlock__conn_progress(dlock__conn *c, short revents, char *err,
                         size_t errlen)
{
    int r;
    if (c->dead)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "connection to %s is closed after an error",
                           c->peer);
    if (revents & POLLNVAL)
        return die(c, dlock__fail(err, errlen, DLOCK_EIO,
                                  "connection to %s: invalid socket", c->peer));
    /* Read before writing: when the peer has said its last words (a TLS
     * alert, "-ERR max number of clients reached") and closed, a write
     * first would only earn ECONNRESET and lose them. */
    if ((revents & (POLLIN | POLLHUP | POLLERR)) ||
        (c->ssl != NULL && c->read_wants_write && (revents & POLLOUT))) {
        r = fill_in(c, err, errlen);
        if (r != DLOCK_OK)
            return r;
    }
    if (c->outpos < c->outlen) {
        r = flush_out(c, err, errlen);
        if (r != DLOCK_OK)
            return r;
    }
    return DLOCK_OK;
}

/* Take one parsed reply if there is one. Replies that were complete
 * before the connection died are still handed out. */
int dlock__conn_pop_reply(dlock__conn *c, redisReply **out, char *err,
                          size_t errlen)
{
    for (;;) {
        void *rep = NULL;
        *out = NULL;
        if (redisReaderGetReply(c->reader, &rep) != REDIS_OK)
            return reader_failed(c, err, errlen);
        if (rep == NULL)
            return 0;
        if (c->stale > 0) { /* the answer to a request given up on */
            c->stale--;
            freeReplyObject(rep);
            continue;
        }
        *out = rep;
        return 1;
    }
}

/* See internal.h. */
int dlock__conn_abandon(dlock__conn *c)
{
    return ++c->stale;
}

/* Free replies[0..n) and set them NULL. */
static void drop_replies(redisReply **replies, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        if (replies[i] != NULL)
            freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
}

/* Write the queue and collect n replies before the deadline; see
 * internal.h. A timeout also kills the connection: its replies would
 * arrive later and be taken for the answers to the next commands. */
int dlock__conn_roundtrip(dlock__conn *c, int n, redisReply **replies,
                          int64_t deadline_ms, int cancel_fd, char *err,
                          size_t errlen)
{
    int got = 0, i, r;

    for (i = 0; i < n; i++)
        replies[i] = NULL;
    if (c->dead)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "connection to %s is closed after an error",
                           c->peer);
    for (;;) {
        struct pollfd p[2];
        int np = 1, pr, perr;
        char perrmsg[DLOCK__ERRLEN];

        while (got < n) {
            redisReply *rep;
            r = dlock__conn_pop_reply(c, &rep, err, errlen);
            if (r < 0)
                goto fail;
            if (r == 0)
                break;
            replies[got++] = rep;
        }
        if (got == n && dlock__conn_flushed(c))
            return DLOCK_OK;
        if (dlock__now_ms() >= deadline_ms) {
            r = die(c, dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                                   "%s did not answer in time", c->peer));
            goto fail;
        }
        p[0].fd = c->fd;
        p[0].events = dlock__conn_events(c);
        p[0].revents = 0;
        if (cancel_fd >= 0) {
            p[1].fd = cancel_fd;
            p[1].events = POLLIN;
            p[1].revents = 0;
            np = 2;
        }
        pr = poll(p, (nfds_t)np, dlock__ms_left(deadline_ms));
        if (pr < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            r = die(c, dlock__fail(err, errlen, DLOCK_EIO, "poll: %s",
                                   strerror(errno)));
            goto fail;
        }
        if (np == 2 && (p[1].revents & POLLNVAL)) {
            /* Not an open fd: nothing can cancel us through it, and
             * polling it again would return at once, forever. */
            cancel_fd = -1;
        } else if (np == 2 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            r = die(c, dlock__fail(err, errlen, DLOCK_CANCELED,
                                   "canceled while waiting for %s", c->peer));
            goto fail;
        }
        if (p[0].revents == 0)
            continue;
        perr = dlock__conn_progress(c, p[0].revents, perrmsg, sizeof perrmsg);
        if (perr != DLOCK_OK) {
            /* The peer may have answered and then closed: take what is
             * complete before reporting the failure. */
            while (got < n) {
                redisReply *rep;
                if (dlock__conn_pop_reply(c, &rep, NULL, 0) != 1)
                    break;
                replies[got++] = rep;
            }
            if (got == n && dlock__conn_flushed(c))
                return DLOCK_OK;
            r = dlock__fail(err, errlen, perr, "%s", perrmsg);
            goto fail;
        }
    }

fail:
    drop_replies(replies, n);
    return r;
}
