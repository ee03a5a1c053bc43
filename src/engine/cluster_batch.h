/*
 * cluster_batch.h - several script calls at once on a Redis Cluster
 * (the engine, src/engine/loop.c over call.c): the watchdog's renewal round, whose locks live in
 * many slots on several masters. dlock__exec (step.h) runs one call,
 * routed by its slot, on one connection; a round of k slots through it
 * costs k round trips, and with wait_replicas k WAIT timeouts when a
 * master's replica stalls. Here the calls are grouped by the master that
 * serves their slot, each master's calls are pipelined on one of its
 * connections behind one WAIT, and all masters are driven by one poll()
 * loop: a round costs one round trip and at most one WAIT timeout. The
 * same engine as dlock__exec (call.h); this header keeps the name its
 * callers know.
 */
#ifndef DLOCK_CLUSTER_BATCH_H
#define DLOCK_CLUSTER_BATCH_H

#include <stdint.h>

#include "topo/node.h"
#include "engine/step.h"

/*
 * Run cmds[0..m-1] on the cluster of ns at once. Each call's keys share
 * one slot (the slots of different calls may differ); every call must
 * have the same wait_replicas and wait_timeout_ms. res[j] (m entries) is
 * call j's outcome as dlock__exec gives it for a one-node set: status,
 * reply, err, sent, and acks (the answer of the WAIT that followed the
 * calls on its master's connection; -1 when it did not answer).
 *
 * What dlock__exec does for one call is done here for each call: a call
 * refused with NOSCRIPT is sent again with its source on the same
 * connection (with a WAIT of its own), MOVED and ASK are followed (at most
 * 5 in a row: the call joins the lane of the node named), a connection
 * that fails is retried once on a fresh one, TRYAGAIN, CLUSTERDOWN and a
 * failed or refused connection then wait a short backoff (10 ms doubling
 * to 100 ms, the map refreshed) and go again; the calls that are fine are
 * not sent again. Every script of ours is idempotent, so a call whose
 * connection failed under it may be repeated. All within deadline_ms
 * (monotonic; grown by the wait timeout with wait_replicas); the calls
 * still out then are DLOCK_ETIMEDOUT ("no answer in time"). Returns the
 * number of calls with status DLOCK_OK; ns must be a cluster's.
 */
int dlock__cluster_exec_many(dlock__nodeset *ns, const dlock__script *scripts,
                             const dlock__cmd *cmds, int m, int64_t deadline_ms,
                             dlock__result *res);

#endif /* DLOCK_CLUSTER_BATCH_H */
