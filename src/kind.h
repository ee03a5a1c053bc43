/*
 * kind.h - the message of an operation refused because the name's key
 * holds another kind of value (kind.c): a semaphore where a lock was
 * asked for, or a value dlock did not write at all (another tool's key
 * under dlock's prefix), which dlock never touches. Above core.h.
 */
#ifndef DLOCK_KIND_H
#define DLOCK_KIND_H

#include "core.h"

/* A lock's acquire of NAME failed with rc: when the servers said
 * WRONGTYPE, ask them what the key holds (kind.lua) and return
 * DLOCK_EINVAL saying so ("is a semaphore", or a value not dlock's);
 * other failures keep rc and their message. */
int dlock__lock_kind_error(dlock_client *c, const char *name, int rc);

/* DLOCK_EINVAL: WHAT (e.g. "read-write lock") NAME cannot be had, its
 * key holds a Redis TYPE that dlock did not write (left as it is). */
int dlock__foreign_error(dlock_client *c, const char *what, const char *name,
                         const char *type);

#endif /* DLOCK_KIND_H */
