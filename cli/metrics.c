/*
 * metrics.c - `dlock run --metrics-file PATH`: when run ends, write the
 * client's counters and latency histograms (dlock_client_metrics) and the
 * run's exit status in Prometheus's text format, for node_exporter's
 * textfile collector: written to a temporary file in PATH's directory and
 * renamed over PATH, so the collector never reads half a file. Every
 * sample carries the label lock="KEY". Calls include/dlock.h and
 * report.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Write S as a Prometheus label value (\, " and newline escaped). The
 * text format is UTF-8: a byte outside a valid UTF-8 sequence is written
 * as the character of the same number (its Latin-1 reading, U+0080 to
 * U+00FF), as the JSON output does (cli_json_string). */
static void label_value(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        int n = *p >= 0x80 ? cli_utf8_len(p) : 1;
        if (n == 0) {
            fputc(0xc0 | *p >> 6, f);
            fputc(0x80 | (*p & 0x3f), f);
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, (size_t)n, f);
            p += n - 1;
            continue;
        }
        if (*p == '\\' || *p == '"')
            fputc('\\', f);
        if (*p == '\n')
            fputs("\\n", f);
        else
            fputc(*p, f);
    }
}

/* One counter or gauge with its HELP and TYPE lines. */
static void sample(FILE *f, const char *lock, const char *name,
                   const char *type, const char *help, double v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s{lock=\"", name, help, name, type,
            name);
    label_value(f, lock);
    fprintf(f, "\"} %.17g\n", v);
}

/* One histogram: cumulative le buckets in seconds, _sum and _count. */
static void histogram(FILE *f, const char *lock, const char *name,
                      const char *help, const dlock_histogram *h)
{
    uint64_t run = 0;
    int i;

    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (i = 0; i < DLOCK_HIST_BUCKETS; i++) {
        int64_t b = dlock_histogram_bound_us(i);
        run += h->bucket[i];
        fprintf(f, "%s_bucket{lock=\"", name);
        label_value(f, lock);
        if (b >= 0)
            fprintf(f, "\",le=\"%g\"} %llu\n", (double)b / 1e6,
                    (unsigned long long)run);
        else
            fprintf(f, "\",le=\"+Inf\"} %llu\n", (unsigned long long)run);
    }
    fprintf(f, "%s_sum{lock=\"", name);
    label_value(f, lock);
    fprintf(f, "\"} %.6f\n%s_count{lock=\"", (double)h->sum_us / 1e6, name);
    label_value(f, lock);
    fprintf(f, "\"} %llu\n", (unsigned long long)h->count);
}

/* The whole file's content. */
static void write_all(FILE *f, const char *lock, const dlock_metrics *m,
                      int code)
{
    const dlock_stats *s = &m->stats;
    struct timespec now;

    sample(f, lock, "dlock_requests_total", "counter",
           "Commands sent to the Redis servers.", (double)s->requests);
    sample(f, lock, "dlock_acquisitions_total", "counter",
           "Successful acquires.", (double)s->acquisitions);
    sample(f, lock, "dlock_busy_total", "counter",
           "Acquire attempts that found the lock held.", (double)s->busy);
    sample(f, lock, "dlock_waits_total", "counter",
           "Times the acquire went to sleep waiting.", (double)s->waits);
    sample(f, lock, "dlock_wakeups_total", "counter",
           "Release notifications that woke the waiter.", (double)s->wakeups);
    sample(f, lock, "dlock_renewals_total", "counter",
           "Lease renewals by the watchdog.", (double)s->renewals);
    sample(f, lock, "dlock_lost_total", "counter", "Leases found lost.",
           (double)s->lost);
    sample(f, lock, "dlock_reconnects_total", "counter",
           "Connections (re)opened.", (double)s->reconnects);
    histogram(f, lock, "dlock_acquire_wait_seconds",
              "Time from the start of an acquire to the lock.",
              &m->acquire_wait);
    histogram(f, lock, "dlock_hold_seconds",
              "Time from the acquisition to the release.", &m->hold);
    histogram(f, lock, "dlock_renewal_seconds",
              "Round trip of a lease renewal.", &m->renewal);
    sample(f, lock, "dlock_run_exit_code", "gauge",
           "Exit status of the last dlock run.", (double)code);
    clock_gettime(CLOCK_REALTIME, &now);
    sample(f, lock, "dlock_run_end_timestamp_seconds", "gauge",
           "When the last dlock run ended (Unix time).",
           (double)now.tv_sec + (double)now.tv_nsec / 1e9);
}

/* See cli.h. */
int cli_metrics_write(const struct cli *o, dlock_client *c, int code)
{
    dlock_metrics m;
    char *tmp;
    FILE *f;
    int fd, err = 0;

    dlock_client_metrics(c, &m);
    if (asprintf(&tmp, "%s.XXXXXX", o->metrics_file) < 0) {
        cli_err("--metrics-file: out of memory");
        return -1;
    }
    fd = mkstemp(tmp);
    if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
        cli_err("--metrics-file %s: cannot create %s: %s", o->metrics_file, tmp,
                strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        return -1;
    }
    write_all(f, o->key, &m, code);
    if (fflush(f) != 0 || ferror(f) || fsync(fd) != 0)
        err = errno != 0 ? errno : EIO;
    if (fclose(f) != 0 && err == 0)
        err = errno;
    /* The collector reads files as they are: 0644 like node_exporter's. */
    if (err == 0 && chmod(tmp, 0644) != 0)
        err = errno;
    if (err == 0 && rename(tmp, o->metrics_file) != 0)
        err = errno;
    if (err != 0) {
        cli_err("--metrics-file %s: %s", o->metrics_file, strerror(err));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    cli_verbose(o, "metrics written to %s", o->metrics_file);
    free(tmp);
    return 0;
}
