/*
 * machine.h - the engine's state, shared by its two files: call.c (the
 * calls, the lanes, the replies) and abandon.c (how calls end: the early
 * return, the deadline, a cancel, the final results). Private to
 * src/engine/.
 */
#ifndef DLOCK_ENGINE_MACHINE_H
#define DLOCK_ENGINE_MACHINE_H

#include "engine/call.h"
#include "topo/cluster.h"
#include "topo/node.h"

/* Requests given up on (timed out) that one pooled connection may carry. */
#define MAX_STALE 2
/* Redirections (MOVED, ASK) one call follows in a row before the last
 * one is reported as an error. */
#define MAX_HOPS 5

enum { C_IDLE, C_OPENING, C_SENT, C_BACKOFF, C_DONE };
enum { E_INFO, E_ASKING, E_SCRIPT, E_WAIT };

/* A reply a lane expects: its kind and, for E_ASKING / E_SCRIPT, the
 * call it belongs to. */
typedef struct expect {
    int kind;
    int call;
} expect;

typedef struct lane {
    dlock__node *nd;
    int node;          /* fixed set: the node's index; cluster: -1 */
    dlock__conn *conn; /* NULL: the lane is free */
    int fresh;         /* its connection was opened for this call */
    int dirty;         /* written since the last flush */
    expect *q;         /* expected replies q[qhead..qlen) */
    int qhead, qlen, qcap;
} lane;

typedef struct ecall {
    const dlock__cmd *cmd;
    int node; /* fixed set: its node; cluster: -1 (routed by slot) */
    int state;
    int lane;         /* SENT: its lane */
    int full;         /* send the source (EVAL): it answered NOSCRIPT */
    int retried;      /* one fresh-connection retry used */
    int fresh;        /* sent on a connection opened for it */
    int hops;         /* redirections followed in a row */
    int tries;        /* rounds of waiting for the cluster */
    int lost;         /* sent on a connection that then failed: it may
                          have run */
    dlock__node *ask; /* an ASK named this node: ASKING, then the call */
    dlock__node_opening *open; /* OPENING: its connection being opened */
    dlock__node *open_nd;      /* to this node */
    int routing;               /* IDLE, waiting for the map's refresh */
    dlock__conn *pre;          /* opened (or taken from the pool) for it */
    int pre_fresh;             /* pre was opened for it */
    int late;          /* opened after the outcome was certain: sent with the
                 source (full), never waited for */
    redisReply *first; /* the script's reply while WAIT's is awaited */
    int64_t retry_at;  /* BACKOFF: go again then */
    char refused[128]; /* the last TRYAGAIN / CLUSTERDOWN, which says
                          more than the timeout it ends in */
} ecall;

struct dlock__call {
    dlock__nodeset *ns;
    const dlock__script *scripts;
    const dlock__cmd *wcmd; /* WAIT's arguments (cmds[0]) */
    dlock__result *res;
    ecall *cl;
    int m;
    lane *ln;
    int nl;
    int *pidx; /* what each descriptor of the last pollfds is: a lane
                  l (l >= 0), call j's open (-1 - j), or the map's
                  refresh (-1 - m) */
    int npidx, pcap;
    uint64_t mask;
    int fixed;   /* a fixed node set: call i is node i */
    int wait;    /* WAIT after each batch written on a lane */
    int changed; /* a call went back to IDLE */
    int done, nok;
    int64_t deadline;
    /* A cluster's slot map being refreshed (its steps), for the calls
     * routing; then how it went. */
    dlock__refreshing *refresh;
    int rrc;
    char rerr[DLOCK__ERRLEN];
};

/* Call j is finished with status rc (res[j].err says why). */
static inline void dlock__call_end(dlock__call *k, int j, int rc)
{
    k->cl[j].state = C_DONE;
    k->cl[j].lane = -1;
    k->res[j].status = rc;
}

/* Lane l's connection goes back to its pool (ok 0: closed); l is free. */
static inline void dlock__lane_release(dlock__call *k, int l, int ok)
{
    lane *ln = &k->ln[l];
    dlock__node_give(k->ns, ln->nd, ln->conn, ok);
    ln->conn = NULL;
    ln->qhead = ln->qlen = 0;
    ln->dirty = 0;
}

/* route.c: a cluster's call j: the node it goes to (*nd, set when an
 * ASK named it), then the lane there (*out, *conn NULL) or a connection
 * to it (*conn); DLOCK__OPEN_AGAIN: the call waits (IDLE: for the map's
 * refresh or another call's open; OPENING: its own open). */
int dlock__call_cluster_conn(dlock__call *k, int j, dlock__node **nd,
                             dlock__conn **conn, int *out);

/* route.c: the map's refresh k->refresh goes one step (revents, 0:
 * none); once over, k->rrc / k->rerr say how. */
void dlock__call_refresh_step(dlock__call *k, short revents);

/* abandon.c: the results are made final (the connections still held
 * given back, a cluster's refusal named, one server counted twice
 * refused); k is done. */
void dlock__call_finish(dlock__call *k);

/* abandon.c: give up on the nodes still out once k->wcmd->enough says the
 * outcome is certain; 1 when nothing is waited for any more. */
int dlock__call_enough(dlock__call *k);

/* abandon.c: the deadline passed: every call still out ends. */
void dlock__call_expire(dlock__call *k);

/* abandon.c: the calls still being opened end with rc ("<node>: why"). */
void dlock__call_unopened(dlock__call *k, int rc, const char *why);

/* abandon.c: two nodes of the set are one server (ident.c): every
 * result of mask is refused (an undo, cmd->eval, excepted). 1 when
 * refused. */
int dlock__call_same_server(dlock__call *k);

#endif /* DLOCK_ENGINE_MACHINE_H */
