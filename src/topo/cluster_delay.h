/*
 * cluster_delay.h - the lock-delay per master of a Redis Cluster
 * (cluster_delay.c). A cluster's node set is one virtual node, so the
 * lock-delay of node.h (per node of the set) would stop every slot when
 * one master changed; here each master of the cluster's table keeps its
 * own identity and delay, and an acquire asks about the master serving
 * its key. Above cluster.h and node.h.
 */
#ifndef DLOCK_CLUSTER_DELAY_H
#define DLOCK_CLUSTER_DELAY_H

#include <stddef.h>
#include <stdint.h>

#include "topo/node.h"

/*
 * The check of a new connection to a node of a cluster's table (set as
 * ns->table_check when the lock-delay is on; node_open.c asks INFO
 * server replication behind the login of every new connection to such
 * a node and hands the answer id here). A master's identity is
 * remembered on its node; its lock-delay starts when the identity
 * changed since this client last saw it there (a restart, perhaps
 * without its data), or when it is seen for the first time and its
 * master_replid2 is the replication id this client saw on another
 * master (it is a replica promoted in a failover of a master this
 * client talked to). A replica's node is marked (it keeps no idle
 * connection).
 */
void dlock__cluster_table_check(dlock__nodeset *ns, dlock__node *nd,
                                const dlock__srvinfo *id);

/*
 * The nodes of ns whose lock-delay runs, as dlock__nodes_delayed, for a
 * lock whose key is key (keylen bytes): in a cluster, bit 0 (the virtual
 * node) when the master the slot map names for the key's slot is in its
 * delay, else 0 (no I/O: a map not loaded yet delays nothing). *left_ms
 * (when not NULL) is the delay still to run.
 */
uint64_t dlock__delayed_for(dlock__nodeset *ns, const char *key, size_t keylen,
                            int64_t *left_ms);

#endif /* DLOCK_CLUSTER_DELAY_H */
