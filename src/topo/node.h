/*
 * node.h - the servers a client talks to: a node set (one dlock__node per
 * server, each with a pool of idle connections) and how many of them make
 * a quorum. A topology fills the set (topology.c: standalone or Redlock
 * today; Sentinel and Cluster later discover their nodes there), and
 * everything above runs its scripts on "the nodes" without asking which
 * topology it is. Above the transport (net.h, conn.h).
 */
#ifndef DLOCK_NODE_H
#define DLOCK_NODE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "io/conn.h"
#include "io/net.h"
#include "io/tls.h"
#include "base/url.h"
#include "base/util.h"

/* A node's server as its INFO says (dlock__node_open asks every new
 * connection): which role it plays and which data it serves. */
enum {
    DLOCK__ROLE_UNKNOWN, /* INFO refused (ACL) or not understood */
    DLOCK__ROLE_MASTER,
    DLOCK__ROLE_REPLICA,
    DLOCK__ROLE_SENTINEL
};

/* What a server's INFO server replication says (dlock__node_identify). */
typedef struct dlock__srvinfo {
    int role; /* DLOCK__ROLE_* */
    char run_id[41];
    char replid[41];  /* master_replid */
    char replid2[41]; /* master_replid2: the history it continued when it
                         was promoted ("000..." when never) */
    char master[80];  /* replica: "host:port" of its master */
} dlock__srvinfo;

/* One server: its address and a pool of idle connections. */
typedef struct dlock__node {
    dlock__endpoint ep; /* as configured (Sentinel: the first master
                           found; see addr) */
    pthread_mutex_t mu;
    dlock__conn **idle; /* stack of idle connections */
    int nidle;
    int64_t down_until_ms; /* after a failed connect: skip until then */
    /* Scripts (bit DLOCK__S_*) this server is known to have cached: set
     * by an answer, all cleared by a NOSCRIPT for one of them (its cache
     * was flushed, or it restarted). A request given up on must not
     * depend on a cache that may be empty (the engine). */
    _Atomic uint64_t scripts_ok;

    /* Where to connect now: &ep, or the master a topology located
     * (Sentinel). An address once published is never freed before the
     * set (replaced ones wait in retired), so a reader may use the
     * pointer without the mutex. Changed under mu. */
    dlock__endpoint *_Atomic addr;
    struct dlock__retired *retired; /* mu */
    _Atomic int stale; /* the master may have moved: locate first */

    /* The lock-delay (see dlock__node_open): the identity of the server
     * last seen at this address, when it last changed, and until when
     * new grants are refused. mu, except delay_until_ms (atomic). */
    char run_id[41], replid[41];
    int64_t changed_at_ms; /* monotonic; 0: never */
    int changes;
    _Atomic int64_t delay_until_ms;
    /* A fixed server (redis://) whose INFO says it is a replica: its
     * connections are kept (status and check work there) but no lock
     * write is sent to it (the engine); master_of (mu) names its master. */
    _Atomic int replica;
    char master_of[80];

    /* Its identity as ident.c learns it (INFO server pipelined before a
     * Redlock request), under mu: run_id ("" when
     * it could not be learned) once ident is 1. */
    _Atomic int ident;
    char ident_run_id[41];
} dlock__node;

/* How the nodes were found and what a quorum of them is. */
typedef enum dlock__topology {
    DLOCK__TOPO_STANDALONE, /* one server, quorum 1 */
    DLOCK__TOPO_REDLOCK,    /* N independent masters, quorum N/2+1 */
    DLOCK__TOPO_SENTINEL,   /* one master found by Sentinel, quorum 1 */
    DLOCK__TOPO_CLUSTER     /* one virtual node routed by slot (cluster.h) */
} dlock__topology;

struct dlock__nodeset;
struct dlock__cluster;

/* A topology's check of a new connection to a node that is not one of
 * the set's (a cluster's table, cluster_delay.c), once its INFO server
 * replication answered id (asked behind the login of every new
 * connection to such a node while the check is set). */
typedef void (*dlock__check_fn)(struct dlock__nodeset *ns, dlock__node *nd,
                                const dlock__srvinfo *id);

/* A topology that finds node i's address at run time (Sentinel): find
 * it and publish it (dlock__node_adopt_conn) before the deadline. DLOCK_OK
 * or an error with err set. */
typedef int (*dlock__locate_fn)(struct dlock__nodeset *ns, int i,
                                int64_t deadline_ms, char *err, size_t errlen);

/* The same locate as steps that never block (Sentinel), for the engine
 * and the blocking locate alike: start returns DLOCK__OPEN_AGAIN with
 * *st set (poll what pollfd says, *fd -1 for none, until *wake_ms, then
 * step with the revents, 0 for none, until it returns something else),
 * or the locate's final status (err set on failure). free accepts NULL
 * and gives up a locate not finished. */
typedef struct dlock__locator {
    int (*start)(struct dlock__nodeset *ns, int i, int64_t deadline_ms,
                 void **st, char *err, size_t errlen);
    void (*pollfd)(void *st, int *fd, short *events, int64_t *wake_ms);
    int (*step)(void *st, short revents, char *err, size_t errlen);
    void (*free)(void *st);
} dlock__locator;

/* The node set: filled by dlock__topology_fill(), used by node.c's pool
 * and the engine's fan-out. At most DLOCK_MAX_SERVERS nodes, so a
 * set of nodes fits a uint64_t mask (bit i = node i). */
typedef struct dlock__nodeset {
    dlock__topology kind;
    int n;      /* nodes */
    int quorum; /* how many must agree */
    dlock__node *node;
    dlock__tls_ctx *tls; /* for rediss:// nodes, else NULL */
    int64_t connect_timeout_ms;
    int pool_size;                  /* idle connections kept per node */
    dlock__stats *stats;            /* reconnects, requests */
    struct dlock__cluster *cluster; /* Redis Cluster: its nodes and slot map
                                       (cluster.c), else NULL */
    /* Two nodes found to be one server (ident.c): 0, or the pair. */
    _Atomic int same_pair;

    /* A topology's own state and hooks (NULL for fixed servers). */
    dlock__locate_fn locate;
    const dlock__locator *locator; /* locate's steps (with locate) */
    void (*topo_free)(struct dlock__nodeset *ns);
    void *topo;
    /* Cluster with a lock-delay: every new connection to a node of the
     * table is checked by it (NULL: opened as it is). A node whose check
     * said replica keeps no idle connection: it may be promoted. */
    dlock__check_fn table_check;

    /* Durability and the lock-delay (options wait_replicas,
     * wait_replicas_timeout_ms, lock_delay_ms resolved; 0: off). */
    int wait_replicas;
    int64_t wait_timeout_ms;
    int64_t lock_delay_ms;
    _Atomic int64_t longest_lease_ms; /* the longest lease taken */
} dlock__nodeset;

/* The mask of every node of ns. */
uint64_t dlock__nodes_all(const dlock__nodeset *ns);

/* Set up node nd for URL url, with user and password (when not NULL)
 * over the URL's, and an empty pool of pool_size. DLOCK_OK, DLOCK_EINVAL
 * or DLOCK_ENOMEM (message in err). */
int dlock__node_init(dlock__node *nd, const char *url, const char *user,
                     const char *password, int pool_size, char *err,
                     size_t errlen);

/* Take a ready connection to node i (pooled or new) / give it back
 * (closed instead if broken or the pool is full). */
int dlock__node_get(dlock__nodeset *ns, int i, dlock__conn **out,
                    int64_t deadline_ms, char *err, size_t errlen);
void dlock__node_put(dlock__nodeset *ns, int i, dlock__conn *conn, int ok);

/* The same for a node given by address (a cluster's nodes are not in
 * ns->node): ns gives the TLS context, timeouts, pool size and
 * counters. */
int dlock__node_take(dlock__nodeset *ns, dlock__node *nd, dlock__conn **out,
                     int64_t deadline_ms, char *err, size_t errlen);
void dlock__node_give(dlock__nodeset *ns, dlock__node *nd, dlock__conn *conn,
                      int ok);

/* Set up nd for an endpoint already parsed (moved into nd: ep is zeroed)
 * with an empty pool of pool_size. DLOCK_OK or DLOCK_ENOMEM. */
int dlock__node_init_ep(dlock__node *nd, dlock__endpoint *ep, int pool_size);

/* Close nd's pooled connections and free what it owns. */
void dlock__node_clear(dlock__node *nd);
/* dlock__node_get that also says whether the connection was opened now
 * (*fresh = 1: the server may have restarted since we last talked to it,
 * so its script cache may be empty) rather than taken from the pool. */
int dlock__node_get_ex(dlock__nodeset *ns, int i, dlock__conn **out,
                       int64_t deadline_ms, char *err, size_t errlen,
                       int *fresh);

/* dlock__node_take that also says whether the connection was opened
 * now (node_open.c: the opening's steps, waited for). */
int dlock__node_take_ex(dlock__nodeset *ns, dlock__node *nd, dlock__conn **out,
                        int64_t deadline_ms, char *err, size_t errlen,
                        int *fresh);

/* Without blocking: let every idle connection that carries a request
 * given up on read its answers and resend where NOSCRIPT says so
 * (dlock__conn_abandon_eval). For a background thread, now and then. */
void dlock__nodes_settle(dlock__nodeset *ns);

/* Node nd's address now, and its "host:port" for messages. */
const dlock__endpoint *dlock__node_addr(const dlock__node *nd);
const char *dlock__node_name(const dlock__node *nd);

/* 1 when a lock write must not go to nd, a node of ns that is a replica
 * (INFO said so at its open) of a fixed set (not Sentinel, not Cluster:
 * those route to masters), with why in err ("... is a replica (of M),
 * not a master ..."); else 0. A lock written on a replica would not be
 * seen by the master's clients and would vanish at the next resync. */
int dlock__node_refuses_locks(const dlock__nodeset *ns, dlock__node *nd,
                              char *err, size_t len);

/*
 * Open a new connection to node i (not pooled) and check its server:
 * locate it first when the topology says it may have moved, connect, then
 * INFO server replication. A replica or a sentinel is refused
 * (DLOCK_ESERVER, with a message that says what it is). The run_id and
 * replication id are remembered; when they change and grants were not
 * covered by WAIT, the node's lock-delay starts. Errors as
 * dlock__conn_open's.
 */
int dlock__node_open(dlock__nodeset *ns, int i, dlock__conn **out,
                     int64_t deadline_ms, char *err, size_t errlen);

/* For a locate: is ep (a candidate address) node i's address already?
 * Then 1: ep is freed and the node no longer stale (nothing to check).
 * Else 0, ep still the caller's. */
int dlock__node_adopt_same(dlock__nodeset *ns, int i, dlock__endpoint *ep);

/* For a locate: ep (owned by the node from now on whatever the outcome)
 * checked as a master, with conn the new connection its check made
 * (dlock__node_checked), becomes node i's address: pooled connections to
 * the old one are closed, conn is pooled. DLOCK_OK or DLOCK_ENOMEM (err
 * set; ep and conn freed). */
int dlock__node_adopt_conn(dlock__nodeset *ns, int i, dlock__endpoint *ep,
                           dlock__conn *conn, char *err, size_t errlen);

/* Ask conn's server INFO server replication and fill *id. An error
 * reply (ACL, renamed command) or an answer of another shape leaves the
 * role unknown: DLOCK_OK. A failed round trip is the error. */
int dlock__node_identify(dlock__conn *conn, dlock__srvinfo *id,
                         int64_t deadline_ms, char *err, size_t errlen);

/* dlock__node_identify in two halves, for an open that must not block:
 * queue the INFO (DLOCK_OK or DLOCK_ENOMEM), and read its reply r. */
int dlock__node_identify_ask(dlock__conn *conn);
void dlock__node_identify_read(const redisReply *r, dlock__srvinfo *id);

/* The check of a new connection *out to node i's endpoint ep once its
 * INFO was asked (rc: how that went; id: what it said): a fixed server's
 * role is remembered, a replica under Sentinel or a Sentinel is refused,
 * the identity noted (dlock__node_note). Returns the status; on failure
 * *out is closed and NULL, and err says why ("<ep>: no answer in time"
 * for a timeout). */
int dlock__node_checked(dlock__nodeset *ns, int i, const dlock__endpoint *ep,
                        int rc, const dlock__srvinfo *id, dlock__conn **out,
                        char *master_of, size_t mlen, char *err, size_t errlen);

/* Before opening a connection to n: DLOCK_OK with *dl the open's deadline
 * (the connect timeout, at most deadline_ms), or why not (a node of
 * several whose connect timed out moments ago, no time left). After it:
 * dlock__node_open_done counts it, or remembers a timed-out connect. */
int dlock__node_open_window(dlock__nodeset *ns, dlock__node *n,
                            int64_t deadline_ms, int64_t *dl, char *err,
                            size_t errlen);
void dlock__node_open_done(dlock__nodeset *ns, dlock__node *n, int rc);

/*
 * A fixed node's connection opened without blocking (node_open.c), for
 * the engine: what dlock__node_get_ex does for node i of a set that is
 * not a cluster, as steps: an idle pooled connection is taken at
 * once (DLOCK_OK, *conn set, *fresh 0); else the node is located first
 * when its topology says so (ns->locator: Sentinel), then the open
 * starts (connect, TLS, then AUTH / SELECT and INFO pipelined; the
 * connection a locate checked is taken instead) and start returns
 * DLOCK__OPEN_AGAIN with *out set: poll what dlock__node_opening_poll
 * says and call dlock__node_opening_step with the revents until it
 * returns DLOCK_OK (*conn set, the caller's; *fresh 1) or an error
 * (err); start itself may end so (then *out is NULL). The time is the
 * caller's to watch, until dlock__node_opening_deadline (the connect
 * timeout, at most deadline_ms): then dlock__node_opening_timeout: the deadline passed (the status and
 * message dlock__node_get_ex gives then). Free with
 * dlock__node_opening_free (closes an open not finished; NULL ok).
 */
typedef struct dlock__node_opening dlock__node_opening;
int dlock__node_opening_start(dlock__node_opening **out, dlock__nodeset *ns,
                              int i, int64_t deadline_ms, dlock__conn **conn,
                              int *fresh, char *err, size_t errlen);
/* The same for any node nd (dlock__node_take's: a cluster's table node
 * is opened as it is, or checked by ns->table_check). */
int dlock__node_opening_take(dlock__node_opening **out, dlock__nodeset *ns,
                             dlock__node *nd, int64_t deadline_ms,
                             dlock__conn **conn, int *fresh, char *err,
                             size_t errlen);
void dlock__node_opening_poll(const dlock__node_opening *o, int *fd,
                              short *events);
/* When the open must be stepped even if its descriptor (*fd -1: none)
 * is not ready: a locate's clock, else the open's deadline. */
int64_t dlock__node_opening_wake(const dlock__node_opening *o);
int dlock__node_opening_step(dlock__node_opening *o, short revents,
                             dlock__conn **conn, char *err, size_t errlen);
int64_t dlock__node_opening_deadline(const dlock__node_opening *o);
int dlock__node_opening_timeout(dlock__node_opening *o, char *err,
                                size_t errlen);
void dlock__node_opening_free(dlock__node_opening *o);

/* Remember the identity id of nd's server when it is a master. The
 * lock-delay of nd starts (unless the client uses wait_replicas) when
 * it differs from the last one seen at nd (a restart, or a failover to
 * this address), or, at nd's first sight, when promoted is 1 (the
 * caller found that it was promoted from a master this client saw). */
void dlock__node_note(dlock__nodeset *ns, dlock__node *nd,
                      const dlock__srvinfo *id, int promoted);

/* The master behind node i may have moved (an error that a failover
 * explains: READONLY, LOADING, a dropped or refused connection): locate
 * it again before the next connect. No-op for fixed servers. */
void dlock__node_suspect(dlock__nodeset *ns, int i);

/* The nodes whose lock-delay runs now; *left_ms (when not NULL) is set
 * to the longest time left of them. */
uint64_t dlock__nodes_delayed(dlock__nodeset *ns, int64_t *left_ms);

/* Remember that a lease of lease_ms was asked for (the lock-delay is at
 * least the longest). */
void dlock__nodes_note_lease(dlock__nodeset *ns, int64_t lease_ms);

/* Close every pooled connection, free the nodes and the TLS context.
 * Accepts a set that was only partly filled. */
void dlock__nodeset_free(dlock__nodeset *ns);

/* Fill ns from the client's options (topology.c): parse every server,
 * choose standalone (one server) or Redlock (several), make the TLS
 * context when a server needs it. DLOCK_OK or an error with err set; on
 * failure the caller frees ns with dlock__topology_free(). */
int dlock__topology_fill(dlock__nodeset *ns, const dlock_options *o,
                         dlock__stats *stats, char *err, size_t errlen);

/* Free what dlock__topology_fill made (a cluster's table too), also when
 * it failed half way. */
void dlock__topology_free(dlock__nodeset *ns);

#endif /* DLOCK_NODE_H */
