/*
 * notify_impl.h - the inside of the notifier, shared by notify.c (the
 * waiters' side) and subscriber.c (the subscriber thread and its links)
 * only. The locking rule is notify.c's: one mutex (n->mu) guards the
 * channel table, every waiter field and the links' direct state.
 */
#ifndef DLOCK_NOTIFY_IMPL_H
#define DLOCK_NOTIFY_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "io/conn.h"
#include "notify/ctx.h"

/* A channel nobody waits on stays subscribed this long, so that a process
 * that contends for a lock again and again does not pay a SUBSCRIBE and an
 * UNSUBSCRIBE per acquisition. */
#define LINGER_MS 2000

typedef struct chan {
    struct chan *next;
    char *name;
    size_t len;
    int refs;
    uint64_t want;      /* nodes on which it should be subscribed */
    uint64_t sent;      /* SUBSCRIBE sent, not yet confirmed */
    uint64_t ok;        /* confirmed */
    uint64_t unsent;    /* UNSUBSCRIBE sent */
    uint64_t refused;   /* SUBSCRIBE answered NOPERM (ACL): not resent */
    uint64_t gen;       /* bumped by every release message / lost link */
    int64_t idle_since; /* when refs fell to 0 (monotonic ms) */
    char seen[8][64];   /* ids of the last releases heard (Redlock echoes) */
    int seen_next;
    int turn;         /* a thread of this process holds the turn */
    uint64_t tickets; /* the next waiter's place in the turn line */
    struct dlock__waiter *waiters;
    pthread_cond_t cv;
} chan;

struct dlock__waiter {
    struct dlock__waiter *next;
    dlock__notifier *n;
    chan *ch;
    uint64_t cancel_gen;
    uint64_t seen; /* ch->gen when it last looked */
    int has_turn;
    uint64_t ticket; /* its place in the channel's turn line */
    const char *me;  /* fair: the owner id it waits to be handed */
    int handed;
    uint64_t token;
    /* Redlock fair: nodes that named this waiter first of a free lock
     * ("w ID OWNER") for the release ID in wrel; woken once a majority
     * did (then it tries, and only it). */
    uint64_t wmask;
    char wrel[64];
    int woken;
};

typedef struct sub_link {
    dlock__conn *conn;
    int64_t retry_at;
    int64_t backoff;
    int direct; /* read by n->reader, or parked: not the thread's */
} sub_link;

struct dlock__notifier {
    dlock__notify_ctx x; /* what it needs of its client */
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int stop;
    int wake_fd;
    int reader_fd;         /* wakes n->reader (eventfd) */
    int nwaiters;          /* waiters of every channel */
    dlock__waiter *reader; /* the waiter reading a direct link, if any */
    int dlink;             /* the direct (read or parked) link, -1: none;
                            * at most one link is direct at a time */
    chan *chans;
    sub_link *links;
};

/* Wake the subscriber thread / a direct reader (eventfd), and consume
 * such a wake-up. */
void dlock__sub_poke(int fd);
void dlock__sub_drain(int fd);

/* Free a channel (no waiter, no link business left). */
void dlock__sub_chan_free(chan *ch);

/* The channel NAME, or NULL. Caller holds mu. */
chan *dlock__sub_chan_find(dlock__notifier *n, const char *name, size_t len);

/* Milliseconds until a lingering channel is due to be unsubscribed (0:
 * now), -1 when none lingers. Caller holds mu. */
int64_t dlock__sub_linger_left(const dlock__notifier *n, int64_t now);

/* 1 when link i has subscription business for the thread. Caller holds
 * mu. */
int dlock__sub_link_work(dlock__notifier *n, int i);

/* Give a direct link back to the subscriber thread. Caller holds mu. */
void dlock__sub_giveback(dlock__notifier *n);

/* Hand what link i has delivered to the channels; returns the number of
 * pushes (+1 when the link went down). Caller holds mu. */
int dlock__sub_read(dlock__notifier *n, int i);

/* Do link i's I/O for poll's revents, then dlock__sub_read(). Caller
 * holds mu. */
void dlock__sub_pump(dlock__notifier *n, int i, short revents);

/* Redis Cluster (sharded pub/sub): the link a channel belongs on, the
 * master serving its slot (-1 while the slot map does not know); -2
 * outside a cluster, where a channel belongs on every link. Caller holds
 * mu. */
int dlock__sub_chan_home(dlock__notifier *n, const chan *ch);

/* The subscriber thread (arg: the notifier). */
void *dlock__sub_main(void *arg);

#endif /* DLOCK_NOTIFY_IMPL_H */
