/*
 * net.h - opening a connection to a server (net.c): resolve, connect,
 * TLS, AUTH and SELECT, all bounded by one deadline. The top of the
 * transport; node.c and notify.c call it.
 */
#ifndef DLOCK_NET_H
#define DLOCK_NET_H

#include <stddef.h>
#include <stdint.h>

#include "io/conn.h"
#include "io/tls.h"
#include "base/url.h"

/*
 * Open a connection to ep and make it ready for commands, all before the
 * monotonic deadline: non-blocking connect (every address getaddrinfo
 * gives, in turn), TCP_NODELAY and SO_KEEPALIVE on TCP, CLOEXEC always,
 * the TLS handshake with verification for DLOCK__EP_TLS (tls must then be
 * non-NULL; server_name from the options, else ep->host), then AUTH
 * [user] password and SELECT db when configured (pipelined).
 * A failed AUTH fails the open with DLOCK_EAUTH; a SELECT the ACL forbids
 * with DLOCK_EREFUSED. Errors: DLOCK_EIO (refused,
 * reset...), DLOCK_ETIMEDOUT, DLOCK_ETLS (handshake, verification: the
 * message says which check failed), DLOCK_EAUTH, DLOCK_EPROTO (not a Redis
 * peer), DLOCK_ESERVER, DLOCK_ENOMEM. Messages name ep->display.
 */
int dlock__conn_open(dlock__conn **out, const dlock__endpoint *ep,
                     dlock__tls_ctx *tls, int64_t deadline_ms, char *err,
                     size_t errlen);

/*
 * dlock__conn_open in steps, for an open that must not block the caller.s
 * other work (the engine opens a Redlock's connections so). start checks
 * ep, queues AUTH / SELECT, looks the name up (an IP literal at once; a
 * name on the resolver's thread, waited for until the deadline) and starts
 * the connect (a unix socket's finishes here). It returns
 * DLOCK__OPEN_AGAIN (*out set: poll what dlock__opening_poll says, then
 * call dlock__opening_step with the revents, 0 when none), DLOCK_OK (the
 * connection is ready: dlock__opening_take it) or an error (err set).
 * Commands may be queued on the connection (dlock__opening_conn) from
 * start on: they follow the login, and their replies come after its.
 * dlock__opening_timeout: the deadline passed, the error and message
 * dlock__conn_open gives then. dlock__opening_free closes what was not
 * taken; accepts NULL. *out may be set with an error: free it.
 */
#define DLOCK__OPEN_AGAIN 1
typedef struct dlock__opening dlock__opening;
int dlock__opening_start(dlock__opening **out, const dlock__endpoint *ep,
                         dlock__tls_ctx *tls, int64_t deadline_ms, char *err,
                         size_t errlen);
void dlock__opening_poll(const dlock__opening *o, int *fd, short *events);
int dlock__opening_step(dlock__opening *o, short revents, char *err,
                        size_t errlen);
int dlock__opening_timeout(dlock__opening *o, char *err, size_t errlen);
dlock__conn *dlock__opening_conn(const dlock__opening *o);
dlock__conn *dlock__opening_take(dlock__opening *o);
void dlock__opening_free(dlock__opening *o);

/* The name resolver (getaddrinfo; a unit test swaps in a slow one).
 * Lookups of names other than IP literals run on a helper thread and are
 * bounded by the connect deadline (ETIMEDOUT "resolve HOST: ..."). */
struct addrinfo;
typedef int (*dlock__resolve_fn)(const char *, const char *,
                                 const struct addrinfo *, struct addrinfo **);
extern dlock__resolve_fn dlock__resolver;

#endif /* DLOCK_NET_H */
