/*
 * tls.c - TLS for a connection (OpenSSL 3): the client context made once
 * per client, our own socket BIO, the handshake with verification, and
 * the read/write entries of the connection's I/O table for a TLS link.
 *
 * Nothing here can raise SIGPIPE: OpenSSL's socket BIO writes with
 * write(), which raises it when the peer is gone, so TLS goes through a
 * small BIO of our own whose writes are send(MSG_NOSIGNAL).
 *
 * Layer: above conn.c (it hands decrypted bytes to the connection's
 * reader), below net.c (which starts TLS on a connected socket).
 * Threads: a dlock__tls_ctx is shared by the connections of one client
 * (SSL_CTX is thread-safe for SSL_new) and must outlive them.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "io/conn_io.h"
#include "io/tls.h"

/* How much one read takes from the socket; one TLS record fits. */
#define READ_CHUNK 16384
/* Bytes of the peer's first answer kept to explain a failed handshake. */
#define FIRST_KEEP 48

struct dlock__tls_ctx {
    SSL_CTX *ssl_ctx;
    BIO_METHOD *bio_meth; /* our MSG_NOSIGNAL socket BIO */
    char *server_name;    /* name to verify instead of the URL's host */
    int insecure;
    int client_cert; /* a client certificate is configured */
};

/* State of our socket BIO, inside the TLS state it belongs to. */
typedef struct sockbio {
    int fd;
    int last_errno;                  /* of the last failed recv/send */
    unsigned char first[FIRST_KEEP]; /* the peer's first bytes */
    size_t nfirst;
} sockbio;

/* A connection's TLS state (dlock__conn.tls). */
typedef struct tls_link {
    SSL *ssl;
    sockbio sb;  /* the BIO's state */
    size_t wlen; /* length of an SSL_write to repeat, 0 if none */
    int handshaken;
    int client_cert; /* with a client certificate */
} tls_link;

static const dlock__conn_io tls_io;

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

/* Load into t the CAs to trust (opts' file or directory, else the
 * system's store) and the client certificate and key, when given.
 * DLOCK_OK, or DLOCK_ETLS / DLOCK_ENOMEM with err set. */
static int load_trust(dlock__tls_ctx *t, const dlock__tls_opts *opts, char *err,
                      size_t errlen)
{
    if (opts != NULL && (opts->ca_file != NULL || opts->ca_dir != NULL)) {
        if (SSL_CTX_load_verify_locations(t->ssl_ctx, opts->ca_file,
                                          opts->ca_dir) != 1) {
            return ctx_fail(err, errlen, "cannot load the CA",
                            opts->ca_file != NULL ? opts->ca_file
                                                  : opts->ca_dir);
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ssl_ctx) != 1) {
        return ctx_fail(err, errlen, "cannot load the system CA store", NULL);
    }
    if (opts != NULL && opts->key_file != NULL && opts->cert_file == NULL) {
        return dlock__fail(err, errlen, DLOCK_ETLS,
                           "TLS: a client key was given without a client "
                           "certificate");
    }
    if (opts != NULL && opts->cert_file != NULL) {
        const char *key =
            opts->key_file != NULL ? opts->key_file : opts->cert_file;
        if (SSL_CTX_use_certificate_chain_file(t->ssl_ctx, opts->cert_file) !=
            1) {
            return ctx_fail(err, errlen, "cannot load the client certificate",
                            opts->cert_file);
        }
        if (SSL_CTX_use_PrivateKey_file(t->ssl_ctx, key, SSL_FILETYPE_PEM) !=
            1) {
            return ctx_fail(err, errlen, "cannot load the client key", key);
        }
        if (SSL_CTX_check_private_key(t->ssl_ctx) != 1) {
            return ctx_fail(err, errlen,
                            "the client key does not match the certificate",
                            key);
        }
    }
    return DLOCK_OK;
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

    r = load_trust(t, opts, err, errlen);
    if (r != DLOCK_OK)
        goto fail;
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

/* The end of a "connection closed/reset" message on a TLS connection:
 * when, and for a fresh connection without a client certificate the
 * likely cause (TLS 1.3 servers refuse a missing certificate after the
 * client's handshake is done, and their reset can overtake the alert). */
static const char *tls_hint(const dlock__conn *c, int during)
{
    const tls_link *t = c->tls;
    if (during)
        return " during the TLS handshake";
    if (c->nread == 0 && !t->client_cert)
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
    tls_link *t = c->tls;
    unsigned long ec = ERR_peek_error();
    int reason = ec != 0 ? ERR_GET_REASON(ec) : 0;
    int lib_ssl = ec != 0 && ERR_GET_LIB(ec) == ERR_LIB_SSL;
    long vr = SSL_get_verify_result(t->ssl);
    const char *pre = during ? "TLS handshake with" : "TLS connection to";
    int code;

    if (during && lib_ssl && reason == SSL_R_CERTIFICATE_VERIFY_FAILED &&
        vr != X509_V_OK) {
        code = dlock__fail(err, errlen, DLOCK_ETLS,
                           "TLS handshake with %s: certificate verify "
                           "failed: %s",
                           c->peer, X509_verify_cert_error_string(vr));
    } else if (during && t->sb.nfirst > 0 && t->sb.first[0] != 0x16 &&
               t->sb.first[0] != 0x15) {
        /* The peer's first bytes are not a TLS handshake or alert record:
         * typically a plain Redis port answering "-ERR ...". */
        char sample[FIRST_KEEP + 1];
        ssize_t more;
        /* OpenSSL read only a record header; take the rest of the line
         * if it is already here, to show what the peer is. */
        do {
            more = recv(c->fd, t->sb.first + t->sb.nfirst,
                        FIRST_KEEP - t->sb.nfirst, MSG_DONTWAIT);
        } while (more < 0 && errno == EINTR);
        if (more > 0)
            t->sb.nfirst += (size_t)more;
        printable(sample, sizeof sample, t->sb.first, t->sb.nfirst);
        code = dlock__fail(err, errlen, DLOCK_ETLS,
                           "TLS handshake with %s: the server did not answer "
                           "with TLS: is it a TLS port? (it sent \"%s\")",
                           c->peer, sample);
    } else if (e == SSL_ERROR_ZERO_RETURN ||
               (e == SSL_ERROR_SYSCALL && t->sb.last_errno == 0) ||
               (lib_ssl && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
        code = dlock__fail(err, errlen, DLOCK_EIO, "connection closed by %s%s",
                           c->peer, tls_hint(c, during));
    } else if (e == SSL_ERROR_SYSCALL &&
               (t->sb.last_errno == ECONNRESET || t->sb.last_errno == EPIPE)) {
        code = dlock__fail(err, errlen, DLOCK_EIO, "connection %s by %s%s",
                           t->sb.last_errno == EPIPE ? "closed" : "reset",
                           c->peer, tls_hint(c, during));
    } else if (e == SSL_ERROR_SYSCALL) {
        code = dlock__fail(err, errlen, DLOCK_EIO, "%s %s: %s", pre, c->peer,
                           strerror(t->sb.last_errno));
    } else {
        code = dlock__fail(err, errlen, DLOCK_ETLS, "%s %s: %s", pre, c->peer,
                           ssl_reason("protocol failure"));
    }
    ERR_clear_error();
    return dlock__conn_die(c, code);
}

/* See tls.h. Set up TLS on c's socket, verifying the server as configured
 * in tls (or against host); the handshake is run by dlock__tls_step. */
int dlock__tls_begin(dlock__conn *c, dlock__tls_ctx *tls, const char *host,
                     char *err, size_t errlen)
{
    const char *name = tls->server_name != NULL ? tls->server_name : host;
    int ip = dlock__is_ip_literal(name);
    tls_link *t;
    BIO *bio;

    t = calloc(1, sizeof *t);
    if (t == NULL)
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_ENOMEM,
                                              "TLS with %s: out of memory",
                                              c->peer));
    t->sb.fd = -1;
    c->tls = t;
    c->io = &tls_io; /* from here the connection's bytes are TLS's */
    ERR_clear_error();
    t->ssl = SSL_new(tls->ssl_ctx);
    bio = t->ssl != NULL ? BIO_new(tls->bio_meth) : NULL;
    if (bio == NULL) {
        ERR_clear_error();
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_ENOMEM,
                                              "TLS with %s: out of memory",
                                              c->peer));
    }
    t->sb.fd = c->fd;
    t->client_cert = tls->client_cert;
    BIO_set_data(bio, &t->sb);
    BIO_set_init(bio, 1);
    SSL_set_bio(t->ssl, bio, bio);

    /* SNI carries names only (RFC 6066), never IP literals. */
    if (!ip && SSL_set_tlsext_host_name(t->ssl, name) != 1)
        return tls_fail(c, SSL_ERROR_SSL, 1, err, errlen);
    if (!tls->insecure) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
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
    SSL_set_connect_state(t->ssl);
    return DLOCK_OK;
}

/* See tls.h. */
int dlock__tls_step(dlock__conn *c, short *want, char *err, size_t errlen)
{
    tls_link *t = c->tls;
    int r, e;
    ERR_clear_error();
    r = SSL_connect(t->ssl);
    if (r == 1) {
        t->handshaken = 1;
        return DLOCK_OK;
    }
    e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        *want = POLLIN;
    else if (e == SSL_ERROR_WANT_WRITE)
        *want = POLLOUT;
    else
        return tls_fail(c, e, 1, err, errlen);
    return DLOCK__TLS_AGAIN;
}

/* See tls.h. */
int dlock__tls_timeout(dlock__conn *c, char *err, size_t errlen)
{
    tls_link *t = c->tls;
    ERR_clear_error();
    return dlock__conn_die(
        c, dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                       "TLS handshake with %s: no answer in time%s", c->peer,
                       t->sb.nfirst == 0 ? " (is it a TLS port?)" : ""));
}

/* See tls.h. Run the TLS handshake on c's socket before the deadline,
 * verifying the server as configured in tls (or against host). */
int dlock__tls_start(dlock__conn *c, dlock__tls_ctx *tls, const char *host,
                     int64_t deadline_ms, char *err, size_t errlen)
{
    int r = dlock__tls_begin(c, tls, host, err, errlen);
    while (r == DLOCK_OK) {
        short want = 0, rev = 0;
        r = dlock__tls_step(c, &want, err, errlen);
        if (r != DLOCK__TLS_AGAIN)
            return r;
        if (!dlock__wait_fd(c->fd, want, deadline_ms, &rev))
            return dlock__tls_timeout(c, err, errlen);
        r = DLOCK_OK;
    }
    return r;
}

/* ---- the I/O table entries --------------------------------------------- */

/* Write as much queued output as the link takes now. DLOCK_OK when it
 * all went or the socket is full; an error otherwise. */
static int tls_write(dlock__conn *c, char *err, size_t errlen)
{
    tls_link *t = c->tls;
    while (c->outpos < c->outlen) {
        size_t left = c->outlen - c->outpos;
        /* A retried SSL_write must repeat the same length. */
        size_t len = t->wlen != 0 ? t->wlen : left > INT_MAX ? INT_MAX : left;
        int n, e;
        ERR_clear_error();
        n = SSL_write(t->ssl, c->out + c->outpos, (int)len);
        c->write_wants_read = 0;
        if (n > 0) {
            c->outpos += (size_t)n;
            t->wlen = 0;
            continue;
        }
        e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
            t->wlen = len;
            c->write_wants_read = e == SSL_ERROR_WANT_READ;
            return DLOCK_OK;
        }
        return tls_fail(c, e, 0, err, errlen);
    }
    return DLOCK_OK;
}

/* Read everything that can be read now into the reader, OpenSSL's buffer
 * included: poll() cannot see data OpenSSL already holds. DLOCK_OK, or
 * an error (EOF included: the peer closed). */
static int tls_read(dlock__conn *c, char *err, size_t errlen)
{
    tls_link *t = c->tls;
    char buf[READ_CHUNK];
    for (;;) {
        int n, e, r;
        ERR_clear_error();
        n = SSL_read(t->ssl, buf, sizeof buf);
        if (n > 0) {
            c->read_wants_write = 0;
            r = dlock__conn_feed(c, buf, (size_t)n, err, errlen);
            if (r != DLOCK_OK)
                return r;
            continue;
        }
        e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ) {
            c->read_wants_write = 0;
            return DLOCK_OK;
        }
        if (e == SSL_ERROR_WANT_WRITE) {
            c->read_wants_write = 1;
            return DLOCK_OK;
        }
        return tls_fail(c, e, 0, err, errlen);
    }
}

/* Free the TLS state, with a best-effort close_notify on a healthy
 * link. */
static void tls_close(dlock__conn *c)
{
    tls_link *t = c->tls;
    if (t == NULL)
        return;
    if (t->ssl != NULL) {
        if (t->handshaken && !c->dead && t->wlen == 0) {
            /* One non-blocking close_notify; its outcome does not matter.
             * Not after a failure, nor in the middle of a record. */
            SSL_shutdown(t->ssl);
        }
        SSL_free(t->ssl);
        ERR_clear_error();
    }
    free(t);
    c->tls = NULL;
}

static const dlock__conn_io tls_io = {
    .read = tls_read,
    .write = tls_write,
    .close = tls_close,
};
