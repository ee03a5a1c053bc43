/*
 * th_cluster.h - what the Cluster tests ask of a running th_cluster
 * beyond topology.h (th_cluster.c): the client URL, and a master's
 * replica or a lock's master as a th_server.
 */
#ifndef DLOCK_TEST_TH_CLUSTER_H
#define DLOCK_TEST_TH_CLUSTER_H

#include <stddef.h>

#include "harness.h"
#include "topology.h"

/* Write "redis+cluster://127.0.0.1:A,127.0.0.1:B" into buf (len bytes),
 * A and B the ports of c->nodes[seed_a] and c->nodes[seed_b] (two seeds;
 * which ones matters where a test wants a replica as the first seed). */
void th_cluster_url(const th_cluster *c, int seed_a, int seed_b, char *buf,
                    size_t len);

/* The node of a running replica of the master on master_port, or NULL
 * (on stderr). */
th_server *th_cluster_replica(th_cluster *c, int master_port);

/* The node of the master serving lock NAME's key (dlock:{NAME}) now, or
 * NULL (on stderr). */
th_server *th_cluster_lock_master(th_cluster *c, const char *name);

#endif /* DLOCK_TEST_TH_CLUSTER_H */
