/*
 * sentinel_impl.h - the inside of the Sentinel topology, shared by
 * sentinel.c (the sentinels asked, the watch thread, the report) and
 * sentinel_locate.c (the locate as steps). Private to those two files.
 */
#ifndef DLOCK_SENTINEL_IMPL_H
#define DLOCK_SENTINEL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "io/ask.h"
#include "topo/sentinel.h"

typedef struct sentinel {
    dlock__nodeset *ns;
    dlock__sentinel_url url; /* sentinels carry the sentinel credentials */
    _Atomic int busy;        /* a locate runs (one at a time) */
    _Atomic int first;       /* the sentinel that answered last */

    /* The watch thread. */
    pthread_mutex_t wmu; /* started */
    pthread_t thread;
    int started;
    _Atomic int stop;
    int wake_fd;
    _Atomic uint64_t switches; /* +switch-master of our master seen */
    _Atomic int watching;      /* subscribed right now */
    /* Start the watch (once; sentinel.c's), called by the first
     * locate. */
    void (*watch_start)(struct sentinel *s);
} sentinel;

/* The one node of a Sentinel set. */
#define NODE 0

/* Outcomes of asking one sentinel. */
enum { ASK_ADDR, ASK_UNKNOWN, ASK_FAILED };

/* Start asking sentinel k for the master's address (bounded by the
 * connect timeout and deadline_ms): dlock__asking_start's return. */
int dlock__sentinel_ask(sentinel *s, int k, int64_t deadline_ms,
                        dlock__asking **out, char *msg, size_t msglen);

/* Read sentinel k's answer r: ASK_ADDR with host / port filled,
 * ASK_UNKNOWN (it does not know the name), ASK_FAILED (msg says why). */
int dlock__sentinel_read(const sentinel *s, int k, const redisReply *r,
                         char *host, size_t hostlen, int *port, char *msg,
                         size_t msglen);

/* A data-node endpoint for host:port with the URL's kind, credentials
 * and db; NULL when out of memory. */
dlock__endpoint *dlock__sentinel_data_ep(const sentinel *s, const char *host,
                                         int port);

/* The locate (node.h's dlock__locate_fn and dlock__locator). */
int dlock__sentinel_locate(dlock__nodeset *ns, int i, int64_t deadline_ms,
                           char *err, size_t errlen);
extern const dlock__locator dlock__sentinel_locator;

#endif /* DLOCK_SENTINEL_IMPL_H */
