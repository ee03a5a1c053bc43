/*
 * chaos_common.h - what the fault-injection suite's C workers share:
 * chaos_worker.c (the classic scenarios) and prims.c (chaos_prims, the
 * primitives' scenarios). tests/chaos/run compiles chaos_common.c into
 * both programs.
 *
 * Times are CLOCK_MONOTONIC nanoseconds (system-wide, so logs of several
 * processes compare); messages start with the program's name
 * (program_invocation_short_name: chaos_worker or chaos_prims).
 */
#ifndef DLOCK_CHAOS_COMMON_H
#define DLOCK_CHAOS_COMMON_H

#include <stdint.h>

#include <dlock.h>

/* CLOCK_MONOTONIC in nanoseconds: comparable across processes. */
int64_t chaos_now_ns(void);

/* Sleep for ms milliseconds (restarted on EINTR). */
void chaos_sleep_ms(int64_t ms);

/* 64 random bits from getrandom(2) (a clock-derived value if it fails). */
uint64_t chaos_rnd(void);

/* A random number in [lo, hi] (lo when hi <= lo). */
int64_t chaos_rnd_in(int64_t lo, int64_t hi);

/* Append the formatted line to fd in one write(2), so that a worker
 * killed -9 leaves only whole lines. A line longer than 511 bytes is
 * dropped; a failed write is reported on stderr. */
void chaos_log(int fd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "notify", "spin" or "fair" into *out: 0, or -1 for any other name
 * (*out untouched). */
int chaos_strategy(const char *name, dlock_wait_strategy *out);

/* dlock_client_new(o), with CHAOS_FENCE_RETENTION_MS (when set) as the
 * fence retention (issue 31): the client, or NULL with "PROG: client:
 * STATUS: detail" on stderr. */
dlock_client *chaos_client(const dlock_options *o);

/* The arguments every worker mode starts with, and its log. */
typedef struct chaos_wk {
    char *urls;          /* argv[2]: the servers (the caller makes a client) */
    const char *name;    /* argv[3]: the lock's name */
    int wid;             /* argv[4]: this worker's id */
    int fd;              /* argv[5]: its log, opened for append */
    int64_t until;       /* argv[6]: seconds to run, as a chaos_now_ns() end */
    int64_t lease, hold; /* argv[7], argv[8]: lease and hold in ms */
} chaos_wk;

/* The worker prologue: argv is MODE... as main got it, argv[2..8] being
 * URLS NAME WID LOG SECS LEASE_MS HOLD_MS (the caller has checked argc).
 * Fills *w, opens the log (O_APPEND, created 0644) and ignores SIGPIPE
 * (a server killed mid-write must not kill the worker). 0, or -1 with
 * the reason on stderr when the log cannot be opened. */
int chaos_wk_open(chaos_wk *w, char **argv);

#endif /* DLOCK_CHAOS_COMMON_H */
