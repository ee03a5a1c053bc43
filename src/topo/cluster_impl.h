/*
 * cluster_impl.h - the inside of the Redis Cluster topology, shared by
 * cluster.c (the node table, the slot map, redirections) and
 * cluster_refresh.c (the map's refresh as steps). Private to those two.
 */
#ifndef DLOCK_CLUSTER_IMPL_H
#define DLOCK_CLUSTER_IMPL_H

#include <stdatomic.h>

#include "topo/cluster.h"

#define NO_OWNER 0xff
#define REFRESH_GAP_MS 100

struct dlock__cluster {
    pthread_mutex_t mu; /* adding a node */
    dlock__node node[DLOCK_MAX_SERVERS];
    _Atomic int n;
    dlock__endpoint tmpl; /* kind, user and password of every node */
    _Atomic unsigned char owner[DLOCK__CLUSTER_SLOTS];
    _Atomic int loaded;
    _Atomic int stale;
    _Atomic int busy;     /* a refresh runs (one at a time) */
    int64_t refreshed_ms; /* by the refresh holding busy */
};

/* Fill map from a CLUSTER SHARDS reply / a CLUSTER SLOTS reply ({start,
 * end, {host, port, id...}, replicas...} per range) that node from
 * gave. DLOCK_OK or DLOCK_EPROTO. */
int dlock__cluster_read_shards(dlock__nodeset *ns, const redisReply *r,
                               const dlock__node *from, unsigned char *map);
int dlock__cluster_read_slots(dlock__nodeset *ns, const redisReply *r,
                              const dlock__node *from, unsigned char *map);

#endif /* DLOCK_CLUSTER_IMPL_H */
