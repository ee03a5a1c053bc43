/*
 * loop_impl.h - the event-loop API's state (include/dlock_loop.h), shared
 * by src/loop/, and each file's functions that others call. The files
 * form layers, each calling only the ones below it (design.md's code
 * map): loop.c (the object's ground: pools, completion) < lheap.c (the
 * holds' clock), otimer.c (the waiting ops' clock; calls nothing),
 * events.c (metrics and events), watchdog.c (the client's watchdog as a
 * renewer: the hold tier only), lconn.c (the command connection, and
 * what both connections share) < lsub.c (the subscriber, the two
 * connections' clock) < durable.c (WAIT for replicas),
 * lhold.c (holds made, named, renewed, lost, freed), holder.c <
 * giveback.c (what a failed acquire may hold), op_words.c (an acquire's
 * answer worded by hold's code) < waits.c (the waiting ops: their clock,
 * subscriptions, the wait policy's driver) < ops.c (the acquire on one
 * server) < ops_start.c (the public acquires), mn_jobs.c
 * (the engine's jobs) < multi_node.c (the engine's acquire) < mn_send.c
 * (one script routed), node_holds.c < elect.c, fenced.c < holds.c
 * (release, extend, renewal), downgrade.c < multi.c < query.c < drive.c
 * (new, process, free). What a lower file needs from an upper one goes
 * through a hook: the loop's, set by dlock_loop_new, or an op's, set by
 * its maker. Above
 * the engine's tier (step.h: scripts; node.h: non-blocking opens; conn.h,
 * pipe.h)
 * and core.h (the client); nothing below imports it.
 */
#ifndef DLOCK_LOOP_IMPL_H
#define DLOCK_LOOP_IMPL_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/kind.h"
#include "io/pipe.h"
#include "dlock_loop.h"

#define LOOP_ERRLEN 256

struct dlock_loop;
struct dlock_hold;

/* otimer.c: one entry of the waiting ops' clock. */
typedef struct otimer_ent {
    int64_t t;
    struct dlock_op *op;
} otimer_ent;

/* lheap.c: one entry of the holds' clock; h NULL: emptied (lazily). */
typedef struct lheap_ent {
    int64_t due;
    struct dlock_hold *h;
} lheap_ent;

/* A free list of equal blocks (ops, requests, holds): what a completion
 * frees is taken again by the next start instead of going through malloc
 * (at 10,000 requests in flight malloc and free were about a quarter of
 * the loop's CPU). At most LPOOL_MAX blocks are kept. */
typedef struct lpool {
    void *free; /* the first word of a free block links the next */
    size_t n;
    size_t size; /* every block's size */
} lpool;
#define LPOOL_MAX 2048
/* Pooled blocks: a request of up to REQ_BLOCK bytes with its copies (an
 * acquire's, a fenced set's of a short value), a hold whose keys take up
 * to HOLD_KEYS bytes (a name of about 100); larger ones are malloc'd. */
#define REQ_BLOCK 768
#define HOLD_KEYS 640
/* The sizes of jobs an engine loop keeps spares of (mn_jobs.c). */
#define JSPARE_SIZES 4

/* A request's answer: rc DLOCK_OK with r (not owned: the caller must not
 * free it) or a failure with err; sent 1 when the request may have
 * reached the server. ctx as given to lconn_send. */
typedef void (*lreq_fn)(struct dlock_loop *l, void *ctx, int rc,
                        const redisReply *r, const char *err, int sent);

/* One request on the command connection (a script or a plain command),
 * or a stub waiting for a WAIT's answer (durable.c). */
typedef struct lreq {
    struct lreq *next; /* waiting for the connection to open */
    lreq_fn fn; /* NULL: its requester went away; the answer is dropped */
    void *ctx;
    int script; /* -1: a plain command (dloop__send_plain) */
    int argc;   /* script: argv[0] "EVALSHA" / "EVAL", argv[1] the SHA /
                   source */
    const char **argv;
    size_t *argvlen;
    int pooled;   /* a block of the loop's request pool */
    int appended; /* written into the connection's buffer */
    int eval;     /* sent as EVAL already (after NOSCRIPT) */
    int again;    /* sent again by SHA behind another's EVAL */
    char nk[12];  /* argv[2]: the number of keys */
} lreq;

/* One connection of the loop: the command connection (a pipe: io/pipe.h,
 * its entries the requests written, who: the lreq) or the subscriber
 * (only its p.conn is used: messages come unasked). */
typedef struct lconn {
    dlock__pipe p;             /* p.conn: open, or NULL */
    dlock__node_opening *open; /* being opened, or NULL */
    int fd;                    /* registered in the epoll set, or -1 */
    uint32_t ev;               /* the events registered */
    lreq *head, *tail;         /* command connection: requests waiting for it to
                          open, in order */
    int nreq; /* requests not answered yet (waiting or written) */
    int64_t open_dl;
    int64_t retry_at; /* subscriber: not reopened before (after a failure) */
} lconn;

/* A subscribed channel and the operations waiting on it. */
typedef struct lsub {
    struct lsub *next; /* hash chain */
    char *chan;
    size_t len;
    int refs;
    int state;   /* 0 not subscribed, 1 SUBSCRIBE sent, 2 settled */
    int refused; /* settled by a refusal (NOPERM): no message will come;
                    asked again after the subscriber reconnects */
    struct dlock_op *waiters;
} lsub;

enum {
    OP_LOCK,
    OP_DOWNGRADE,
    OP_RELEASE,
    OP_EXTEND,
    OP_FSET,
    OP_FGET,
    OP_PROCLAIM,
    OP_LEADER,
    OP_MULTI,
    OP_FREAD,
    OP_TOKEN
};
enum { ST_SEND, ST_OUT, ST_SUBWAIT, ST_SLEEP, ST_DONE };

struct dlock_hold {
    struct dlock_loop *loop;
    struct dlock_hold *hnext, *hprev; /* the loop's holds */
    struct dlock_hold *tnext;         /* name table chain */
    size_t nhash;                     /* its name's hash (the table's) */
    dlock__keys k;
    char owner[DLOCK_OWNER_MAX];
    uint64_t token;
    int64_t lease_ms, valid_until, renew_at;
    int held;            /* acquired (else: being acquired, or a give-back) */
    int renew;           /* the loop renews it */
    int status;          /* DLOCK_OK, DLOCK_LOST, DLOCK_NOT_OWNER */
    int renewing;        /* a renewal is out: its batch slot */
    int extending;       /* extends out (dlock_loop_extend): no renewal round
                      starts meanwhile, so the server runs them in the
                      order the loop believes */
    int downgrading;     /* an engine loop's downgrade is out (downgrade.c):
                        no extend is sent meanwhile (it could run first
                        on another connection) */
    int64_t round_lease; /* the lease the renewal round out carries */
    struct lbatch *batch;
    int slot;
    int gone;      /* released or cancelled: freed once nothing refers to it */
    int refs;      /* requests out that name it */
    int64_t limit; /* a semaphore permit's limit (k.kind PERMIT) */
    struct dlock__held *rec; /* an engine loop's record of it (multi_node.c:
                                keys, owner, Redlock's pinned connections) */
    dlock_hold_lost_cb on_lost;
    void *lost_ud;
    char *why;        /* once lost: why (lhold.c), malloc'ed, or NULL */
    int pooled;       /* a block of the loop's hold pool */
    size_t hidx;      /* its live entry in the loop's heap + 1; 0: none */
    int64_t since_us; /* granted at (metrics: how long it is held) */
    int ignore_mark;  /* a reader that enters while a writer waits
                         (DLOCK_RW_PREFER_READERS) */
    int lazy;         /* dlock_loop_acquire.lazy_token: its token may be
                         issued after the grant (0 until then) */
    dlock_lock *wd;   /* watchdog.c: the client's record the watchdog
                         thread renews (dlock_loop_set_watchdog), or NULL */
};

/* A renewal round's holds (one extend.lua call). */
typedef struct lbatch {
    int n;
    struct dlock_hold **h;
    signed char *res; /* one server: each hold's answer (1: renewed), kept
                         while WAIT is out (wait_replicas) */
    int64_t sent_ms;
} lbatch;

struct dlock_op {
    struct dlock_loop *loop;
    struct dlock_op *next, *prev;     /* the loop's live ops */
    struct dlock_op *wnext, *wprev;   /* the waiters of its sub */
    struct dlock_op *hwnext, *hwprev; /* the waiters of its hsub */
    struct dlock_op *dnext;           /* the completion queue */
    struct dlock_op *tnext, *tprev;   /* the loop's timed list (waits.c) */
    int timed;   /* 1: on the timed list; 2: on the clock (otimer.c) */
    size_t tidx; /* its entry in the loop's op clock + 1; 0: none */
    int type, state, status;
    /* ST_SLEEP ended by a message on its channels too (the wait policy's
     * W_WAKE, a leader wait); a message came while its attempt was out
     * (waits.c: the next W_WAKE sleep is over at once). In the padding
     * before cb: the op pool's blocks do not grow. */
    unsigned char wakeable, woken;
    dlock_op_cb cb;
    void *ud;
    dlock_hold *hold;
    lreq *req; /* the request out, or NULL */
    lsub *sub, *hsub;
    int strategy, fair, queued, round, maybe, subscribed;
    int waited;   /* a lock op found it busy and waits: a writer's mark may
                   be its (rw_leave.lua when it gives up) */
    int plain;    /* its attempt out is the plain SET NX PX (kind.h) */
    int scripted; /* a plain try found the name taken: the script now */
    int setrel;   /* an OP_RELEASE of dlock_loop_fenced_set_release */
    /* A campaign's lock op (elect.c): proclaim key (the value) once won,
     * then complete; NULL: complete at once. */
    int (*proclaim)(struct dlock_op *op, struct dlock_hold *h,
                    const char *value, size_t len);
    int watch; /* OP_LEADER: wait until the leader is not op->leader */
    struct lmulti *multi;               /* OP_MULTI's state (multi.c) */
    void (*again)(struct dlock_op *op); /* a waiting op's next try */
    /* Its maker's part of its end (complete or cancel), after ops.c's
     * detach: multi.c's (its lock in progress, what it took) or the
     * engine's (multi_node.c: its job; set with mn); NULL: none. */
    void (*end)(struct dlock_op *op);
    /* OP_LEADER only (room after the op, else NULL): its answer, and a
     * leader wait's leadership it outwaits */
    dlock_leader_info *leader, *known;
    int pooled; /* a block of the loop's op pool */
    int64_t deadline, wake_at, lease_ms;
    int64_t arg_lease;
    char *key; /* fenced: the key; set: value follows */
    size_t keylen, vlen;
    const char *value;
    uint64_t token, fence;
    char *got;
    size_t gotlen;
    int has_got;
    int last_rc;
    /* One server: when the outage a wait rides began (the wait policy's,
     * hold/wait.h), 0: none */
    int64_t outage_since;
    struct mop *mn; /* an engine loop's op state (multi_node.c) */
    int href;       /* holds a reference to hold, dropped after the
                       callback (an engine loop's extend) */
    int extending;  /* an extend counted in its hold's extending */
    int overlap;    /* an extend sent while a renewal round of its hold
                       was out (lhold.c, dloop__extended) */
    int64_t t0_us;  /* started at (metrics: time in the operation) */
    /* wait_replicas (durable.c): its write answered, its WAIT out (req);
     * then acked(op, status, message) */
    int acking;
    void (*acked)(struct dlock_op *op, int rc, const char *msg);
    char err[LOOP_ERRLEN];
};

struct dlock_loop {
    dlock_client *c;
    int epfd, evfd;
    lconn cmd, sub;
    dlock_op *ops;       /* live */
    dlock_op *timed;     /* timed ops not on the op clock (waits.c's
                           timed_set: an op sent again while on it, or
                           one the clock had no room for), walked */
    otimer_ent *otm;     /* otimer.c: sleeping or subscribing ops by time
                           (an op waiting for an answer is bounded by its
                           connection's command timeout) */
    size_t notm, capotm; /* entries, room */
    dlock_op *dq, *dqt;  /* completed, callbacks to run */
    dlock_hold *holds;
    dlock_hold **names;      /* hash by name: holds held or being acquired */
    size_t nbuckets, nnames; /* buckets (a power of 2), names in them */
    lsub **subs;
    size_t nsubs;
    int subcount;          /* channels with refs */
    int64_t renew_min;     /* the heap's earliest due time, or -1 */
    lheap_ent *heap;       /* lheap.c: the holds the loop renews */
    size_t nheap, capheap; /* entries, room */
    size_t nstale;         /* emptied entries in it */
    size_t nholds;         /* holds allocated (the heap's room follows) */
    /* Several servers, Sentinel or Cluster: the ops run as jobs of the
     * engine (multi_node.c), their descriptors mfd[0..nmfd) registered in
     * epfd. */
    int engine;
    int mn_nsub; /* engine ops with a subscription (mop's sub set) */
    struct mjob *jobs;
    unsigned jobs_freed; /* jobs taken off the list so far (mn_jobs.c) */
    struct jspare {
        size_t asize;      /* the size of its jobs' allocations, or 0 */
        struct mjob *head; /* freed jobs kept for the next ones, by next */
        int n;
    } jspare[JSPARE_SIZES]; /* mn_jobs.c */
    int *mfd, nmfd;
    /* The engine's lane set the jobs' calls share (engine/lanes.h: one
     * pipelined connection per node), created on first use; NULL: none
     * (the calls then take pooled connections); its descriptors lpfd[0..
     * nlpfd) also registered in epfd. */
    struct dlock__lanes *lanes;
    struct pollfd *lpfd;
    int nlpfd, caplpfd;
    /* What process touches of the jobs (mn_jobs.c), so that its work is
     * in the jobs that may go, not in all of them: the ready list (jobs
     * whose calls got something, or whose clock is due), the timer heap
     * (by wake-up time), the finished jobs to complete; *_all: a list
     * lost an entry (out of memory): walk every job. nopening: jobs
     * polling descriptors of their own (opening a connection), stepped
     * on every process; fds_dirty: the epoll set must be rebuilt from the
     * jobs' descriptors; ppfd[0..nppfd): the set's descriptors as last
     * put in epoll; set_later: process puts and writes the set's after
     * the callbacks (dloop__jobs_flush). */
    struct mjob **jready, **jfin;
    struct jwake { /* a timer heap entry: a job and its wake-up time */
        int64_t wake;
        struct mjob *j;
    } * jheap;
    int nready, capready, njheap, capjheap, nfin, capfin;
    int ready_all, fin_all, nopening, fds_dirty, set_later;
    struct pollfd *ppfd;
    int nppfd, capppfd;
    /* The last renewal round's failure ("" after one that answered): a
     * lease that then runs out was lost because of it (query.c). */
    char renew_err[LOOP_ERRLEN];
    int sub_refused;        /* a SUBSCRIBE was refused (NOPERM): waiters poll */
    char warn[LOOP_ERRLEN]; /* dlock_loop_warning's text */
    int in_process;
    int signalled;
    int watchdog; /* holds granted are renewed by the client's watchdog */
    lpool op_pool, req_pool, hold_pool;
    /* Hooks: what a file of src/loop/ needs from one above it, set by
     * dlock_loop_new (drive.c). An op ends (loop.c's dloop__complete):
     * its event, detach it, give back what it may hold (ops.c); the
     * subscriber's events for the waiters (lsub.c to waits.c); an acquire
     * on an engine loop (ops.c to multi_node.c). */
    void (*op_end)(dlock_op *op);
    void (*on_message)(struct dlock_loop *l, lsub *s, const char *msg,
                       size_t len);
    void (*on_subscribed)(struct dlock_loop *l, lsub *s);
    void (*sub_lost)(struct dlock_loop *l);
    void (*engine_acquire)(dlock_op *op);
};

/* loop.c */
/* A block of p's size (not zeroed) from p, or malloc'd; NULL when out of
 * memory. */
void *dloop__pool_get(lpool *p);
/* Give block b (of p's size) back to p, or free it when p is full. */
void dloop__pool_put(lpool *p, void *b);
void dloop__signal(dlock_loop *l);
void dloop__complete(dlock_op *op, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
dlock_op *dloop__op_new(dlock_loop *l, int type, dlock_op_cb cb, void *ud);
/* A new op of type on hold h into *op (and *out when not NULL), after
 * the checks every hold op shares (h is a live hold of l, a callback, ok:
 * the op's own argument checks). DLOCK_OK, or DLOCK_EINVAL / DLOCK_ENOMEM
 * with the message in dlock_errmsg(l's client). */
int dloop__hold_op(dlock_op **op, dlock_op **out, dlock_loop *l, dlock_hold *h,
                   int type, int ok, dlock_op_cb cb, void *ud,
                   const char *what);
/* A hold op made by dloop__hold_op on a hold found lost: complete it with
 * the hold's status ("the lease had been lost") and return 1; else 0. */
int dloop__hold_lost_done(dlock_op *op);

/* lconn.c */
int dloop__send(dlock_loop *l, int script, int nkeys, const char **keys,
                const size_t *keylens, int nargs, const char **args,
                const size_t *arglens, lreq_fn fn, void *ctx, lreq **out);
/* Send a plain command (argv[0] its name), not a script: answered like
 * dloop__send's. */
int dloop__send_plain(dlock_loop *l, int argc, const char **argv,
                      const size_t *argvlen, lreq_fn fn, void *ctx, lreq **out);
/* dloop__send for a command built by the kind table (kind.h). */
int dloop__send_cmd(dlock_loop *l, const dlock__cmd *cmd, lreq_fn fn, void *ctx,
                    lreq **out);
/* The loop's two connections blank (before any other use). */
void dloop__conns_init(dlock_loop *l);
/* What one of the loop's connections does with its events: opened
 * (flush what waits for it), read what has come (DLOCK_OK or the error
 * of a broken stream), a failure. */
typedef struct lconn_ops {
    void (*opened)(dlock_loop *l);
    int (*collect)(dlock_loop *l, char *err, size_t len);
    void (*fail)(dlock_loop *l, int rc, const char *err);
} lconn_ops;
/* Drive lc after poll() gave revents: the open's next step, then write
 * and read what has come (ops). */
void dloop__lc_io(dlock_loop *l, lconn *lc, const lconn_ops *ops,
                  short revents);
/* Start opening lc without blocking: DLOCK_OK (open now),
 * DLOCK__OPEN_AGAIN (lc->open under way) or the failure (err). */
int dloop__lc_open(dlock_loop *l, lconn *lc, char *err, size_t errlen);
/* Register lc's descriptor and events in the loop's epoll set (as they
 * are now). */
void dloop__lc_reg(dlock_loop *l, lconn *lc);
/* lc is about to close its descriptor: forget it (closing takes it out
 * of the epoll set; its number may be reused at once, by this loop or
 * another thread, so it is never touched again). */
void dloop__lc_unreg(dlock_loop *l, lconn *lc);
/* The command connection's clock: an open or an answer overdue ends it;
 * requests waiting for it open it. */
void dloop__cmd_time(dlock_loop *l, int64_t now);
/* When the command connection next needs the clock (-1: never, 0:
 * now). */
int64_t dloop__cmd_wake(const dlock_loop *l);
/* End every request of the command connection with rc / err and close
 * it (out of step, or the loop freed). */
void dloop__cmd_fail(dlock_loop *l, int rc, const char *err);
void dloop__cmd_io(dlock_loop *l, short revents);
void dloop__sub_io(dlock_loop *l, short revents);
void dloop__conns_time(dlock_loop *l, int64_t now);
int64_t dloop__conns_wake(const dlock_loop *l);
void dloop__conns_update(dlock_loop *l);
void dloop__conns_close(dlock_loop *l);
lsub *dloop__sub_get(dlock_loop *l, const char *chan, size_t len);
void dloop__sub_put(dlock_loop *l, lsub *s);

/* otimer.c: the waiting ops' clock (waits.c's dloop__timed_set keeps
 * it). */
/* Put op on the clock at t, or move it there: DLOCK_OK, or DLOCK_ENOMEM
 * (not on it: the heap could not grow). */
int dloop__otimer_set(dlock_loop *l, dlock_op *op, int64_t t);
/* Take op off the clock (nothing when it is not on it). */
void dloop__otimer_del(dlock_loop *l, dlock_op *op);
/* The earliest op due by now, taken off the clock; NULL when none. */
dlock_op *dloop__otimer_pop(dlock_loop *l, int64_t now);
/* The clock's earliest time, or -1 when it is empty. */
int64_t dloop__otimer_min(const dlock_loop *l);

/* lheap.c: the holds' clock. */
/* Room in the heap for n holds: DLOCK_OK or DLOCK_ENOMEM. */
int dloop__heap_reserve(dlock_loop *l, size_t n);
/* Put h in the heap at its due time (its renewal, or its validity's end
 * while a renewal is out), move it there, or take it out when nothing is
 * due (not renewed, lost, released). Call after changing any of them. */
void dloop__hold_sched(dlock_hold *h);
/* Take h out of the heap (before it is freed). */
void dloop__hold_unsched(dlock_hold *h);
/* The earliest hold due by now, out of the heap; NULL when none. */
dlock_hold *dloop__heap_pop_due(dlock_loop *l, int64_t now);

/* lhold.c: a loop's holds, the name table, a lease renewed or lost. */
dlock_hold *dloop__hold_new(dlock_loop *l, const char *name, int kind);
void dloop__hold_unref(dlock_hold *h);
dlock_hold *dloop__name_find(dlock_loop *l, const char *name);
void dloop__name_drop(dlock_hold *h);
/* A hold's renewal (or extend) for lease confirmed at sent_ms; a hold's
 * lease lost (status), said once through on_lost. */
void dloop__renewed(dlock_hold *h, int64_t sent_ms, int64_t lease);
/* A renewal round sent at sent_ms renewed h with the lease it carried
 * (h->round_lease); the lease of the rounds to come (h->lease_ms, which an
 * extend answered meanwhile may have set) stays. */
void dloop__round_renewed(dlock_hold *h, int64_t sent_ms);
/* op, an extend of its hold sent at sent_ms, was granted. When a renewal
 * round of the hold was out as it was sent (op->overlap), the server may
 * have run that round last, with the old lease: the hold keeps the
 * validity the round gives, takes the new lease for the rounds to come
 * and is renewed at once. */
void dloop__extended(dlock_op *op, int64_t sent_ms);
void dloop__lost(dlock_hold *h, int status);
/* Set h->why when h is found lost with status. */
void dloop__lost_why(dlock_hold *h, int status);
/* Free an engine hold's record (its pins given back). */
void dloop__mn_rec_free(dlock_hold *h);

/* multi.c: a several-locks op ends early: cancel its lock in progress,
 * give back what it took. */
void dloop__multi_abort(dlock_op *parent);
/* multi.c: the lock a several-locks op is acquiring now, or NULL. */
dlock_op *dloop__multi_child(const dlock_op *parent);

/* elect.c: send elect_proclaim.lua for h with value for op. */
int dloop__proclaim(dlock_op *op, dlock_hold *h, const char *value, size_t len);

/* giveback.c: what a failed or cancelled acquire may hold, given back
 * by requests nobody waits for (the answer to a request whose op went
 * away: ctx is the hold, its reference dropped). */
/* Give back h's grant (token): a release nobody waits for. */
void dloop__giveback(dlock_loop *l, dlock_hold *h, uint64_t token);
/* Send h's kind's release (kind.h) for (depth, token). */
int dloop__send_release(dlock_loop *l, dlock_hold *h, int depth, uint64_t token,
                        lreq_fn fn, void *ctx, lreq **out);
/* The release of (depth, token) for h, nobody waiting. */
void dloop__giveback_release(dlock_loop *l, dlock_hold *h, int depth,
                             uint64_t token);
/* h's fair queue place left (and a grant given back). */
void dloop__giveback_leave(dlock_loop *l, dlock_hold *h);
/* A writer's mark taken off for h. */
void dloop__writer_leave(dlock_loop *l, dlock_hold *h);
/* A permit's waiter h leaves (a permit granted or handed given back). */
void dloop__sem_leave(dlock_loop *l, dlock_hold *h);
/* Answers of an acquire, a fair leave, a permit's attempt whose op went
 * away (ctx: the hold). */
void dloop__gb_acquire_reply(dlock_loop *l, void *ctx, int rc,
                             const redisReply *r, const char *err, int sent);
void dloop__gb_leave_reply(dlock_loop *l, void *ctx, int rc,
                           const redisReply *r, const char *err, int sent);
void dloop__gb_sem_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                         const char *err, int sent);

/* op_words.c: a single-server loop's acquire read and worded by hold's
 * code, each message the op's own. */
/* What op's attempt asks for (the kinds' table): the record (keys,
 * owner; depth 0) and the want. */
void dloop__attempt_spec(const dlock_op *op, dlock__held *rec, dlock__want *w);
/* A kind's refusal in res (dlock__refusal): op completed, 1; else 0. */
int dloop__op_refused(dlock_op *op, const dlock__result *res);
/* A lock's acquire failed with rc (err) WRONGTYPE: kind.lua asked, op
 * completed by its answer (dlock__kind_answer), 1; else 0. */
int dloop__op_wrongtype(dlock_op *op, int rc, const char *err);
/* op's message: the lock-delay's, left_ms more. */
void dloop__delay_words(dlock_op *op, int64_t left_ms);
/* op's message: its grant came after its validity was used up (the
 * attempt took took_ms). */
void dloop__too_late_words(dlock_op *op, int64_t took_ms);

/* waits.c: the waiting ops (their clock, subscriptions, the wait
 * policy's driver); each function's contract is at its definition. */
/* op on (or off) the loop's clock; call again after changing its state
 * or wake-up time. */
void dloop__timed_set(dlock_op *op, int on);
/* Leave op's subscriptions. */
void dloop__unsub(dlock_op *op);
/* Sleep op until when, never past its deadline; wake: a message ends
 * the sleep too (the wait policy's W_WAKE). */
void dloop__sleep_until(dlock_op *op, int64_t when, int wake);
/* op's strategy after the fallbacks, *queued: its waiting attempts take
 * a place in a queue (wait.h: dlock__wait_strategy). */
int dloop__op_strategy(const dlock_op *op, int *queued);
/* A single-server acquire's first busy answer: its wait begins
 * (subscribe, then try once more). */
void dloop__wait_begin(dlock_op *op);
/* Obey the wait policy after op's attempt came to rc (g: what it got):
 * try (op->again), sleep, or complete. */
struct dlock__got;
void dloop__obey(dlock_op *op, int rc, const struct dlock__got *g, int64_t now);
/* A waiting op sleeps until when (or a message on its channels; one
 * that came while its request was out ends the sleep at once), never
 * past its deadline; subscribe it to its hold's channels (1: wait for
 * the confirmation, then op->again). */
void dloop__wait_sleep(dlock_op *op, int64_t when);
int dloop__wait_subscribe(dlock_op *op);
/* Complete a waiting acquire the wait policy ended with rc (its
 * DLOCK__W_DONE): a timeout says it gave up waiting for the name; any
 * other status keeps the attempt's message. */
void dloop__wait_done(dlock_op *op, int rc);
/* A message for op: its wait for a confirmation or its wakeable sleep
 * ends (op->again), 1; an attempt out notes it (op->woken), 0. */
int dloop__op_wake(dlock_op *op);
void dloop__on_message(dlock_loop *l, lsub *s, const char *msg, size_t len);
void dloop__on_subscribed(dlock_loop *l, lsub *s);
void dloop__sub_lost(dlock_loop *l);
void dloop__ops_time(dlock_loop *l, int64_t now);
int64_t dloop__ops_wake(const dlock_loop *l);

/* ops.c */
/* op's next attempt (acquire.lua on the command connection). */
void dloop__attempt(dlock_op *op);
void dloop__op_abort(dlock_op *op);
void dloop__holds_time(dlock_loop *l, int64_t now);

/* ops.c: op's acquire was granted token, sent at sent_ms: the hold is
 * held (renewed from now on), op completes (a campaign proclaims
 * first). */
void dloop__hold_granted(dlock_op *op, uint64_t token, int64_t sent_ms);

/* multi_node.c: the loop on several servers (Redlock), Sentinel or
 * Cluster, through the engine (l->engine). Jobs: run what their
 * descriptors and the clock allow and complete the finished ones
 * (process), their earliest wake-up (-1 none), free them all. */
void dloop__jobs_run(dlock_loop *l);
int64_t dloop__jobs_wake(const dlock_loop *l);
/* Write the requests the jobs put on the lane set and register the
 * set's descriptors (end of process, after the callbacks). */
void dloop__jobs_flush(dlock_loop *l);
/* The jobs that serve no op (renewal rounds, give-backs). */
int dloop__jobs_detached(const dlock_loop *l);
void dloop__jobs_free(dlock_loop *l);
/* The engine loop's waiters: their subscriptions' confirmations and
 * wake-ups (process, before the jobs). */
void dloop__mn_waits(dlock_loop *l);
/* Start acquire op (its hold set up) as attempts and waits. */
void dloop__mn_acquire(dlock_op *op);
/* Release op->hold's last level. */
void dloop__mn_release(dlock_op *op);
/* Extend op->hold to its lease_ms (set for the call). DLOCK_OK or
 * DLOCK_ENOMEM. */
int dloop__mn_extend(dlock_op *op);
/* Renew b's holds (one kind); the batch is the job's. DLOCK_OK or
 * DLOCK_ENOMEM (b still the caller's). */
int dloop__mn_renew(dlock_loop *l, lbatch *b);
/* op ends: its job goes (an attempt cut short gives back), an acquire
 * not granted drops its hold. */
void dloop__mn_abort(dlock_op *op);
/* Send script (keys, args: copied) for op to the one node that serves
 * it (a Sentinel master, a cluster's slot, a fixed set's first server:
 * the blocking API's fenced values), as an engine call; fn gets the
 * answer with op as its ctx (op->req stays NULL: cancelling op drops
 * the call). Over Redlock, election scripts go to every node and fn
 * gets the vote's answer (the blocking API's rules: a proclaim done at
 * a majority, the leader a majority names). DLOCK_OK or DLOCK_ENOMEM. */
int dloop__mn_send(dlock_op *op, int script, int nkeys, const char **keys,
                   const size_t *keylens, int nargs, const char **args,
                   const size_t *arglens, lreq_fn fn);
/* An op's script request: dloop__send on the loop's connection (op->req
 * set), or dloop__mn_send on an engine loop. */
int dloop__op_send(dlock_op *op, int script, int nkeys, const char **keys,
                   const size_t *keylens, int nargs, const char **args,
                   const size_t *arglens, lreq_fn fn);
/* A leader wait on an engine loop: subscribe op to its hold's name
 * channel through the client's notifier (the waiter's descriptor in the
 * loop's epoll set); once confirmed, and on each message, op->again. 1
 * when it waits for the confirmation, 0 when it cannot subscribe. */
int dloop__mn_watch(dlock_op *op);
/* Sleep op until until, or until a message on its subscription. */
void dloop__mn_sleep(dlock_op *op, int64_t until);
/* Give back engine hold h's grant (through the client's watchdog): a
 * campaign that won but could not proclaim. */
void dloop__mn_giveback(dlock_loop *l, dlock_hold *h);
/* holder.c: holder info (the client's holder_info, src/holder.c) for a
 * loop's locks. After h's grant: record it (holder_set.lua; nothing
 * waits for the answer) when the client records holder info and h's
 * kind carries it. */
void dloop__holder_record(dlock_loop *l, dlock_hold *h);
/* 1 when the holds of kind carry holder info on l's client (the client
 * records it and the kind has it): their renewals are then
 * holder_extend.lua (one server: dloop__holder_extend; an engine loop:
 * node_holds.c). */
int dloop__holder_renews(const dlock_loop *l, int kind);
/* holder_extend.lua for hs[0..n) (locks) with their leases. */
int dloop__holder_extend(dlock_loop *l, dlock_hold **hs, int n, lreq_fn fn,
                         void *ctx, lreq **out);

/* durable.c: wait_replicas on a loop over one server. */
/* 1 when the loop's lock writes are followed by WAIT (one server and the
 * client's wait_replicas > 0; an engine loop's calls WAIT themselves). */
int dloop__durable(const dlock_loop *l);
/* WAIT wait_replicas wait_replicas_timeout_ms after the writes sent so
 * far, answered to fn (*out: a handle whose fn may be set NULL when its
 * requester goes). One WAIT is out at a time: those asked for meanwhile
 * share the next, sent when it is answered (a WAIT holds the connection
 * up until then). When none can be sent fn is told at once (*out NULL):
 * DLOCK_EIO when the command connection is closed (the writes it would
 * count went with it), DLOCK_ENOMEM out of memory (the connection is
 * failed then: a WAIT may have been written without its place). */
void dloop__send_wait(dlock_loop *l, lreq_fn fn, void *ctx, lreq **out);
/* WAIT's answer (rc, r, err as an lreq_fn gets them): DLOCK_OK (enough
 * replicas), DLOCK_NOT_REPLICATED or the failure, with a message about
 * what into msg. */
int dloop__acks_rc(dlock_loop *l, int rc, const redisReply *r, const char *err,
                   const char *what, char *msg, size_t len);
/* op's write was answered: send WAIT for it (op->req, op->acking), then
 * then(op, rc, msg) with dloop__acks_rc's outcome about op's hold's name
 * (at once when no WAIT could be sent: out of memory, the connection
 * gone). */
void dloop__op_acks(dlock_op *op,
                    void (*then)(dlock_op *op, int rc, const char *msg));

/* watchdog.c: the client's watchdog thread renews a loop's holds
 * (dlock_loop_set_watchdog). After h's grant: make it a record of the
 * client's registry with the watchdog on (h->wd), when the loop asks for
 * it and h is renewed; else (or out of memory) the loop renews it. */
void dloop__wd_adopt(dlock_hold *h);
/* h's record leaves the registry (the watchdog stops): before a release,
 * a downgrade, h's end. No-op without one. */
void dloop__wd_drop(dlock_hold *h);
/* h's record (h->wd set) as the watchdog left it: DLOCK_OK, DLOCK_LOST
 * or DLOCK_NOT_OWNER (as dlock_lock_status), its validity left in
 * *left_ms and, once lost, why in *why (each when not NULL). */
int dloop__wd_status(const dlock_hold *h, int64_t *left_ms, const char **why);

/* events.c: the client's metrics and events (on_event) for the loop's
 * operations, as the blocking API records them. op ends with status
 * (called by dloop__complete before it detaches anything): acquired,
 * busy, a wait given up, released; an extend's round trip. */
void dloop__ev_op_ended(dlock_op *op, int status);
/* h's lease was renewed by a call sent at sent_ms (a renewal round's or
 * an extend's). */
void dloop__ev_renewed(dlock_hold *h, int64_t sent_ms);
/* h was found lost with status. */
void dloop__ev_lost(dlock_hold *h, int status);
/* A renewal round sent at sent_ms was answered (its round trip). */
void dloop__ev_round(dlock_loop *l, int64_t sent_ms);
/* Count one of these in the client's stats. */
enum {
    DLOOP_EV_REQUEST,
    DLOOP_EV_BUSY,
    DLOOP_EV_WAIT,
    DLOOP_EV_WAKEUP,
    DLOOP_EV_RECONNECT
};
void dloop__ev_count(dlock_loop *l, int what);

#endif /* DLOCK_LOOP_IMPL_H */
