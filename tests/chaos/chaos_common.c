/*
 * chaos_common.c - the helpers chaos_worker and chaos_prims share (see
 * chaos_common.h for each one's contract).
 */
#include "chaos_common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int64_t chaos_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void chaos_sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

uint64_t chaos_rnd(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != sizeof v)
        v = (uint64_t)chaos_now_ns() * 6364136223846793005ULL;
    return v;
}

int64_t chaos_rnd_in(int64_t lo, int64_t hi)
{
    return hi <= lo ? lo
                    : lo + (int64_t)(chaos_rnd() % (uint64_t)(hi - lo + 1));
}

void chaos_log(int fd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof buf && write(fd, buf, (size_t)n) < 0)
        fprintf(stderr, "%s: log: %s\n", program_invocation_short_name,
                strerror(errno));
}

int chaos_strategy(const char *name, dlock_wait_strategy *out)
{
    if (!strcmp(name, "notify"))
        *out = DLOCK_WAIT_NOTIFY;
    else if (!strcmp(name, "spin"))
        *out = DLOCK_WAIT_SPIN;
    else if (!strcmp(name, "fair"))
        *out = DLOCK_WAIT_FAIR;
    else
        return -1;
    return 0;
}

dlock_client *chaos_client(const dlock_options *o)
{
    dlock_client *c = NULL;
    char err[256] = "";
    dlock_options mine = *o;
    const char *keep = getenv("CHAOS_FENCE_RETENTION_MS");
    int rc;
    if (keep != NULL && *keep != '\0') /* issue 31: the layout without */
        mine.fence_retention_ms = atoll(keep);
    rc = dlock_client_new(&c, &mine, err, sizeof err);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "%s: client: %s: %s\n", program_invocation_short_name,
                dlock_status_name(rc), err);
        return NULL;
    }
    /* Issue 31: CHAOS_LAYOUT=string puts the clients that can use it
     * (notify or spin, one server or Redlock; fair on one server) in the
     * string layout; the others (fair over Redlock) keep the hash
     * layout, which is said once. */
    keep = getenv("CHAOS_LAYOUT");
    if (keep != NULL && strcmp(keep, "string") == 0 &&
        dlock_client_set_layout(c, DLOCK_LAYOUT_STRING) != DLOCK_OK) {
        static int said;
        if (!said++)
            fprintf(stderr, "%s: CHAOS_LAYOUT=string not applied: %s\n",
                    program_invocation_short_name, dlock_errmsg(c));
    }
    return c;
}

int chaos_wk_open(chaos_wk *w, char **argv)
{
    memset(w, 0, sizeof *w);
    w->urls = argv[2];
    w->name = argv[3];
    w->wid = atoi(argv[4]);
    w->fd = open(argv[5], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    w->until = chaos_now_ns() + atoll(argv[6]) * 1000000000LL;
    w->lease = atoll(argv[7]);
    w->hold = atoll(argv[8]);
    if (w->fd < 0) {
        fprintf(stderr, "%s: open log %s: %s\n", program_invocation_short_name,
                argv[5], strerror(errno));
        return -1;
    }
    signal(SIGPIPE, SIG_IGN);
    return 0;
}
