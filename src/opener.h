/*
 * opener.h - open the connections one step over several servers (Redlock)
 * lacks, all at once (opener.c). A new connection to a node is a chain of
 * blocking round trips (connect, TLS, AUTH, SELECT, the INFO check), each
 * bounded by the step's deadline; opened one node after the other, a node
 * that accepts the TCP connection but does not answer (stopped, hung,
 * DEBUG SLEEP) would spend the whole deadline before the next node is even
 * asked, and every step would fail although a majority is fine. Here each
 * missing connection is opened by a thread of its own while the step
 * drives the nodes that are ready. Above node.h; used by the engine
 * (src/engine/call.c).
 */
#ifndef DLOCK_OPENER_H
#define DLOCK_OPENER_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"

typedef struct dlock__opener dlock__opener;

/*
 * For each node i of mask (a fixed node set of more than one node: not
 * Sentinel, not Cluster) that has no idle connection now, start a thread
 * that opens one (dlock__node_get_ex, bounded by deadline_ms). Returns
 * NULL when there is nothing to open in parallel (then the caller opens
 * as before), also when no thread could be started.
 */
dlock__opener *dlock__opener_start(dlock__nodeset *ns, uint64_t mask,
                                   int64_t deadline_ms);

/* The nodes o opens (whether finished or not). */
uint64_t dlock__opener_nodes(const dlock__opener *o);

/* A descriptor that is readable when an open finished since the last
 * dlock__opener_ack, for poll(). */
int dlock__opener_fd(const dlock__opener *o);

/* Clear the descriptor's wake-ups. Call it before looking at the opens
 * with dlock__opener_take: one that finishes after the look wakes the
 * next poll. */
void dlock__opener_ack(dlock__opener *o);

/*
 * Node i's open: 0 while it runs; else 1 with its status in *rc and, on
 * success, the connection in *conn (the caller's from now on), or the
 * error in err. Each node is taken once (then it is no longer among
 * dlock__opener_nodes).
 */
int dlock__opener_take(dlock__opener *o, int i, dlock__conn **conn, int *rc,
                       char *err, size_t errlen);

/*
 * Wait for every thread of o (each ends by the deadline given to
 * dlock__opener_start), put the connections nobody took into their
 * node's pool, and free o. NULL: nothing.
 */
void dlock__opener_finish(dlock__opener *o);

#endif /* DLOCK_OPENER_H */
