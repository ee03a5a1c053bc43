/*
 * chancheck.h - may this client's user use the lock's pub/sub channels?
 * (chancheck.c; a finding of dlock_client_check in inspect.c). Above the
 * node set and the client state (core.h).
 */
#ifndef DLOCK_CHANCHECK_H
#define DLOCK_CHANCHECK_H

#include <stddef.h>

#include "hold/core.h"

/*
 * Ask node nd (one of the node set's, or a cluster's master) whether this client's user may publish on the lock
 * channels (a PUBLISH of an empty message on "<prefix>:check", which no
 * lock uses). Returns 1 and a finding in out (len bytes) when the server
 * refuses it (NOPERM: releases are then not announced and waiters
 * poll); 0 when it is permitted or the server could not be asked (the
 * caller's other checks report an unreachable server).
 */
int dlock__check_channels(dlock_client *c, dlock__node *nd, char *out,
                          size_t len);

#endif /* DLOCK_CHANCHECK_H */
