/*
 * holds.c - `dlock_bench holds`: what an acquire + release costs a client
 * that already holds many locks (issue 30: the registry of held locks was
 * a list walked on every acquire and release, and at 10,000 holds that
 * walk took most of the client's CPU).
 *
 *   dlock_bench holds -s URL [-k HOLDS] [-n CYCLES]
 *
 * One client, no watchdog. Three phases of CYCLES timed acquire + release
 * cycles on names of their own: with no other hold, then with HOLDS locks
 * held by the same thread (acquired between the phases, 600 s leases),
 * then with none again (released). The cost of a cycle is the client's
 * CPU time (getrusage: user + system, every thread) per cycle, which the
 * servers' speed does not enter; wall time per cycle is reported too.
 * cost_ratio = the middle phase's CPU per cycle / the mean of the outer
 * two (1.0: holding HOLDS locks costs nothing).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The process's CPU time so far, in ns. */
static int64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
           ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* One phase: CYCLES acquire + release cycles; CPU and wall ns per cycle
 * into cpu and wall. */
static void phase(dlock_client *c, long cycles, const char *tag, double *cpu,
                  double *wall)
{
    int64_t c0 = cpu_ns(), w0 = now_ns();
    char name[96];
    long i;
    for (i = 0; i < cycles; i++) {
        dlock_lock *l;
        int rc;
        snprintf(name, sizeof name, "bench:hc:%ld:%s:%ld", (long)getpid(), tag,
                 i % 64);
        rc = dlock_lock_acquire(&l, c, name, 0, 10000);
        if (rc != DLOCK_OK)
            die("acquire %s: %s", name, dlock_errmsg(c));
        rc = dlock_lock_release(l);
        if (rc != DLOCK_OK)
            die("release %s: %s", name, dlock_errmsg(c));
    }
    *cpu = (double)(cpu_ns() - c0) / (double)cycles;
    *wall = (double)(now_ns() - w0) / (double)cycles;
}

/* See the top of the file. */
int run_holds(const struct conf *cf)
{
    dlock_client *c = make_client(cf);
    long k = cf->nkeys, i;
    dlock_lock **held = calloc((size_t)k, sizeof *held);
    double cpu[3], wall[3], base;
    char name[96];

    if (held == NULL)
        die("%s", "out of memory");
    phase(c, cf->cycles / 10 + 10, "warm", &cpu[0], &wall[0]);
    phase(c, cf->cycles, "a", &cpu[0], &wall[0]);
    for (i = 0; i < k; i++) {
        snprintf(name, sizeof name, "bench:hh:%ld:%ld", (long)getpid(), i);
        if (dlock_lock_acquire(&held[i], c, name, 0, 600000) != DLOCK_OK)
            die("acquire %s: %s", name, dlock_errmsg(c));
    }
    phase(c, cf->cycles, "b", &cpu[1], &wall[1]);
    for (i = 0; i < k; i++)
        if (dlock_lock_release(held[i]) != DLOCK_OK)
            die("release of hold %ld: %s", i, dlock_errmsg(c));
    phase(c, cf->cycles, "c", &cpu[2], &wall[2]);
    base = (cpu[0] + cpu[2]) / 2;
    printf("{\"mode\":\"holds\",\"floor\":false,\"holds\":%ld,"
           "\"cycles\":%ld,\"cpu_us_per_cycle_none\":%.2f,"
           "\"cpu_us_per_cycle_held\":%.2f,\"cpu_us_per_cycle_after\":%.2f,"
           "\"wall_us_per_cycle_none\":%.2f,\"wall_us_per_cycle_held\":%.2f,"
           "\"wall_us_per_cycle_after\":%.2f,\"cost_ratio\":%.3f}\n",
           k, cf->cycles, cpu[0] / 1e3, cpu[1] / 1e3, cpu[2] / 1e3,
           wall[0] / 1e3, wall[1] / 1e3, wall[2] / 1e3,
           base > 0 ? cpu[1] / base : 0.0);
    dlock_client_free(c);
    free(held);
    return 0;
}
