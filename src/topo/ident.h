/*
 * ident.h - are two nodes of a Redlock one Redis server? (ident.c) A
 * majority counted over entries that are the same server is no majority:
 * `A A DEAD` would be "2 of 3" from one server. Two checks: the URLs at
 * client creation (same host and port, or the same socket path, whatever
 * the db), and the server's run_id (INFO server), learned on a node's
 * first connection, for what URLs cannot tell (127.0.0.1 and localhost,
 * a unix socket and the TCP port of one server). Above the node set
 * (node.h) and the connection (conn.h); the engine (call.c) asks and reads the
 * answers.
 */
#ifndef DLOCK_IDENT_H
#define DLOCK_IDENT_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "io/conn.h"
#include "topo/node.h"

/* Refuse a Redlock set in which two entries name the same place: the
 * same host (IP literals compared as addresses, names without case) and
 * port, or the same unix socket path, whatever the scheme or db.
 * DLOCK_OK, or DLOCK_EINVAL with a message naming both entries. */
int dlock__ident_check_urls(const dlock__nodeset *ns, char *err, size_t errlen);

/* 1 when node i's run_id is still to be learned (Redlock only): the next
 * request to it asks first (dlock__ident_ask). */
int dlock__ident_wanted(const dlock__nodeset *ns, int i);

/* Queue "INFO server" on conn, before the request that follows it: its
 * answer comes first. DLOCK_OK or DLOCK_ENOMEM. */
int dlock__ident_ask(dlock__conn *conn);

/* Take node i's answer to "INFO server": record its run_id and compare
 * it with every other node's. An error answer (INFO refused by an ACL or
 * renamed) leaves the node compared by its URL only. */
void dlock__ident_learn(dlock__nodeset *ns, int i, const redisReply *r);

/* 1 when two nodes were found to be one server, with the message (naming
 * both) in err when err is not NULL; 0 otherwise. Once found, the node set
 * stays refused: every operation but an undo fails with DLOCK_EINVAL. */
int dlock__ident_refused(const dlock__nodeset *ns, char *err, size_t errlen);

#endif /* DLOCK_IDENT_H */
