/*
 * conn.h - one connection to one Redis server, as the layers above use
 * it: queue commands, drive the socket from poll(), take replies, or do a
 * blocking round trip. Opened by dlock__conn_open() (net.h). Implemented
 * in conn.c over an I/O table (conn_io.h) that plain sockets and TLS
 * fill. Above util.h only.
 */
#ifndef DLOCK_CONN_H
#define DLOCK_CONN_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct dlock__conn dlock__conn;

/* Close and free. Accepts NULL. Reads what has arrived first, so that
 * the close is a FIN, not a reset (see conn.c). */
void dlock__conn_close(dlock__conn *c);

/* Queue a command (argv form, binary safe; argvlen NULL: strlen of each)
 * for sending. It is written by
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

/* Give up on the reply to the request in flight: the connection can be
 * used at once, and dlock__conn_pop_reply() drops that reply when it
 * comes (Redis answers in order). Returns how many are unread now. */
int dlock__conn_abandon(dlock__conn *c);

/* dlock__conn_abandon() for a script request sent by SHA (EVALSHA) whose
 * effect must not be lost: argv is its EVAL form (the source instead of
 * the SHA). When the dropped answer is NOSCRIPT (script cache flushed,
 * server restarted), the EVAL is queued on this connection at once, and
 * its own answer dropped too. DLOCK_ENOMEM: abandoned without that. */
int dlock__conn_abandon_eval(dlock__conn *c, int argc, const char **argv,
                             const size_t *argvlen);

/* 1 while an abandoned request may still have to be sent again (see
 * dlock__conn_abandon_eval), so the connection should not be closed
 * before dlock__conn_settle(). */
int dlock__conn_unsettled(const dlock__conn *c);

/* Read (and resend where needed) until no abandoned request may have to
 * be sent again, or the monotonic deadline passes (0: only what can be
 * done without waiting). Before closing a connection that is unsettled. */
void dlock__conn_settle(dlock__conn *c, int64_t deadline_ms);

/*
 * One step of a round trip, without waiting: do the I/O revents allows
 * (0: none), then take the replies that are complete into
 * replies[*got..n) (*got counts them). Returns 1 once all n are there
 * and the queue is written, 0 while more is to come (poll
 * dlock__conn_events and call again), or an error (err set; the
 * replies taken stay the caller's to free). A peer that answered and
 * then closed: what is complete counts first.
 */
int dlock__conn_collect(dlock__conn *c, int n, redisReply **replies, int *got,
                        short revents, char *err, size_t errlen);

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

#endif /* DLOCK_CONN_H */
