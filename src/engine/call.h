/*
 * call.h - the engine: M script calls over N connections, pipelined, as
 * a state machine on the heap with three verbs (start, pollfds, process)
 * that a poll() loop (loop.c: dlock__exec) or an event loop drives. One
 * place for what a call may meet on the way: NOSCRIPT (the source is
 * sent), MOVED / ASK / TRYAGAIN / CLUSTERDOWN (followed, at most
 * MAX_HOPS redirections in a row, or waited out), a connection that fails
 * (one retry on a fresh one), WAIT after a lock write, the early return
 * once the outcome is certain (dlock__cmd.enough), the hold's own
 * connections (pins), and the requests given up on. Above node.h,
 * cluster.h, ident.h, node.h (node_open.c) and conn.h; it knows calls and results,
 * not locks.
 */
#ifndef DLOCK_CALL_H
#define DLOCK_CALL_H

#include <poll.h>
#include <stdint.h>

#include "topo/node.h"
#include "engine/step.h"

typedef struct dlock__call dlock__call;

/*
 * Start running calls on ns, each bounded by deadline_ms (monotonic;
 * grown by the WAIT timeout when the calls have wait_replicas, twice on
 * a lane set: lanes.c's shared WAIT), and send
 * what can be sent now. Two shapes, by the node set:
 *  - a fixed set (one server, Redlock, Sentinel): cmds[0] on every node
 *    of mask (m is 1), one connection each; res has ns->n entries,
 *    res[i] node i's outcome;
 *  - a cluster: cmds[0..m-1], each routed by its keys' slot; the calls
 *    of one master share one connection, pipelined behind one WAIT
 *    (every cmd must then have the same wait_replicas and timeout);
 *    res[j] is call j's outcome. mask is ignored.
 * res is the caller's and stays where it is until dlock__call_free.
 * Returns DLOCK_OK (*out set; it may already be done) or DLOCK_ENOMEM.
 */
int dlock__call_start(dlock__call **out, dlock__nodeset *ns,
                      const dlock__script *scripts, const dlock__cmd *cmds,
                      int m, uint64_t mask, int64_t deadline_ms,
                      dlock__result *res);

/* 1 once every call has its outcome in res. */
int dlock__call_done(const dlock__call *k);

/* The descriptors to poll now, in pfd[0..max) (events set, revents 0),
 * and in *wake_ms the monotonic time by which dlock__call_process must
 * run even if none is ready. Returns how many there are (if more than
 * max, only max were filled: call again with room for them all). */
int dlock__call_pollfds(dlock__call *k, struct pollfd *pfd, int max,
                        int64_t *wake_ms);

/* Do what the descriptors allow (pfd as filled by the last
 * dlock__call_pollfds, revents set by poll; n 0: none) and what the
 * clock asks. Returns 1 when done, else 0. */
int dlock__call_process(dlock__call *k, const struct pollfd *pfd, int n);

/* End now: every call not done fails with rc and the message why. */
void dlock__call_cancel(dlock__call *k, int rc, const char *why);

/* The outcomes (the res given to start) and how many are DLOCK_OK
 * (among mask's nodes for a fixed set). Final once done. */
dlock__result *dlock__call_results(const dlock__call *k, int *nok);

/* Free k (cancelling it first if it is not done). Accepts NULL. */
void dlock__call_free(dlock__call *k);

#endif /* DLOCK_CALL_H */
