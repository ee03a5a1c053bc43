/*
 * multi_node.h - the loop's jobs on the engine (mn_jobs.c; multi_node.c:
 * the acquire; mn_send.c: one script), shared with node_holds.c
 * (release, extend, renewal): a job is an attempt or
 * an engine call in flight, its descriptors in the loop's epoll set.
 * Private to src/loop/.
 */
#ifndef DLOCK_LOOP_MULTI_NODE_H
#define DLOCK_LOOP_MULTI_NODE_H

#include <poll.h>

#include "engine/call.h"
#include "engine/lanes.h"
#include "hold/attempt.h"
#include "hold/wait.h"
#include "loop/loop_impl.h"
#include "notify/notify.h"

/* A job of the engine on the loop: an attempt or a call in flight. */
typedef struct mjob {
    struct mjob *next, *prev; /* the loop's jobs (spare: next) */
    dlock_loop *l;
    dlock_loop *home;             /* the loop whose spares it goes to */
    size_t asize;                 /* its allocation's size */
    void *extra;                  /* the room asked for at its end */
    dlock_op *op;                 /* the op it serves; NULL: a renewal */
    lbatch *batch;                /* a renewal's or an extend's holds */
    dlock__attempt_state *a;      /* an acquire's attempt, or */
    dlock__call *k;               /* a call (release, extend, renewal) */
    dlock__cmd *cmds;             /* its commands (one per hold in a cluster) */
    dlock__cmdbuf *bufs;          /* a release's storage */
    const char **ks;              /* a renewal's keys, then its arguments */
    size_t *kls;                  /* and their lengths */
    char (*num)[24];              /* its leases, formatted */
    int ncmds;                    /* cmds given to the call */
    dlock__result *res;           /* the call's outcomes */
    int nres;                     /* entries of res */
    char relid[64];               /* a release's request id */
    void (*done)(struct mjob *j); /* it finished: complete what it serves */
    dlock__held *rec; /* a give-back's record (keys, owner), freed with it */
    int give_up;      /* a queue leave: the writer's mark goes after it */
    int first;        /* a fixed set: the first node only (fenced, election) */
    lreq_fn fn;       /* a request's answer (dloop__mn_send) */
    char *blob;       /* its keys' and arguments' copies */
    struct pollfd *pfd; /* what it polls now */
    int n, cap;
    int64_t wake; /* process it by then */
    int finished;
    int kicked; /* on the loop's ready list (a call of it got something on
                   the lane set, or its clock is due): step it */
    int infin;  /* on the loop's list of finished jobs to complete */
    int hidx;   /* its place in the loop's timer heap + 1; 0: not there */
    int rc;     /* an attempt's status */
    int kind;   /* a renewal's holds' kind when sent (a downgrade may
                 change it before the answer) */
    struct dlock_hold *late; /* an extend's or downgrade's hold after its op
                                ended first (multi_node.c: extending until
                                the answer), a reference; or NULL */
} mjob;

/* What an op of an engine loop keeps (op->mn). */
struct mop {
    mjob *job;            /* out now, or NULL */
    dlock__wait x;        /* an acquire's wait (hold/wait.h) */
    const dlock__kind *k; /* an acquire's kind */
    int begun;            /* its wait began (after the first attempt) */
    dlock__waiter *sub;   /* its subscription (notify.h), or NULL */
    int efd;              /* sub's descriptor, in the loop's epoll set */
    int subwait;          /* sleeping until sub is confirmed */
    int wakeable;         /* sleeping until a wake (W_WAKE) or the time */
    uint64_t ticket;      /* fair Redlock: its place in every node's queue */
};

/* A new job of l for op (NULL: none), with room for ncmds commands and
 * nres results, and extra bytes (not zeroed) at j->extra; NULL out of
 * memory. A freed job is kept by l for the next of its size (one
 * allocation less per op; freed with l's jobs). */
mjob *dloop__job_new(dlock_loop *l, dlock_op *op, int ncmds, int nres,
                     size_t extra);

/* Start j's call of its commands (j->cmds[0..ncmds) on every node of a
 * fixed set, or each routed in a cluster) by the command timeout, and
 * put it on the loop. DLOCK_OK, or DLOCK_ENOMEM (j freed). */
int dloop__job_call(dlock_loop *l, mjob *j);

/* j is started (a or k set): put it on the loop's list, done already or
 * polled for. */
void dloop__job_link(dlock_loop *l, mjob *j);

/* A new job for op (NULL: none) of one command: cmd's script with
 * copies of its keys and arguments (the caller's may live on its
 * stack), sent to node 0 only when first (else as dloop__job_call
 * sends). NULL out of memory. */
mjob *dloop__cmd_job(dlock_loop *l, dlock_op *op, const dlock__cmd *cmd,
                     int first);

/* Drive every job of l not finished, complete and free the finished
 * ones, then sync the loop's epoll set with what they poll
 * (dloop__jobs_run's part after the waits). */
void dloop__jobs_step(dlock_loop *l);

/* Take j off the loop's list and free it (an attempt or call not done is
 * cut short: dlock__attempt_free gives back what it may hold). */
void dloop__job_free(mjob *j);

/* mn_lists.c: the lists process looks at (loop_impl.h). */

/* Put j at the end of the list *a (*n entries, room *cap): 1, or 0 out
 * of memory. */
int dloop__jlist_push(mjob ***a, int *n, int *cap, mjob *j);
/* Take j off the list a[0..n) (its entry becomes NULL). */
void dloop__jlist_null(mjob **a, int n, const mjob *j);
/* Drop the NULL entries of a[0..*n), keeping the order. */
void dloop__jlist_pack(mjob **a, int *n);
/* j may go at the next step: on l's ready list, once (j->kicked). */
void dloop__jready(dlock_loop *l, mjob *j);
/* j finished: on the list of those to complete, once (j->infin). */
void dloop__jfinish(dlock_loop *l, mjob *j);
/* j's wake-up time is set: in l's timer heap, in its place (out of
 * memory: not there, and l->ready_all). */
void dloop__jheap_put(dlock_loop *l, mjob *j);
/* j out of the heap (if there). */
void dloop__jheap_del(dlock_loop *l, mjob *j);
/* The jobs from the heap's entry i down whose clock is due (<= now) go
 * on the ready list. */
void dloop__jheap_due(dlock_loop *l, int i, int64_t now);

/* Calls started on this thread from now on run on l's lane set (made
 * on first use) for job j, until dloop__lanes_leave(the value
 * returned). */
dlock__lanes_ctx dloop__lanes_enter(dlock_loop *l, mjob *j);
void dloop__lanes_leave(dlock__lanes_ctx prev);

/* The state every op of an engine loop keeps (op->mn); DLOCK_OK, or
 * DLOCK_ENOMEM (op completed). */
int dloop__mop_new(dlock_op *op);

#endif /* DLOCK_LOOP_MULTI_NODE_H */
