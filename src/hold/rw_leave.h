/*
 * rw_leave.h - a waiting writer that gives up takes its writer-waiting
 * mark off the read-write lock it waited for (rw_leave.c,
 * src/lua/rw_leave.lua), so that new readers are kept out only while a
 * writer still waits. Above core.h and held.h.
 */
#ifndef DLOCK_RW_LEAVE_H
#define DLOCK_RW_LEAVE_H

#include "hold/core.h"
#include "hold/held.h"

/* h's owner gave up waiting for h's name as a writer: remove its mark
 * ('#w:<owner>') on every node, waking readers the mark kept out when no
 * other writer waits. Best effort within the command timeout: a mark
 * not removed runs out by itself (the readers' lease + 1 s). */
void dlock__rw_leave(dlock_client *c, const dlock__held *h);

#endif /* DLOCK_RW_LEAVE_H */
