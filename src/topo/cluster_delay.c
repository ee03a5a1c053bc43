/*
 * cluster_delay.c - the lock-delay per master of a Redis Cluster (see
 * cluster_delay.h for its place).
 *
 * What a client can tell in a cluster: every connection it opens to a
 * master (only while a lock-delay is set: one INFO round trip per new
 * connection) says the master's run_id, master_replid and master_replid2.
 * A master this client saw before with another run_id or replid has
 * restarted or been demoted and promoted again; a master seen for the
 * first time whose master_replid2 is the replid of another master this
 * client saw took over that master's replication history: a replica
 * promoted in a failover (CLUSTER FAILOVER or a master's death; the two
 * look alike from here). Either may have lost grants that never reached
 * it, so new grants on that master wait for the delay; the other
 * masters' slots do not. A slot migration moves keys with their data and
 * starts nothing. The node table's identity fields are node.c's (under
 * each node's mutex); this file only reads them and asks node.c to note.
 */
#include <string.h>

#include "topo/cluster.h"
#include "topo/cluster_delay.h"
#include "io/conn.h"
#include "io/net.h"

/* 1 when replid (a promoted master's master_replid2) is the replication
 * id this client last saw on another master of the table than nd. */
static int continues_known(dlock__nodeset *ns, const dlock__node *nd,
                           const char *replid)
{
    int i, n = dlock__cluster_nnodes(ns), found = 0;
    if (replid[0] == '\0' || strspn(replid, "0") == strlen(replid))
        return 0; /* never promoted */
    for (i = 0; i < n && !found; i++) {
        dlock__node *o = dlock__cluster_node(ns, i);
        if (o == nd)
            continue;
        pthread_mutex_lock(&o->mu);
        found = o->replid[0] != '\0' && strcmp(o->replid, replid) == 0;
        pthread_mutex_unlock(&o->mu);
    }
    return found;
}

/* See cluster_delay.h. */
void dlock__cluster_table_check(dlock__nodeset *ns, dlock__node *nd,
                                const dlock__srvinfo *id)
{
    atomic_store(&nd->replica, id->role == DLOCK__ROLE_REPLICA);
    if (id->role == DLOCK__ROLE_MASTER)
        dlock__node_note(ns, nd, id, continues_known(ns, nd, id->replid2));
}

/* See cluster_delay.h. */
uint64_t dlock__delayed_for(dlock__nodeset *ns, const char *key, size_t keylen,
                            int64_t *left_ms)
{
    int64_t until, now;
    int o;
    if (ns->cluster == NULL)
        return dlock__nodes_delayed(ns, left_ms);
    if (left_ms != NULL)
        *left_ms = 0;
    if (ns->table_check == NULL)
        return 0;
    o = dlock__cluster_lookup(ns, dlock__key_slot(key, keylen));
    if (o < 0)
        return 0;
    until = atomic_load(&dlock__cluster_node(ns, o)->delay_until_ms);
    now = dlock__now_ms();
    if (until <= now)
        return 0;
    if (left_ms != NULL)
        *left_ms = until - now;
    return 1;
}
