/*
 * internal.h - private declarations shared by the files of libdlock.
 *
 * Layers, bottom up:
 *   util.c       monotonic clock, random bytes, error-message helpers
 *   url.c        server URL -> dlock__endpoint
 *   transport.c  dlock__conn: one non-blocking connection (TCP, unix
 *                socket or TLS) with hiredis's reader beneath it; AUTH and
 *                SELECT on open; poll-driven so one thread can drive many
 *   node.c       per-server connection pool and the fan-out executor that
 *                runs one script on every server in parallel
 *   lock.c       the lock: acquire / release / extend / fencing
 *   notify.c     the subscriber thread and waiter coalescing
 *   watchdog.c   the lease renewer thread
 *   client.c     dlock_client: options, lifetime, stats, error messages
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

#define DLOCK__ERRLEN 256

/* ---- util.c ------------------------------------------------------------ */

/* CLOCK_MONOTONIC in milliseconds / microseconds. */
int64_t dlock__now_ms(void);
int64_t dlock__now_us(void);

/* Fill buf with len bytes from getrandom(2). 0 or -1 (errno set). */
int dlock__random_bytes(void *buf, size_t len);

/* A uniformly random value in [0, bound) (bound > 0), from getrandom. */
uint64_t dlock__random_below(uint64_t bound);

/* snprintf into err (errlen bytes) when err is not NULL; returns code so
 * callers can write "return dlock__fail(err, n, DLOCK_EIO, ...)". */
int dlock__fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sleep until the monotonic deadline or until wake_fd becomes readable
 * (wake_fd < 0: none). Returns 1 if woken by the fd, 0 on timeout. */
int dlock__sleep_until(int64_t deadline_ms, int wake_fd);

/* ---- url.c ------------------------------------------------------------- */

typedef enum dlock__ep_kind {
    DLOCK__EP_TCP,
    DLOCK__EP_TLS,
    DLOCK__EP_UNIX
} dlock__ep_kind;

/* One parsed server address. Strings are malloc'd and owned. */
typedef struct dlock__endpoint {
    dlock__ep_kind kind;
    char *host;     /* TCP/TLS: name or IP literal (IPv6 without []) */
    int port;       /* TCP/TLS, default 6379 */
    char *path;     /* UNIX */
    char *user;     /* ACL user, NULL for none */
    char *password; /* NULL for none; never printed */
    int db;         /* SELECT index, 0 by default */
    char *display;  /* "host:port" / "[v6]:port" / path, for messages */
} dlock__endpoint;

/*
 * Parse a server URL:
 *   redis://[user[:password]@]host[:port][/db]
 *   rediss://... (TLS)
 *   unix:///absolute/path[?db=N]   (user/password also allowed:
 *   unix://[user[:password]@]/path)
 * host may be [IPv6]. User and password are percent-decoded. Rejects
 * empty hosts, ports outside 1..65535, db outside 0..2^31-1, unknown
 * schemes, trailing garbage. Returns DLOCK_OK or DLOCK_EINVAL /
 * DLOCK_ENOMEM with a message in err (never containing the password).
 * On failure *ep is left cleared.
 */
int dlock__url_parse(dlock__endpoint *ep, const char *url, char *err,
                     size_t errlen);

/* Free the strings of ep and zero it. Accepts a zeroed endpoint. */
void dlock__endpoint_clear(dlock__endpoint *ep);

/* ---- transport.c ------------------------------------------------------- */

/* TLS settings (copied from dlock_options). */
typedef struct dlock__tls_opts {
    const char *ca_file;
    const char *ca_dir;
    const char *server_name;
    const char *cert_file;
    const char *key_file;
    int insecure;
} dlock__tls_opts;

/* An OpenSSL SSL_CTX, made once per client for its rediss:// servers. */
typedef struct dlock__tls_ctx dlock__tls_ctx;

/* Build the TLS context (loads CA / client cert). DLOCK_OK or DLOCK_ETLS
 * with a readable message. */
int dlock__tls_ctx_new(dlock__tls_ctx **out, const dlock__tls_opts *opts,
                       char *err, size_t errlen);
void dlock__tls_ctx_free(dlock__tls_ctx *ctx);

typedef struct dlock__conn dlock__conn;

/*
 * Open a connection to ep and make it ready for commands, all before the
 * monotonic deadline: non-blocking connect (every address getaddrinfo
 * gives, in turn), TCP_NODELAY and SO_KEEPALIVE on TCP, CLOEXEC always,
 * the TLS handshake with verification for DLOCK__EP_TLS (tls must then be
 * non-NULL; server_name from the options, else ep->host), then AUTH
 * [user] password and SELECT db when configured (pipelined).
 * A failed AUTH fails the open with DLOCK_EAUTH. Errors: DLOCK_EIO (refused,
 * reset...), DLOCK_ETIMEDOUT, DLOCK_ETLS (handshake, verification: the
 * message says which check failed), DLOCK_EAUTH, DLOCK_EPROTO (not a Redis
 * peer), DLOCK_ESERVER, DLOCK_ENOMEM. Messages name ep->display.
 */
int dlock__conn_open(dlock__conn **out, const dlock__endpoint *ep,
                     dlock__tls_ctx *tls, int64_t deadline_ms, char *err,
                     size_t errlen);

/* Close and free. Accepts NULL. */
void dlock__conn_close(dlock__conn *c);

/* Queue a command (argv form, binary safe) for sending. It is written by
 * dlock__conn_progress() / dlock__conn_roundtrip(). DLOCK_OK or
 * DLOCK_ENOMEM. */
int dlock__conn_append_argv(dlock__conn *c, int argc, const char **argv,
                            const size_t *argvlen);

/* The socket, for poll(). */
int dlock__conn_fd(const dlock__conn *c);

/* The poll events the connection waits for now: POLLOUT while output is
 * queued (or TLS wants to write), POLLIN otherwise. */
short dlock__conn_events(const dlock__conn *c);

/* Do what can be done without blocking after poll() returned revents for
 * this connection: write queued output, read what arrived into the reply
 * reader. DLOCK_OK, or an error (the connection is then dead: close it). */
int dlock__conn_progress(dlock__conn *c, short revents, char *err,
                         size_t errlen);

/* Take one complete reply if the reader has one: 1 and *out set (free it
 * with freeReplyObject), 0 when none yet, < 0 on a protocol error (dead). */
int dlock__conn_pop_reply(dlock__conn *c, redisReply **out, char *err,
                          size_t errlen);

/* 1 when nothing is queued for writing. */
int dlock__conn_flushed(const dlock__conn *c);

/*
 * Blocking convenience over the above: write everything queued and
 * collect n replies into replies[0..n-1], before the monotonic deadline.
 * cancel_fd (or -1) is polled too: if it becomes readable the call returns
 * DLOCK_CANCELED (the connection is then dead: its replies are unread).
 * On any failure the replies already collected are freed and set NULL.
 * Error replies (REDIS_REPLY_ERROR) are replies, not failures.
 */
int dlock__conn_roundtrip(dlock__conn *c, int n, redisReply **replies,
                          int64_t deadline_ms, int cancel_fd, char *err,
                          size_t errlen);

/* Short description of the peer (ep->display) for messages. */
const char *dlock__conn_peer(const dlock__conn *c);

#endif /* DLOCK_INTERNAL_H */
