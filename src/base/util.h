/*
 * util.h - the bottom layer of libdlock: the monotonic clock, random
 * numbers, number formatting, error strings for callers' buffers,
 * interruptible sleeps, condition variables on the monotonic clock, and
 * the counters every layer bumps. No file of the library is below it; it
 * includes nothing of ours but dlock.h.
 */
#ifndef DLOCK_UTIL_H
#define DLOCK_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

/* A message buffer for one node's or one connection's failure. */
#define DLOCK__ERRLEN 256

/* The counters behind dlock_client_stats(); bumped by every layer. */
typedef struct dlock__stats {
    _Atomic uint64_t requests, acquisitions, busy, waits, wakeups, renewals,
        lost, reconnects;
} dlock__stats;

/* CLOCK_MONOTONIC in milliseconds / microseconds. */
int64_t dlock__now_ms(void);
int64_t dlock__now_us(void);

/* Fill buf with len bytes from getrandom(2). 0 or -1 (errno set). */
int dlock__random_bytes(void *buf, size_t len);

/* A uniformly random value in [0, bound) (bound > 0), from getrandom. */
uint64_t dlock__random_below(uint64_t bound);

/* snprintf into err (errlen bytes) when err is not NULL; returns code so
 * callers can write "return dlock__fail(err, n, DLOCK_EIO, ...)". */
int dlock__fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sleep until the monotonic deadline or until wake_fd becomes readable
 * (wake_fd < 0: none). Returns 1 if woken by the fd, 0 on timeout. */
int dlock__sleep_until(int64_t deadline_ms, int wake_fd);

/* Wait until fd is ready for events or the monotonic deadline passes:
 * 1 when ready (revents in *rev), 0 on timeout. EINTR waits on. */
int dlock__wait_fd(int fd, short events, int64_t deadline_ms, short *rev);

/*
 * The no-blocking guard (issue 28). A driver that must never block its
 * thread (an event loop's process, src/loop/) raises the thread's mark
 * around its work (dlock__nb_enter / dlock__nb_leave, nested). Every
 * blocking wait of the tiers below (a poll() with a timeout > 0, a sleep,
 * a wait for another thread's work) calls dlock__nb_blocking() first,
 * which counts it when the mark is up. dlock__nb_blocked() is the count
 * for the whole process (tests read it: 0 means the loop never blocked).
 */
void dlock__nb_enter(void);
void dlock__nb_leave(void);
void dlock__nb_blocking(void);
uint64_t dlock__nb_blocked(void);

/* The blocking drivers' one wait: poll fd (-1: none, a sleep) for
 * events until the monotonic wake_ms (at most a minute), counted by the
 * no-blocking guard. Its revents, 0 when none (timeout, EINTR). */
short dlock__poll_until(int fd, short events, int64_t wake_ms);

/* Milliseconds left until deadline_ms for poll(), in [0, INT_MAX]. */
int dlock__ms_left(int64_t deadline_ms);

/* 1 when name is an IPv4 or IPv6 literal. */
int dlock__is_ip_literal(const char *name);

/* Decimal digits of v at buf, no NUL (at most 20); returns the count. */
size_t dlock__fmt_u64(char *buf, uint64_t v);
/* Signed, NUL-terminated (buf of 21 bytes at least); returns the length. */
size_t dlock__fmt_i64(char *buf, int64_t v);

/* Room for element n in arr (*cap elements of elem bytes): arr itself,
 * or when n == *cap a copy twice as long (first when *cap is 0; *cap
 * set). NULL out of memory, arr then unchanged. */
void *dlock__room(void *arr, int *cap, int n, size_t elem, int first);

/* Exponential backoff with jitter for spin waiting: min_ms doubled round
 * times, capped at max_ms, then uniform in [d/2, d]. */
int64_t dlock__backoff_ms(int64_t min_ms, int64_t max_ms, int round);

/* Drift allowance for a lease: lease * ppm / 10^6 + fixed_ms (no overflow
 * for any lease up to a year). */
int64_t dlock__drift_ms(int64_t lease_ms, int64_t ppm, int64_t fixed_ms);

/* Initialise a condition variable on CLOCK_MONOTONIC. */
int dlock__cond_init(pthread_cond_t *cv);

/* Monotonic pthread_cond_timedwait until deadline (ms; < 0 = forever).
 * Returns 0 when signalled, ETIMEDOUT when the deadline passed. */
int dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
                           int64_t deadline_ms);

/* The calling thread's kernel id (informational, in owner ids). */
long dlock__thread_id(void);

/* A number for the calling thread, never 0 and never given to another
 * thread of the process, even after this one has ended: what reentrancy
 * is keyed on. A pthread_t or a kernel thread id is not that: glibc hands
 * a joined thread's pthread_t to the next thread it creates, and a later
 * thread would find the ended thread's holds as its own. */
uint64_t dlock__thread_serial(void);

#endif /* DLOCK_UTIL_H */
