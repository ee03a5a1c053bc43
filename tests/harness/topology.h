/*
 * topology.h - throwaway Sentinel and Cluster deployments for the tests,
 * built from harness.h's servers (each node is a th_server: own temp dir,
 * loopback port, killed by pid, cleaned up at exit like any other).
 *
 * Sentinel: 1 master + 2 replicas + 3 sentinels monitoring it as
 * TH_SENTINEL_NAME with quorum 2, down-after-milliseconds 1500 and
 * failover-timeout 3000, so an automatic failover completes in seconds.
 *
 * Cluster: 6 nodes (3 masters, 3 replicas) joined by `redis-cli --cluster
 * create --cluster-replicas 1`; every node's bus is on port + 10000, so
 * only ports <= 55535 whose port + 10000 is free are used. Node timeout 2 s,
 * no replica migration (roles stay where the tests put them).
 *
 * Every wait is bounded (TH_TOPO_WAIT_MS unless said otherwise) and a
 * failure is explained on stderr. Start topologies from the test's main
 * thread (as with th_server_start). Functions that return a port return
 * -1 on failure.
 */
#ifndef DLOCK_TEST_TOPOLOGY_H
#define DLOCK_TEST_TOPOLOGY_H

#include "harness.h"

#define TH_TOPO_WAIT_MS 30000

/* ---- Sentinel ----------------------------------------------------------- */

#define TH_SENTINEL_NAME "dlock"
#define TH_SENTINEL_DATA 3 /* master + 2 replicas */
#define TH_SENTINEL_COUNT 3
#define TH_SENTINEL_QUORUM 2

typedef struct th_sentinel {
    /* data[0] is the master at start, data[1..2] its replicas; roles move
     * with failovers: ask th_sentinel_master_port() who is master now. */
    th_server data[TH_SENTINEL_DATA];
    th_server sentinels[TH_SENTINEL_COUNT];
} th_sentinel;

/* Start it all and wait until every sentinel sees the master, both
 * replicas and the two other sentinels, and SENTINEL CKQUORUM is OK.
 * 0, or -1 (everything started is stopped again). */
int th_sentinel_start(th_sentinel *t);
/* Stop every process and remove the dirs. Safe on a stopped topology. */
void th_sentinel_stop(th_sentinel *t);
/* The redis+sentinel:// URL of t's sentinels and master name into buf
 * (len bytes). */
void th_sentinel_url(const th_sentinel *t, char *buf, size_t len);
/* The master's port as the first answering sentinel reports it
 * (SENTINEL GET-MASTER-ADDR-BY-NAME), or -1. */
int th_sentinel_master_port(const th_sentinel *t);
/* The data node listening on port (NULL if none). */
th_server *th_sentinel_node(th_sentinel *t, int port);
/* Wait until every running sentinel reports a master other than
 * old_port (old_port -1: any), all of them the same one, that node
 * answers ROLE master, and no sentinel has a failover in progress.
 * Returns the new master's port. */
int th_sentinel_wait_master(const th_sentinel *t, int old_port,
                            int64_t timeout_ms);
/* SENTINEL FAILOVER, then th_sentinel_wait_master(). The old master is
 * turned into a replica by the sentinels later (some 8-10 s); use
 * th_sentinel_settle() when a test needs that. New master's port. */
int th_sentinel_failover(th_sentinel *t);
/* kill -9 the current master (its th_server keeps dir and data, see
 * th_server_restart()), then th_sentinel_wait_master(). New port. */
int th_sentinel_kill_master(th_sentinel *t);
/* Wait until every running data node is the reported master or a
 * replica of it with its link up. A node still saying master while the
 * sentinels agree on another (and no failover runs) is sent REPLICAOF
 * that master rather than left to the sentinels (some 8-10 s). 0 or -1. */
int th_sentinel_settle(const th_sentinel *t, int64_t timeout_ms);

/* ---- Cluster ------------------------------------------------------------ */

#define TH_CLUSTER_NODES 6
#define TH_CLUSTER_SLOTS 16384

typedef struct th_cluster {
    th_server nodes[TH_CLUSTER_NODES];
} th_cluster;

/* Start six nodes, create the cluster and wait until every node says
 * cluster_state:ok and all agree on the owner of every slot. 0 or -1. */
int th_cluster_start(th_cluster *c);
/* Stop every node and remove the dirs. Safe on a stopped cluster. */
void th_cluster_stop(th_cluster *c);
/* The node listening on port (NULL if none). */
th_server *th_cluster_node(th_cluster *c, int port);
/* Wait until every running node says cluster_state:ok and all of them
 * agree on the master of every slot (CLUSTER SLOTS). 0 or -1. */
int th_cluster_wait_ok(const th_cluster *c, int64_t timeout_ms);
/* Port of the master owning slot (CLUSTER SLOTS of the first running
 * node), or -1. */
int th_cluster_slot_port(const th_cluster *c, int slot);
/* The key's slot by a server's CLUSTER KEYSLOT (not the library's), or
 * -1. key is binary-safe (len bytes). */
int th_cluster_keyslot(const th_cluster *c, const char *key, size_t len);
/* Port of the master owning the key's slot, or -1. */
int th_cluster_key_port(const th_cluster *c, const char *key, size_t len);
/* Port of a running replica of the master on master_port, or -1. */
int th_cluster_replica_port(const th_cluster *c, int master_port);
/* CLUSTER FAILOVER on the replica on replica_port, then wait until it
 * answers ROLE master, its old master (if running) is its replica with
 * the link up, and th_cluster_wait_ok(). 0 or -1. */
int th_cluster_failover(th_cluster *c, int replica_port);

/* A slot moving from one master to another, in three steps so that a
 * test can act while it is half moved:
 *   begin   CLUSTER SETSLOT slot IMPORTING on the target, MIGRATING on
 *           the source
 *   keys    MIGRATE up to max keys of the slot (max <= 0: all of them)
 *   finish  MIGRATE the rest, CLUSTER SETSLOT slot NODE target on the
 *           target, the source and every other master, th_cluster_wait_ok
 * While migrating, the source answers -ASK for keys it no longer has and
 * the target serves them to clients that send ASKING first. */
typedef struct th_migration {
    int slot;
    int from_port, to_port;
    char from_id[48], to_id[48]; /* node ids (CLUSTER MYID) */
} th_migration;

/* Begin moving slot to the master on to_port (which must not own it).
 * 0 or -1. */
int th_cluster_migrate_begin(th_cluster *c, int slot, int to_port,
                             th_migration *m);
/* Move up to max of the slot's keys (max <= 0: all). Returns the number
 * moved, or -1. */
int th_cluster_migrate_keys(th_cluster *c, const th_migration *m, int max);
/* Move the remaining keys and hand the slot over. 0 or -1. */
int th_cluster_migrate_finish(th_cluster *c, const th_migration *m);
/* begin + finish in one go. 0 or -1. */
int th_cluster_migrate_slot(th_cluster *c, int slot, int to_port);

/* ---- raw queries, for any th_server ------------------------------------ */

/* ROLE: 1 master, 0 replica (*master_port set when not NULL; -1 while
 * it has no master address), -1 no answer. */
int th_role(const th_server *s, int *master_port);
/* Copy the value of field (e.g. "cluster_state") from the answer to
 * cmd (a command without arguments that need quoting, answering with
 * INFO-style "field:value" lines: "INFO replication", "CLUSTER INFO")
 * into buf.
 * 0, or -1 when there is no such field or no answer. */
int th_info_field(const th_server *s, const char *cmd, const char *field,
                  char *buf, size_t len);

#endif
