/*
 * clockshift.c - LD_PRELOAD shim that shifts the wall clock of one process
 * (a redis-server in the clock_jump scenario of tests/chaos/run).
 *
 * CLOCKSHIFT_FILE names a file holding a signed offset in milliseconds;
 * gettimeofday(), time() and clock_gettime(CLOCK_REALTIME*) add it. The
 * file is re-read at most every 20 ms of CLOCK_MONOTONIC, so the driver
 * jumps the clock by rewriting it. Monotonic clocks are untouched, as in
 * a real wall-clock step (NTP step, VM restore). libfaketime hangs
 * redis-server here; this does only what the scenario needs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms;
static long long next_read_ns;

/* The real clock, straight from the kernel (no recursion through us). */
static int real_clock(clockid_t id, struct timespec *ts)
{
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static long long shift_ms(void)
{
    struct timespec m;
    real_clock(CLOCK_MONOTONIC, &m);
    long long now = (long long)m.tv_sec * 1000000000LL + m.tv_nsec;
    if (now >= next_read_ns) {
        next_read_ns = now + 20000000LL;
        const char *path = getenv("CLOCKSHIFT_FILE");
        FILE *f = path ? fopen(path, "re") : NULL;
        if (f) {
            long long v;
            if (fscanf(f, "%lld", &v) == 1)
                offset_ms = v;
            fclose(f);
        }
    }
    return offset_ms;
}

static void add(struct timespec *ts, long long ms)
{
    long long ns =
        (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ms * 1000000LL;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = real_clock(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        add(ts, shift_ms());
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    (void)tz;
    struct timespec ts;
    int rc = real_clock(CLOCK_REALTIME, &ts);
    if (rc == 0) {
        add(&ts, shift_ms());
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
