/*
 * th_cluster.c - the Cluster tests' URL and node lookups (see
 * th_cluster.h for each one's contract).
 */
#include "th_cluster.h"

#include <stdio.h>
#include <string.h>

void th_cluster_url(const th_cluster *c, int seed_a, int seed_b, char *buf,
                    size_t len)
{
    snprintf(buf, len, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d",
             c->nodes[seed_a].port, c->nodes[seed_b].port);
}

th_server *th_cluster_replica(th_cluster *c, int master_port)
{
    th_server *r = th_cluster_node(c, th_cluster_replica_port(c, master_port));
    if (r == NULL)
        fprintf(stderr, "th_cluster_replica: none for port %d\n", master_port);
    return r;
}

th_server *th_cluster_lock_master(th_cluster *c, const char *name)
{
    char key[128];
    th_server *m;
    snprintf(key, sizeof key, "dlock:{%s}", name);
    m = th_cluster_node(c, th_cluster_key_port(c, key, strlen(key)));
    if (m == NULL)
        fprintf(stderr, "th_cluster_lock_master: none for %s\n", key);
    return m;
}
