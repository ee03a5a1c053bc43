/*
 * health.h - the deployment as the servers describe it (health.c):
 * dlock_client_topology() is its API; dlock_client_check() (inspect.c)
 * appends its warnings. Above the node set, the engine and
 * sentinel.h; beside inspect.c.
 */
#ifndef DLOCK_HEALTH_H
#define DLOCK_HEALTH_H

#include <stddef.h>

#include "hold/core.h"

/* Append one line per warning about the deployment to buf (len bytes,
 * NUL-terminated, what fits): replicas without wait_replicas, fewer
 * replicas than wait_replicas, a failover or restart seen recently, a
 * sentinel that does not answer or disagrees. Returns the number of
 * warnings. */
int dlock__health_warnings(dlock_client *c, char *buf, size_t len);

#endif /* DLOCK_HEALTH_H */
