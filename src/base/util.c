/*
 * util.c - small helpers every layer uses: the monotonic clock, random
 * numbers from getrandom(2), error messages, interruptible sleeps and
 * waits on one socket, condition variables on the monotonic clock, and
 * number formatting. No state lives here. See util.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

/* CLOCK_MONOTONIC in milliseconds. Never fails on Linux. */
int64_t dlock__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in microseconds. */
int64_t dlock__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Fill buf from getrandom(2), retrying on EINTR and short reads. Returns 0,
 * or -1 with errno set when the kernel refuses. */
int dlock__random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A uniform value in [0, bound), rejecting the biased top of the range.
 * Falls back to the clock only if getrandom fails, which on Linux >= 3.17
 * it does not once the pool is initialised; jitter needs no secrecy. */
uint64_t dlock__random_below(uint64_t bound)
{
    uint64_t x, limit;
    if (bound <= 1)
        return 0;
    limit = UINT64_MAX - UINT64_MAX % bound;
    do {
        if (dlock__random_bytes(&x, sizeof x) != 0)
            x = (uint64_t)dlock__now_us() * 6364136223846793005ULL;
    } while (x >= limit);
    return x % bound;
}

/* Format a message into err (if given) and hand back code. */
int dlock__fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* The no-blocking guard: the thread's mark and the count of blocking
 * waits made under it (see util.h). */
static _Thread_local int nb_depth;
static _Atomic uint64_t nb_count;

/* See util.h. */
void dlock__nb_enter(void)
{
    nb_depth++;
}

/* See util.h. */
void dlock__nb_leave(void)
{
    nb_depth--;
}

/* See util.h. */
void dlock__nb_blocking(void)
{
    if (nb_depth > 0)
        atomic_fetch_add(&nb_count, 1);
}

/* See util.h. */
uint64_t dlock__nb_blocked(void)
{
    return atomic_load(&nb_count);
}

/* See util.h. */
short dlock__poll_until(int fd, short events, int64_t wake_ms)
{
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int64_t left = wake_ms - dlock__now_ms();
    left = left < 0 ? 0 : left > 60000 ? 60000 : left;
    if (left > 0)
        dlock__nb_blocking();
    if (poll(&p, fd >= 0 ? 1 : 0, (int)left) <= 0)
        return 0;
    return p.revents;
}

/* Sleep on poll() so a wake fd can cut the sleep short. EINTR just loops:
 * the deadline is absolute. */
int dlock__sleep_until(int64_t deadline_ms, int wake_fd)
{
    for (;;) {
        int64_t left = deadline_ms - dlock__now_ms();
        struct pollfd p = {.fd = wake_fd, .events = POLLIN, .revents = 0};
        int r;
        if (left <= 0)
            return 0;
        dlock__nb_blocking();
        r = poll(&p, wake_fd >= 0 ? 1 : 0,
                 left > 1000000 ? 1000000 : (int)left);
        if (r > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
            return 1;
    }
}

/* Exponential backoff with jitter: d = min_ms doubled `round` times, capped
 * at max_ms; the result is uniform in [d/2, d] so that contenders that
 * failed together do not retry together. */
int64_t dlock__backoff_ms(int64_t min_ms, int64_t max_ms, int round)
{
    int64_t d = min_ms;
    int i;
    for (i = 0; i < round && d < max_ms; i++)
        d *= 2;
    if (d > max_ms)
        d = max_ms;
    return d / 2 + (int64_t)dlock__random_below((uint64_t)(d - d / 2) + 1);
}

/* The clock drift allowed for a lease: ppm parts per million of it plus a
 * fixed part (Redlock: 1% + 2 ms). Validity = lease - elapsed - drift. */
int64_t dlock__drift_ms(int64_t lease_ms, int64_t ppm, int64_t fixed_ms)
{
    return lease_ms / 1000000 * ppm + lease_ms % 1000000 * ppm / 1000000 +
           fixed_ms;
}

/* Decimal digits of v at buf (no NUL); returns their count (<= 20).
 * snprintf costs ~1000 instructions a number; this is on every request's
 * path (RESP lengths, script arguments). */
size_t dlock__fmt_u64(char *buf, uint64_t v)
{
    size_t n = 1, i;
    uint64_t t;
    if (v < 10) { /* most RESP lengths and counts: one digit */
        buf[0] = (char)('0' + v);
        return 1;
    }
    for (t = v; t >= 10; t /= 10)
        n++;
    for (i = n; i > 0; v /= 10) /* written from the last digit back */
        buf[--i] = (char)('0' + v % 10);
    return n;
}

/* As dlock__fmt_u64 for a signed value, NUL-terminated (buf >= 21 bytes);
 * returns the length. */
size_t dlock__fmt_i64(char *buf, int64_t v)
{
    size_t n;
    if (v < 0) {
        buf[0] = '-';
        n = 1 + dlock__fmt_u64(buf + 1, (uint64_t)0 - (uint64_t)v);
    } else {
        n = dlock__fmt_u64(buf, (uint64_t)v);
    }
    buf[n] = '\0';
    return n;
}

/* See util.h. */
int dlock__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/* See util.h. */
int dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
                           int64_t deadline_ms)
{
    struct timespec ts;
    if (deadline_ms < 0)
        return pthread_cond_wait(cv, mu);
    ts.tv_sec = (time_t)(deadline_ms / 1000);
    ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
    return pthread_cond_timedwait(cv, mu, &ts);
}

/* The calling thread's kernel id, asked once per thread (a gettid per
 * acquisition was one system call in 14 of a contended cycle). A child
 * made by fork() has one thread, with a new id, and inherits the forking
 * thread's copy: the atfork handler forgets it there. */
static _Thread_local long cached_tid;
static pthread_once_t tid_once = PTHREAD_ONCE_INIT;

static void tid_forget(void)
{
    cached_tid = 0;
}

static void tid_watch_fork(void)
{
    (void)pthread_atfork(NULL, NULL, tid_forget);
}

/* See util.h. The kernel thread id: unique among live threads, which is
 * what an owner id needs. */
long dlock__thread_id(void)
{
    if (cached_tid == 0) {
        (void)pthread_once(&tid_once, tid_watch_fork);
        cached_tid = (long)syscall(SYS_gettid);
    }
    return cached_tid;
}

/* See util.h. */
uint64_t dlock__thread_serial(void)
{
    static _Atomic uint64_t next;
    static _Thread_local uint64_t mine;
    if (mine == 0)
        mine = atomic_fetch_add(&next, 1) + 1;
    return mine;
}

/* Milliseconds left until deadline for poll(), clamped to [0, INT_MAX]. */
int dlock__ms_left(int64_t deadline_ms)
{
    int64_t left = deadline_ms - dlock__now_ms();
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/*
 * Wait until fd is ready for events or the deadline passes. Returns 1
 * when ready (revents in *rev), 0 on timeout. EINTR restarts the wait with
 * the time that is left.
 */
int dlock__wait_fd(int fd, short events, int64_t deadline_ms, short *rev)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events, .revents = 0};
        int r;
        if (dlock__ms_left(deadline_ms) > 0)
            dlock__nb_blocking();
        r = poll(&p, 1, dlock__ms_left(deadline_ms));
        if (r > 0) {
            *rev = p.revents;
            return 1;
        }
        if (r == 0 || (errno != EINTR && errno != EAGAIN))
            return 0;
        if (dlock__now_ms() >= deadline_ms)
            return 0;
    }
}

/* 1 when name is an IPv4 or IPv6 literal. */
int dlock__is_ip_literal(const char *name)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, name, buf) == 1 ||
           inet_pton(AF_INET6, name, buf) == 1;
}

/* See util.h. */
void *dlock__room(void *arr, int *cap, int n, size_t elem, int first)
{
    int c = *cap ? 2 * *cap : first;
    void *p;
    if (n < *cap)
        return arr;
    p = realloc(arr, (size_t)c * elem);
    if (p != NULL)
        *cap = c;
    return p;
}
