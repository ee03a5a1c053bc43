/*
 * ask.h - one question to one server as steps that never block
 * (ask.c): open a connection to an endpoint (or use one given), ask one
 * command, collect its reply. The io tier's piece of a Sentinel locate
 * and of a node's check: the engine drives it beside its calls, a
 * blocking caller waits for it (dlock__asking_wait). Above net.h.
 */
#ifndef DLOCK_ASK_H
#define DLOCK_ASK_H

#include <stddef.h>
#include <stdint.h>

#include "io/net.h"

typedef struct dlock__asking dlock__asking;

/*
 * Ask argv (argc words) of ep's server before the monotonic deadline:
 * on conn when given (then the asking's, closed by its free), else on a
 * connection opened now (connect, TLS, login, the command queued behind
 * the login: one round trip). Returns DLOCK__OPEN_AGAIN (*out set: poll
 * what dlock__asking_poll says and call dlock__asking_step with the
 * revents until it ends), DLOCK_OK (*out set, the reply there) or an
 * error (err set, *out NULL, everything freed). The time is the
 * caller's to watch: at dlock__asking_deadline, dlock__asking_timeout
 * gives the error (the open's, or "<peer> did not answer in time").
 */
int dlock__asking_start(dlock__asking **out, const dlock__endpoint *ep,
                        dlock__tls_ctx *tls, dlock__conn *conn, int argc,
                        const char **argv, int64_t deadline_ms, char *err,
                        size_t errlen);
void dlock__asking_poll(const dlock__asking *a, int *fd, short *events);
int dlock__asking_step(dlock__asking *a, short revents, char *err,
                       size_t errlen);
int dlock__asking_timeout(dlock__asking *a, char *err, size_t errlen);
int64_t dlock__asking_deadline(const dlock__asking *a);

/* 1 once the connection is made (the question is then the server's to
 * answer; a failure before that is the open's). */
int dlock__asking_opened(const dlock__asking *a);

/* Once DLOCK_OK: take the reply (an error reply is a reply) / the
 * connection (NULL once taken). */
redisReply *dlock__asking_reply(dlock__asking *a);
dlock__conn *dlock__asking_conn(dlock__asking *a);

/* Close and free what was not taken. Accepts NULL. */
void dlock__asking_free(dlock__asking *a);

/* The blocking driver: wait for a's steps (rc: what start returned)
 * until it ends; the final status. */
int dlock__asking_wait(dlock__asking *a, int rc, char *err, size_t errlen);

#endif /* DLOCK_ASK_H */
