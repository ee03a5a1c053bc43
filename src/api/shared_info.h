/*
 * shared_info.h - what the servers say about a semaphore or a read-write
 * lock's readers (shared_info.c): dlock_shared_inspect(), and the lookup
 * of one permit or reader that dlock_lock_adopt() (inspect.c) uses.
 */
#ifndef DLOCK_SHARED_INFO_H
#define DLOCK_SHARED_INFO_H

#include <stdint.h>

#include "dlock.h"

/*
 * Find OWNER's permit or read lease of NAME on every server: *kind is
 * DLOCK__KIND_PERMIT or DLOCK__KIND_READ when a majority has it (its
 * least lease left in *ttl_ms, its token in *token), else -2 when NAME
 * is a semaphore and -1 when it is not. Returns
 * DLOCK_OK (also when not found), or DLOCK_NO_QUORUM / an error class
 * when too few servers answered (message set).
 */
int dlock__shared_owner(dlock_client *c, const char *name, const char *owner,
                        int *kind, int64_t *ttl_ms, uint64_t *token);

#endif /* DLOCK_SHARED_INFO_H */
