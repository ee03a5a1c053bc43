/*
 * pipe.h - one pipelined connection shared by many requesters on one
 * thread (pipe.c): what they write goes out in order, and each reply
 * expected is an entry of one FIFO that says whose it is. A requester
 * that goes away leaves its entries dropped (read and freed when they
 * come; one that carries a packed request is written again with it when
 * its reply is NOSCRIPT: a give-back sent by SHA to a server that lost
 * its scripts still reaches it). WAIT is shared: one is out at a time
 * (Redis holds a connection up while a WAIT waits), and the requesters
 * that ask meanwhile share the next, written when it is answered (a WAIT
 * counts every write before it on its connection). A pipe that fails
 * (the caller says so) closes its connection and every requester still
 * expecting something is told.
 *
 * Two users: the engine's lane set (engine/lanes.c: one pipe per node,
 * its entries the calls' replies) and the single-server loop's command
 * connection (loop/lconn.c: its entries the loop's requests). What an
 * entry's time means (a deadline, a quiet mark) is the user's. Above
 * conn.h only.
 */
#ifndef DLOCK_PIPE_H
#define DLOCK_PIPE_H

#include <stdint.h>

#include "io/conn.h"

/* An entry's kind that is the pipe's own: its shared WAIT. The users'
 * kinds are other numbers. */
#define DLOCK__PE_WAIT (-1)

/* A reply the pipe expects: whose (who, a, b: the requester's words),
 * or dropped (who NULL). */
typedef struct dlock__pentry {
    void *who;
    int a, b;
    int kind;     /* the requester's; DLOCK__PE_WAIT: the shared WAIT */
    char *resend; /* dropped: a packed request (dlock__pipe_pack) written
                     again when the reply is NOSCRIPT, or NULL (owned) */
    int64_t due;  /* the requester's time for it (monotonic ms) */
    uint64_t seq; /* its place among all the pipe's entries (set by
                     dlock__pipe_push) */
} dlock__pentry;

/* A requester waiting for the shared WAIT (who NULL: gone). */
typedef struct dlock__pwaiter {
    void *who;
    int a;
} dlock__pwaiter;

/* What the pipe tells its user (ud: the user's pointer). Each may write
 * on the pipe, add entries and waiters, or fail it. */
typedef struct dlock__pipe_ops {
    /* rep (owned) answers e, which is not dropped and not the WAIT. */
    void (*take)(void *ud, const dlock__pentry *e, redisReply *rep);
    /* The shared WAIT answered rep (read only, freed after) for w. */
    void (*acked)(void *ud, const dlock__pwaiter *w, const redisReply *rep);
    /* The pipe failed (rc, err): who (a) expected a reply or a WAIT's
     * answer (sent: the request may have reached Redis). */
    void (*lost)(void *ud, void *who, int a, int rc, const char *err);
    /* A WAIT was written (for the user's request count), or NULL. */
    void (*waited)(void *ud);
} dlock__pipe_ops;

typedef struct dlock__pipe {
    dlock__conn *conn; /* NULL: closed (failed, or not opened yet) */
    dlock__pentry *q;  /* expected replies q[qhead..qlen) */
    int qhead, qlen, qcap;
    int wait_out;       /* a shared WAIT written, not answered yet */
    dlock__pwaiter *wo; /* the requesters it answers (owned) */
    int nwo;
    dlock__pwaiter *pw; /* those waiting for the next one */
    int npw, cappw;
    int wait_n;          /* the WAIT's arguments: replicas, */
    int64_t wait_ms;     /* timeout, */
    int64_t wait_due;    /* and its entry's time */
    int64_t resend_ms;   /* a request resent (NOSCRIPT) is due this long
                            after it is written */
    uint64_t nseq;       /* entries pushed since it opened */
    uint64_t taking;     /* the seq of the entry whose reply is handed now */
    uint64_t src_at[64]; /* per script: the seq of the last request that
                            carried its source on this connection (0:
                            none since it opened) */
    const dlock__pipe_ops *ops;
    void *ud;
} dlock__pipe;

/* A blank pipe over conn (owned; NULL: none yet) for ops (ud). */
void dlock__pipe_init(dlock__pipe *p, dlock__conn *conn,
                      const dlock__pipe_ops *ops, void *ud);

/* Expect one more reply e (its command written on p->conn by the caller,
 * in the same order) at *pos (NULL: not asked) of the FIFO, there until
 * read, dropped or the pipe fails. DLOCK_OK or DLOCK_ENOMEM. */
int dlock__pipe_push(dlock__pipe *p, dlock__pentry e, int *pos);

/* The entry at pos when it is still expected, else NULL (a place read
 * or emptied since holds somebody else's: check who). */
dlock__pentry *dlock__pipe_at(dlock__pipe *p, int pos);

/* dlock__pipe_wait: who was waiting for the next WAIT already. */
#define DLOCK__PIPE_WAITING 1

/* Requester who (a) wrote writes a WAIT must count: it gets the answer of
 * one written after them (ops->acked): the one written now when none is
 * out, else the next (written when the one out is answered). nrep, ms:
 * WAIT's arguments; due: the WAIT entry's time. DLOCK_OK (it waits),
 * DLOCK__PIPE_WAITING (it was waiting for the next one already: its
 * writes go before that one too) or DLOCK_ENOMEM (it may wait still). */
int dlock__pipe_wait(dlock__pipe *p, void *who, int a, int nrep, int64_t ms,
                     int64_t due);

/* who (a) waits for no WAIT of p any more. */
void dlock__pipe_unwait(dlock__pipe *p, const void *who, int a);

/* Read what has arrived and hand each reply to its requester (dropped
 * ones freed, resent on NOSCRIPT when they carry a request). DLOCK_OK, or
 * the error of a broken reply stream (err set): fail the pipe then. */
int dlock__pipe_collect(dlock__pipe *p, char *err, size_t errlen);

/* The pipe failed (rc, err): its connection closed, its FIFO and waiters
 * emptied, each requester on them told (ops->lost), in order. The pipe
 * is blank after (a new connection may be given to it). */
void dlock__pipe_fail(dlock__pipe *p, int rc, const char *err);

/* 1 when p expects nothing (no reply, no WAIT). */
int dlock__pipe_idle(const dlock__pipe *p);

/* 1 when p's oldest expected reply is dropped (a WAIT: every requester
 * it answers gone) and its time has passed (now). */
int dlock__pipe_orphan_due(const dlock__pipe *p, int64_t now);

/* The source of script s (< 64) is written on p now (the request pushed
 * next is an EVAL of it). */
void dlock__pipe_sourced(dlock__pipe *p, int s);

/* 1 when the source of script s was written on p since it opened: a
 * request by SHA written after it finds s loaded (unless the script
 * cache is flushed meanwhile). */
int dlock__pipe_has_source(const dlock__pipe *p, int s);

/* The one rule for the request whose reply p hands now (ops->take), of
 * script s, sent by SHA and answered NOSCRIPT (again: it was sent again
 * by SHA so before): 1 when it goes again by SHA (a source of s was
 * written on p after it: ahead of the resend, it loads s first; once
 * only, so that a request goes with its source at its third try at most,
 * whatever the server does), 0 when it goes with its source (noted:
 * those answered NOSCRIPT after it go by SHA behind it). So a flushed
 * cache under 10,000 requests in flight costs one source per script and
 * connection, not 10,000. */
int dlock__pipe_noscript(dlock__pipe *p, int s, int again);

/* Close p's connection and free what it holds (it expects nothing the
 * user still waits for). */
void dlock__pipe_close(dlock__pipe *p);

/* The request argv[0..argc) (lens) packed in one allocation, argv[0..1]
 * replaced by EVAL src when src is not NULL (a script sent by SHA:
 * argv[1] its SHA); NULL out of memory. */
char *dlock__pipe_pack(const char *src, int argc, const char **argv,
                       const size_t *lens);

#endif /* DLOCK_PIPE_H */
