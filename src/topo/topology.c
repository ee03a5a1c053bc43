/*
 * topology.c - how a client finds its nodes: the seam where a topology
 * fills the node set (node.h). Given servers: one is a standalone lock
 * (quorum 1), several are a Redlock (quorum N/2+1). A redis+sentinel://
 * URL is one node whose master sentinel.c finds and follows. A
 * redis+cluster:// URL is a Redis Cluster (cluster.c): one virtual node,
 * quorum 1, each command routed to the master of its keys' slot.
 */
#include <stdlib.h>

#include "topo/cluster.h"
#include "topo/cluster_delay.h"
#include "topo/ident.h"
#include "topo/node.h"
#include "topo/sentinel.h"

/* Make the TLS context when some node is rediss://. */
static int fill_tls(dlock__nodeset *ns, const dlock_options *o, char *err,
                    size_t errlen)
{
    dlock__tls_opts t = {o->tls_ca_file,   o->tls_ca_dir,   o->tls_server_name,
                         o->tls_cert_file, o->tls_key_file, o->tls_insecure};
    int i, need_tls = 0;
    for (i = 0; i < ns->n; i++)
        if (ns->node[i].ep.kind == DLOCK__EP_TLS)
            need_tls = 1;
    if (!need_tls)
        return DLOCK_OK;
    return dlock__tls_ctx_new(&ns->tls, &t, err, errlen);
}

/* See node.h. The options were checked by dlock_client_new. */
int dlock__topology_fill(dlock__nodeset *ns, const dlock_options *o,
                         dlock__stats *stats, char *err, size_t errlen)
{
    int i, rc;
    ns->connect_timeout_ms = o->connect_timeout_ms;
    ns->pool_size = o->pool_size;
    ns->stats = stats;
    ns->wait_replicas = o->wait_replicas;
    ns->wait_timeout_ms = o->wait_replicas_timeout_ms;
    ns->lock_delay_ms = o->lock_delay_ms;
    for (i = 0; i < (int)o->nservers; i++) {
        if (!dlock__url_is_sentinel(o->servers[i]))
            continue;
        if (o->nservers > 1)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "a redis+sentinel:// URL must be the only "
                               "server (Redlock over Sentinel deployments "
                               "is not supported)");
        if (ns->lock_delay_ms < 0)
            ns->lock_delay_ms = DLOCK__SENTINEL_LOCK_DELAY_MS;
        rc = dlock__sentinel_fill(ns, o, err, errlen);
        if (rc != DLOCK_OK)
            return rc;
        return fill_tls(ns, o, err, errlen);
    }
    if (ns->lock_delay_ms < 0)
        ns->lock_delay_ms = 0;
    for (i = 0; i < (int)o->nservers; i++) {
        if (!dlock__cluster_is_url(o->servers[i]))
            continue;
        /* A cluster is one server list on its own: its seeds are in
         * the one URL. */
        if (o->nservers != 1)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "a redis+cluster:// URL must be the only "
                               "server (list the seed nodes in it: "
                               "redis+cluster://HOST:PORT,HOST:PORT)");
        rc = dlock__cluster_fill(ns, o, err, errlen);
        if (rc != DLOCK_OK)
            return rc;
        /* The lock-delay per master: only without WAIT (with it, every
         * grant a promoted replica could have missed was refused). */
        if (ns->lock_delay_ms > 0 && ns->wait_replicas == 0)
            ns->table_check = dlock__cluster_table_check;
        return fill_tls(ns, o, err, errlen);
    }
    ns->n = (int)o->nservers;
    ns->kind = ns->n > 1 ? DLOCK__TOPO_REDLOCK : DLOCK__TOPO_STANDALONE;
    ns->quorum = ns->n / 2 + 1;
    ns->node = calloc(o->nservers, sizeof *ns->node); /* 1..DLOCK_MAX_SERVERS */
    if (ns->node == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    for (i = 0; i < ns->n; i++) {
        rc = dlock__node_init(&ns->node[i], o->servers[i], o->username,
                              o->password, o->pool_size, err, errlen);
        if (rc != DLOCK_OK)
            return rc;
    }
    if (ns->kind == DLOCK__TOPO_REDLOCK) {
        rc = dlock__ident_check_urls(ns, err, errlen);
        if (rc != DLOCK_OK)
            return rc;
    }
    return fill_tls(ns, o, err, errlen);
}

/* See node.h. */
void dlock__topology_free(dlock__nodeset *ns)
{
    dlock__cluster_free(ns);
    dlock__nodeset_free(ns);
}
