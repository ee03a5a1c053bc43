/*
 * lanes.h - a lane set: per node one pipelined connection that many
 * engine calls share (call.c's lanes are then views of the set's), for
 * a driver that runs many calls at once on one thread (an event loop).
 * The set reads its connections and hands each reply to the call that
 * expects it, in order; a call given up on leaves its replies to be
 * dropped; a connection that fails fails every call it carries (each
 * retries once, on a fresh one). Calls started while a set is entered
 * (dlock__lanes_enter) run on it; the others take their own connections
 * from the nodes' pools, as before. A set is owned by one thread and
 * not locked. Above node.h (the opens stay node_open.c's).
 */
#ifndef DLOCK_LANES_H
#define DLOCK_LANES_H

#include <poll.h>

#include "topo/node.h"

typedef struct dlock__lanes dlock__lanes;

/* A new empty set over ns: DLOCK_OK (*out) or DLOCK_ENOMEM. */
int dlock__lanes_new(dlock__lanes **out, dlock__nodeset *ns);

/* Close the set's connections and free it, once every call started on
 * it is freed. Accepts NULL. */
void dlock__lanes_free(dlock__lanes *s);

/* What calls started on a thread run on (a set, or NULL: none) and the
 * tag they carry (their driver's name for who started them: a loop's
 * job), given back by dlock__lanes_take when they get something. */
typedef struct dlock__lanes_ctx {
    dlock__lanes *s;
    void *tag;
} dlock__lanes_ctx;

/* Calls started on this thread from now on run on s with tag, until
 * dlock__lanes_leave(the value returned). */
dlock__lanes_ctx dlock__lanes_enter(dlock__lanes *s, void *tag);
void dlock__lanes_leave(dlock__lanes_ctx prev);

/* The set's descriptors to poll now, in pfd[0..max); returns how many
 * (more than max: call again with room for them all). */
int dlock__lanes_pollfds(dlock__lanes *s, struct pollfd *pfd, int max);

/* Do what the descriptors allow (pfd as filled by the last
 * dlock__lanes_pollfds, revents set; n 0: none): write, read, hand the
 * replies to their calls. The calls must be processed after it. */
void dlock__lanes_process(dlock__lanes *s, const struct pollfd *pfd, int n);

/* Write what the calls put on the set's connections (their requests wait
 * there until this, or dlock__lanes_process, writes them: one write for
 * many); a connection that fails fails its calls (dlock__lanes_kicked). */
void dlock__lanes_flush(dlock__lanes *s);

/* 1 when a call got something (a reply, a lane, a failure) since the
 * last time asked: its driver must process the calls again. */
int dlock__lanes_kicked(dlock__lanes *s);

/* The tags of the calls that got a reply or lost their lane since the
 * last time, each given to fn (with ud; one may come more than once).
 * Returns 1 when something may concern any call (a lane opened, closed
 * or failed to open: the calls waiting for it go on): process them all. */
int dlock__lanes_take(dlock__lanes *s, void (*fn)(void *tag, void *ud),
                      void *ud);

/* tag's driver is gone: forget what was noted for it. */
void dlock__lanes_untag(dlock__lanes *s, void *tag);

/* How many connections the set has open now. */
int dlock__lanes_open(const dlock__lanes *s);

#endif /* DLOCK_LANES_H */
