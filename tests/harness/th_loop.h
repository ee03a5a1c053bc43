/*
 * th_loop.h - helpers of the event-loop API's tests (dlock_loop.h): a
 * callback that notes what an operation completed with, and drivers that
 * run loops on the calling thread with poll() (th_loop.c).
 */
#ifndef TH_LOOP_H
#define TH_LOOP_H

#include <stdint.h>

#include "dlock_loop.h"

/* What an operation's callback saw (th_note). */
typedef struct th_seen {
    int done; /* callbacks run */
    int status;
    dlock_hold *hold;
    char err[256]; /* dlock_op_errmsg */
} th_seen;

/* A dlock_op_cb: userdata is a th_seen. */
void th_note(dlock_op *op, int status, dlock_hold *hold, void *userdata);

/* What a fenced op's callback saw (th_vnote): the th_seen, and
 * dlock_op_value's value (has: not NULL; its first 63 bytes in v,
 * NUL-terminated; its whole length in vl) and fence. */
typedef struct th_vseen {
    th_seen s;
    int has;
    char v[64];
    size_t vl;
    uint64_t fence;
} th_vseen;

/* A dlock_op_cb: userdata is a th_vseen. */
void th_vnote(dlock_op *op, int status, dlock_hold *hold, void *userdata);

/* Run loops ls[0..n) (n <= 8) until *flag is not 0: 0, or -1 after 30 s
 * (a hang: the caller fails). */
int th_loop_run(dlock_loop **ls, int n, const int *flag);

/* Run the loops for ms, whatever happens. */
void th_loop_run_for(dlock_loop **ls, int n, int64_t ms);

/* A new loop of c, or NULL (the message on stderr). */
dlock_loop *th_loop_new(dlock_client *c);

/* An acquire's options: c's defaults with wait_ms and lease_ms. */
dlock_loop_acquire th_loop_opts(const dlock_client *c, int64_t wait_ms,
                                int64_t lease_ms);

/* Acquire the lock NAME on l with o (NULL: the defaults) and run l until
 * it completes: its status (the message on stderr when not DLOCK_OK),
 * *hold its hold (or NULL). -1000: the call refused; -1001: the callback
 * ran from inside the call, or a hang (30 s). */
int th_loop_lock(dlock_loop *l, const char *name, const dlock_loop_acquire *o,
                 dlock_hold **hold);

/* Release h on l and run l until it completes: its status (-1000, -1001
 * as th_loop_lock). */
int th_loop_release(dlock_loop *l, dlock_hold *h);

#endif /* TH_LOOP_H */
