/*
 * tls.h - TLS for connections (tls.c): the client's TLS context, made
 * once per client for its rediss:// servers, and starting TLS on a
 * connected socket (for net.c). Above conn.h.
 */
#ifndef DLOCK_TLS_H
#define DLOCK_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "io/conn.h"

/* TLS settings (copied from dlock_options). */
typedef struct dlock__tls_opts {
    const char *ca_file;
    const char *ca_dir;
    const char *server_name;
    const char *cert_file;
    const char *key_file;
    int insecure;
} dlock__tls_opts;

/* An OpenSSL SSL_CTX and our socket BIO method. */
typedef struct dlock__tls_ctx dlock__tls_ctx;

/* Build the TLS context (loads CA / client cert). DLOCK_OK or DLOCK_ETLS
 * with a readable message. */
int dlock__tls_ctx_new(dlock__tls_ctx **out, const dlock__tls_opts *opts,
                       char *err, size_t errlen);
void dlock__tls_ctx_free(dlock__tls_ctx *ctx);

/* Switch connection c (connected socket, nothing sent yet) to TLS and run
 * the handshake before the deadline, verifying the server name from the
 * context's options, else host. DLOCK_OK, or DLOCK_ETLS (the message says
 * which check failed), DLOCK_EIO, DLOCK_ETIMEDOUT, DLOCK_ENOMEM with c
 * dead. */
int dlock__tls_start(dlock__conn *c, dlock__tls_ctx *tls, const char *host,
                     int64_t deadline_ms, char *err, size_t errlen);

/* dlock__tls_start in steps, for an open that must not block: begin
 * switches c to TLS (DLOCK_OK, or an error with c dead); each step runs
 * the handshake as far as the socket allows: DLOCK_OK when done,
 * DLOCK__TLS_AGAIN with *want (POLLIN or POLLOUT) to poll for, or an
 * error with c dead. dlock__tls_timeout: the deadline passed during the
 * handshake (DLOCK_ETIMEDOUT, c dead, the message says so). */
#define DLOCK__TLS_AGAIN 1
int dlock__tls_begin(dlock__conn *c, dlock__tls_ctx *tls, const char *host,
                     char *err, size_t errlen);
int dlock__tls_step(dlock__conn *c, short *want, char *err, size_t errlen);
int dlock__tls_timeout(dlock__conn *c, char *err, size_t errlen);

#endif /* DLOCK_TLS_H */
