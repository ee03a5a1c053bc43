/*
 * conn_io.h - the inside of a connection, shared by the three files of
 * the transport only (conn.c, tls.c, net.c): the struct, and the I/O
 * table through which its bytes move. conn.c fills the table with plain
 * socket I/O; tls.c replaces it with TLS's when it starts a handshake. No
 * function asks "is this TLS?": it calls the table (hiredis does the same
 * with redisContextFuncs).
 */
#ifndef DLOCK_CONN_IO_H
#define DLOCK_CONN_IO_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct dlock__conn dlock__conn; /* as in conn.h */

/* How a connection's bytes move. read and write do what the socket
 * allows now and return DLOCK_OK (also when it would block), or an error
 * with the connection dead (dlock__conn_die) and a message in err. */
typedef struct dlock__conn_io {
    /* Read what can be read now into the reply reader
     * (dlock__conn_feed). */
    int (*read)(dlock__conn *c, char *err, size_t errlen);
    /* Write queued output, out[outpos..outlen), advancing outpos. */
    int (*write)(dlock__conn *c, char *err, size_t errlen);
    /* Free the transport's own state (c->tls) before the socket closes;
     * NULL when there is none. Not an I/O path: no "if TLS" in close. */
    void (*close)(dlock__conn *c);
} dlock__conn_io;

struct dlock__conn {
    int fd;
    const dlock__conn_io *io;
    void *tls; /* tls.c's state, NULL on plain connections */
    redisReader *reader;
    char *out; /* queued output: out[outpos..outlen) */
    size_t outpos, outlen, outcap;
    int read_wants_write; /* a read must first write (TLS) */
    int write_wants_read; /* a write must first read (TLS) */
    int dead;
    int tcp;        /* TCP or TLS (not a unix socket) */
    uint64_t nread; /* bytes of reply stream received */
    char *peer;     /* ep->display */
    int stale;      /* replies still to come that nobody waits for */
    /* The requests behind those replies, oldest first: one given up on
     * may carry its EVAL form, sent when its answer is NOSCRIPT. */
    struct dlock__stale *stale_head, *stale_tail;
    /* The reply reader's object functions: hiredis's own, wrapped by
     * conn.c to refuse replies above its caps (see conn.c). */
    redisReplyObjectFunctions fns;
    redisReplyObjectFunctions *base; /* hiredis's defaults */
    char refused[96]; /* why a reply was refused, "" when none was */
};

/* A new connection without a socket yet (fd -1, plain I/O), named peer
 * in messages. NULL when out of memory. */
dlock__conn *dlock__conn_new(const char *peer);

/* Mark the connection dead and pass the code through. */
int dlock__conn_die(dlock__conn *c, int code);

/* Hand n received bytes to the reply reader. DLOCK_OK, or the reader's
 * failure (the connection is then dead). */
int dlock__conn_feed(dlock__conn *c, const char *buf, size_t n, char *err,
                     size_t errlen);

#endif /* DLOCK_CONN_IO_H */
