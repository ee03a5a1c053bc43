/*
 * machine.h - the engine's state, shared by its two files: call.c (the
 * calls, the lanes, the replies) and abandon.c (how calls end: the early
 * return, the deadline, a cancel, the final results). Private to
 * src/engine/.
 */
#ifndef DLOCK_ENGINE_MACHINE_H
#define DLOCK_ENGINE_MACHINE_H

#include "engine/call.h"
#include "io/pipe.h"
#include "topo/cluster.h"
#include "topo/node.h"

/* Requests given up on (timed out) that one pooled connection may carry. */
#define MAX_STALE 2
/* Redirections (MOVED, ASK) one call follows in a row before the last
 * one is reported as an error. */
#define MAX_HOPS 5

enum { C_IDLE, C_OPENING, C_SENT, C_BACKOFF, C_DONE };
enum { E_INFO, E_ASKING, E_SCRIPT, E_WAIT, E_SWAIT /* a set's shared WAIT */ };

/* A reply a lane expects: its kind and, for E_ASKING / E_SCRIPT, the
 * call it belongs to. */
typedef struct expect {
    int kind;
    int call;
    int spos; /* on a set: its entry's place in the set lane's queue */
} expect;

typedef struct lane {
    dlock__node *nd;
    int node;          /* fixed set: the node's index; cluster: -1 */
    dlock__conn *conn; /* NULL: the lane is free */
    int sh;            /* on a lane set (k->set): the set's lane it is a
                          view of (conn is that lane's), else -1 */
    int fresh;         /* its connection was opened for this call */
    int dirty;         /* written since the last flush */
    expect *q;         /* expected replies q[qhead..qlen) */
    int qhead, qlen, qcap;
    int wpend; /* on a set: the set's shared WAITs it still waits for
                  (lanes.c: not in q) */
} lane;

typedef struct ecall {
    const dlock__cmd *cmd;
    int node; /* fixed set: its node; cluster: -1 (routed by slot) */
    int state;
    int lane; /* SENT: its lane */
    int full; /* send the source (EVAL): it answered NOSCRIPT */
    /* on a set: by SHA behind a source of its script on its lane
     * (send.c): as safe to give up on as a node known to have it */
    int behind;
    /* on a set: answered NOSCRIPT, sent again by SHA behind a source
     * (dlock__pipe_noscript) */
    int shagain;
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
    redisReply *first;         /* the script's reply while WAIT's is awaited */
    int64_t retry_at;          /* BACKOFF: go again then */
    int waiting;               /* lane set: IDLE while another call opens the
                          node's lane (wgen: the set's failed opens then) */
    unsigned wgen;
    char refused[128]; /* the last TRYAGAIN / CLUSTERDOWN, which says
                          more than the timeout it ends in */
} ecall;

struct dlock__call {
    dlock__nodeset *ns;
    struct dlock__lanes *set; /* the lane set it runs on (lanes.h), or NULL:
                                 its own connections from the pools */
    /* call.c's, for lanes.c (below it: no call up): take rep (owned),
     * the next reply lane l expects (l released once it expects nothing
     * more); lane l's connection failed (rc, err): l released, every
     * call on it not answered yet lost (retried once). */
    void (*take)(struct dlock__call *k, int l, redisReply *rep);
    void (*lost)(struct dlock__call *k, int l, int rc, const char *err);
    /* ... and a WAIT the set wrote for lane l (among others) answered
     * rep (owned): one of l's wpend. */
    void (*acked)(struct dlock__call *k, int l, redisReply *rep);
    void *tag; /* on a set: its driver's tag (lanes.h) */
    const dlock__script *scripts;
    const dlock__cmd *wcmd; /* WAIT's arguments (cmds[0]) */
    dlock__result *res;
    ecall *cl;
    int m, capcl; /* calls in cl, room in cl */
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
    struct dlock__call *next_spare; /* in its set's spare list */
};

/* Call j is finished with status rc (res[j].err says why). */
static inline void dlock__call_end(dlock__call *k, int j, int rc)
{
    k->cl[j].state = C_DONE;
    k->cl[j].lane = -1;
    k->res[j].status = rc;
}

/* lanes.c: lane l of k (on a lane set) stops being a view of the set's
 * lane: the replies it still expects there are dropped when they come. */
void dlock__lanes_detach(dlock__call *k, int l);

/* Lane l's connection goes back to its pool (ok 0: closed); l is free.
 * On a lane set: l is detached, the set's lane stays. */
static inline void dlock__lane_release(dlock__call *k, int l, int ok)
{
    lane *ln = &k->ln[l];
    if (ln->sh >= 0)
        dlock__lanes_detach(k, l);
    else
        dlock__node_give(k->ns, ln->nd, ln->conn, ok);
    ln->conn = NULL;
    ln->sh = -1;
    ln->qhead = ln->qlen = 0;
    ln->dirty = 0;
    ln->wpend = 0;
}

/* route.c: a cluster's call j: the node it goes to (*nd, set when an
 * ASK named it), then the lane there (*out, *conn NULL) or a connection
 * to it (*conn); DLOCK__OPEN_AGAIN: the call waits (IDLE: for the map's
 * refresh or another call's open; OPENING: its own open). */
int dlock__call_cluster_conn(dlock__call *k, int j, dlock__node **nd,
                             dlock__conn **conn, int *out);

/* route.c: cluster, call j cannot go now (a failover or a slot migration
 * under way, CLUSTERDOWN, a master that does not answer): again after a
 * short backoff while the deadline allows, else it ends with rc. */
void dlock__call_later(dlock__call *k, int j, int rc);

/* route.c: call j could not be sent (rc, res[j].err set): transient
 * cluster failures wait and go again (the map refreshed), the rest are
 * final. */
void dlock__call_failed(dlock__call *k, int j, int rc);

/* route.c: cluster, an error reply rep to call j on lane l that is a
 * redirection (MOVED: the map learns the slot's new master; ASK: this
 * call once to the node named) or a request to wait (TRYAGAIN,
 * CLUSTERDOWN): follow it. 1 when handled (rep freed). */
int dlock__call_redirect(dlock__call *k, int l, int j, redisReply *rep);

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

/* Free k and its arrays (k holds nothing else: finished, or blank). */
void dlock__call_drop(dlock__call *k);

/* ---- the sending side (send.c) ----------------------------------------- */

/* Lane l's connection failed (rc, err): l is released and every call on
 * it not answered yet is lost (retried once on a fresh connection while
 * time remains, then failed). Also the set's hook (k->lost). */
void dlock__lane_lost(dlock__call *k, int l, int rc, const char *err);

/* Lane l's connection failed (rc, err): its calls are lost; on a set,
 * every call on the set's lane. */
void dlock__lane_fail(dlock__call *k, int l, int rc, const char *err);

/* A free lane for conn (NULL: none yet) to nd (node: fixed set index or
 * -1; fresh: conn was opened for this call), with INFO queued first when
 * a Redlock node is to be identified; on a set a view of the set's
 * lane. Its index, or -1 out of memory (conn given back). */
int dlock__lane_new(dlock__call *k, dlock__node *nd, int node,
                    dlock__conn *conn, int fresh);

/* Write call j on lane l (SENT): ASKING first when an ASK named the
 * node, then the script by SHA or with its source. DLOCK_OK or
 * DLOCK_ENOMEM. */
int dlock__call_write(dlock__call *k, int j, int l);

/* Send the IDLE call j: find its lane (or start opening it) and write
 * it there. */
void dlock__call_send(dlock__call *k, int j);

/* Push out what was written on lane l, WAIT last when the calls write
 * locks for replicas. */
void dlock__lane_flush(dlock__call *k, int l);

/* ---- the lane set (lanes.c; lanes.h is what its owner sees) ---------- */

/* One pipelined connection of a set to one node, shared by its calls:
 * an io/pipe.h pipe whose entries are the calls' replies (who: the call,
 * a: its lane, b: its call, kind: E_*; due: when, dropped and still
 * unanswered, it says the node has gone quiet) and whose waiters are
 * the calls' lanes waiting for the shared WAIT. Allocated once per slot
 * (the pipe does not move when the set's array grows). */
typedef struct spipe {
    dlock__pipe p; /* p.conn NULL: the slot is free */
    struct dlock__lanes *s;
    int sh; /* its slot */
} spipe;

typedef struct slane {
    dlock__node *nd;
    spipe *sp;   /* NULL: never used */
    int retired; /* no new call goes on it (its node's address moved):
                    closed once drained */
} slane;

/* What a set knows of a node's open: how many calls open a lane to it
 * now, and the opens that failed (gen, the last one's rc and err). */
typedef struct snode {
    dlock__node *nd;
    int opening;
    unsigned gen;
    int rc;
    char err[DLOCK__ERRLEN];
} snode;

struct dlock__lanes {
    dlock__nodeset *ns;
    slane *ln;
    int nl;
    snode *sn;
    int nsn;
    int kicked;  /* a reply went to a call or a lane came or went: the
                   calls must be processed again */
    int all;     /* a lane came or went: every call may go on */
    void **tags; /* the tags of the calls that got something */
    int ntags, captags;
    int *pidx; /* the lane of each descriptor of the last pollfds */
    int npidx, pcap;
    struct dlock__call *spare; /* freed calls kept for the next ones (their
                                  arrays with them), by next_spare */
    int nspare;
};

/* The set calls started on this thread now run on (or NULL), and the tag
 * they carry (*tag). */
struct dlock__lanes *dlock__lanes_current(void **tag);

/* Positive (not DLOCK__OPEN_AGAIN): no lane of the set to nd and no open of one under way: the
 * call opens it (dlock__lanes_find). */
#define DLOCK__LANE_NONE 2

/* Call j of k (on a set) going to nd: DLOCK_OK (*sh: the set's live
 * lane there), DLOCK__OPEN_AGAIN (another call is opening it: j waits
 * IDLE), DLOCK__LANE_NONE (j opens it: dlock__lanes_opening), or the
 * error of that open, which failed while j waited (res[j].err set). */
int dlock__lanes_find(dlock__call *k, int j, dlock__node *nd, int *sh);

/* Call j of k starts (delta 1) or ends (delta -1; rc: how, DLOCK_OK when
 * it opened or was given up on, err its message) an open to nd for the
 * set. */
void dlock__lanes_opening(dlock__call *k, dlock__node *nd, int delta, int rc,
                          const char *err);

/* The set's lane to nd: the live one, else conn (opened or taken for it)
 * becomes it (*took 1; conn given to the pool when one is live).
 * Returns its index, or -1 out of memory (conn given back). */
int dlock__lanes_install(dlock__call *k, dlock__node *nd, dlock__conn *conn,
                         int *took);

/* Expect one more reply (kind, k's call j) on lane l's set lane, at
 * *pos in its queue (there until read, dropped or the lane fails).
 * DLOCK_OK or DLOCK_ENOMEM. */
int dlock__lanes_push(dlock__call *k, int l, int kind, int j, int *pos);

/* Lane l of k (a view of a set's lane) wrote lock writes for replicas:
 * a WAIT after them answers it (k->acked). The set writes one WAIT for
 * every view that asks while none is out on the lane, and one for all
 * that ask meanwhile when it is answered: a WAIT blocks its connection
 * until it is answered, so one per call would make each wait for those
 * ahead (up to a WAIT timeout each). DLOCK_OK or DLOCK_ENOMEM. */
int dlock__lanes_wait(dlock__call *k, int l);

/* The replies come on set lane sh: read what is there, each to its call
 * (or dropped). */
void dlock__lanes_collect(struct dlock__lanes *s, int sh);

/* The pipe of k's lane l when it is a view of a set's lane, else NULL. */
dlock__pipe *dlock__lanes_pipe(dlock__call *k, int l);

/* Set lane sh's connection (NULL: closed). */
dlock__conn *dlock__lanes_conn(const struct dlock__lanes *s, int sh);

/* Set lane sh failed (rc, err): closed; every call on it is lost. */
void dlock__lanes_fail(struct dlock__lanes *s, int sh, int rc, const char *err);

/* Lane l of k (on a set) is given up on: its replies dropped, then l
 * detached. A script sent by SHA keeps its EVAL form, resent when it is
 * answered NOSCRIPT (a give-back answered NOSCRIPT late must still be
 * done): call j's (j >= 0), or every give-back's (j -1). */
void dlock__lanes_abandon(dlock__call *k, int l, int j);

#endif /* DLOCK_ENGINE_MACHINE_H */
