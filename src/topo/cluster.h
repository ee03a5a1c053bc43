/*
 * cluster.h - the Redis Cluster topology (cluster.c; the seed URLs are
 * cluster_url.c's): seed URLs, the table of the cluster's nodes (each a
 * dlock__node with its own pool), the slot map (slot -> the master
 * serving it, from CLUSTER SHARDS or CLUSTER SLOTS), and what a MOVED or
 * ASK redirection means for it.
 *
 * A cluster client's node set (node.h) has one node, quorum 1: to the lock
 * layer a cluster lock is a single-instance lock. The engine (src/engine/call.c)
 * asks dlock__cluster_route() which real node serves the slot of a
 * command's keys, and follows redirections through
 * dlock__cluster_redirect(). The subscriber (subscriber.c) links to the
 * node that serves a channel's slot (sharded pub/sub). Above node.h, net.h
 * and slot.h.
 */
#ifndef DLOCK_CLUSTER_H
#define DLOCK_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "topo/node.h"
#include "base/slot.h"

/* 1 when url names a cluster: redis+cluster:// or rediss+cluster://
 * (any case). */
int dlock__cluster_is_url(const char *url);

/*
 * Parse redis+cluster://[user[:password]@]HOST[:PORT][,HOST[:PORT]...]
 * (rediss+cluster:// for TLS; an optional "/0" path) into up to max seed
 * endpoints at eps (each then owned by the caller: dlock__endpoint_clear).
 * Returns the number of seeds (>= 1), or DLOCK_EINVAL / DLOCK_ENOMEM with
 * a message in err that never quotes the user information. On failure
 * nothing is left allocated.
 */
int dlock__cluster_parse_url(const char *url, dlock__endpoint *eps, int max,
                             char *err, size_t errlen);

/* Fill ns for the cluster URL (the only server of o): one virtual node
 * (the first seed's endpoint, for messages and TLS), quorum 1, and
 * ns->cluster with the seeds as its first nodes. The slot map is loaded
 * on first use. DLOCK_OK or an error with err set; the caller frees ns
 * with dlock__cluster_free() and dlock__nodeset_free(). */
int dlock__cluster_fill(dlock__nodeset *ns, const dlock_options *o, char *err,
                        size_t errlen);

/* Close every connection of the cluster's nodes and free ns->cluster
 * (NULL: nothing). */
void dlock__cluster_free(dlock__nodeset *ns);

/*
 * The node serving slot: *out. Loads the slot map when it was never
 * loaded, and refreshes it first when a failure marked it stale (at most
 * every 100 ms; a failed refresh keeps the old map). Returns DLOCK_OK,
 * DLOCK_EINVAL (a seed is not in cluster mode), DLOCK_ESERVER (no master
 * serves the slot: the cluster is down, CLUSTERDOWN), or the error of the
 * last node asked (EIO, ETIMEDOUT, EAUTH...). err names the node.
 */
int dlock__cluster_route(dlock__nodeset *ns, uint16_t slot, dlock__node **out,
                         int64_t deadline_ms, char *err, size_t errlen);

/* What an error reply says about where the command belongs. */
typedef enum dlock__redirect {
    DLOCK__REDIR_NONE = 0, /* not a redirection */
    DLOCK__REDIR_MOVED,    /* the slot lives on *to now (map updated) */
    DLOCK__REDIR_ASK,      /* this one command: ASKING, then *to */
    DLOCK__REDIR_RETRY     /* TRYAGAIN / CLUSTERDOWN: same again later */
} dlock__redirect;

/*
 * Read an error reply's text: MOVED SLOT HOST:PORT and ASK SLOT HOST:PORT
 * set *to (a node of the table, added when new) and, for MOVED, the slot's
 * owner; TRYAGAIN and CLUSTERDOWN ask for a later retry (CLUSTERDOWN also
 * marks the map stale). A MOVED or ASK naming a node the table has no
 * room for, or that cannot be read, is DLOCK__REDIR_NONE (the error stays
 * an error). *slot_out gets the slot named, or -1. from is the node that
 * answered (a redirection with an empty host means its host).
 */
dlock__redirect dlock__cluster_redirect(dlock__nodeset *ns,
                                        const dlock__node *from,
                                        const char *msg, dlock__node **to,
                                        int *slot_out);

/* A node failed under a command (refused, reset, timed out): the map may
 * be out of date (a failover); refresh it before the next route. */
void dlock__cluster_stale(dlock__nodeset *ns);

/* 1 once the map was loaded (it may be stale). */
int dlock__cluster_loaded(const dlock__nodeset *ns);

/* 1 when the map should be (re)loaded before it is trusted. */
int dlock__cluster_wants_refresh(const dlock__nodeset *ns);

/* Load the map now (see dlock__cluster_route for the rate limit and the
 * errors): dlock__cluster_refreshing's steps, waited for. */
int dlock__cluster_refresh(dlock__nodeset *ns, int64_t deadline_ms, char *err,
                           size_t errlen);

/*
 * The same refresh as steps that never block (cluster_refresh.c), for
 * the engine: start returns DLOCK__OPEN_AGAIN with *out set (poll what
 * poll says, *fd -1 for none, until *wake_ms, then step with the
 * revents, 0 for none, until it returns something else), or the
 * refresh's status at once (nothing due: DLOCK_OK; another refresh
 * running while a map is loaded: DLOCK_OK, the old map will do). The
 * masters of the map are asked first (each node's connection its
 * opening's steps, node.h), then the other nodes of the table, until
 * one answers CLUSTER SHARDS (or SLOTS). free gives up one not
 * finished; accepts NULL.
 */
typedef struct dlock__refreshing dlock__refreshing;
int dlock__cluster_refresh_start(dlock__refreshing **out, dlock__nodeset *ns,
                                 int64_t deadline_ms, char *err, size_t errlen);
void dlock__cluster_refresh_poll(const dlock__refreshing *r, int *fd,
                                 short *events, int64_t *wake_ms);
int dlock__cluster_refresh_step(dlock__refreshing *r, short revents, char *err,
                                size_t errlen);
void dlock__cluster_refresh_free(dlock__refreshing *r);

/* dlock__cluster_route without a refresh (the engine refreshes by
 * steps first): the node serving slot in the map as it is. */
int dlock__cluster_route_now(dlock__nodeset *ns, uint16_t slot,
                             dlock__node **out, char *err, size_t errlen);

/* Without I/O: the index in the node table of the master serving slot,
 * or -1 when the map does not know (not loaded, or no owner). */
int dlock__cluster_lookup(const dlock__nodeset *ns, uint16_t slot);

/* The node table: how many nodes it has now (it only grows), and node i
 * (0 <= i < that count). */
int dlock__cluster_nnodes(const dlock__nodeset *ns);
dlock__node *dlock__cluster_node(dlock__nodeset *ns, int i);

/* The distinct masters of the map, at most max, into out; the count. The
 * map must have been loaded (else 0). */
int dlock__cluster_masters(dlock__nodeset *ns, dlock__node **out, int max);

/* The links a subscriber keeps: one per node of the set, or in a cluster
 * one per node of the table (room for DLOCK_MAX_SERVERS); the endpoint of
 * link i (NULL when the table has no node i yet). */
int dlock__links_max(const dlock__nodeset *ns);
int dlock__links_count(const dlock__nodeset *ns);
const dlock__endpoint *dlock__link_ep(dlock__nodeset *ns, int i);

#endif /* DLOCK_CLUSTER_H */
