/*
 * th_monitor.h - what a server executed, as it was sent (th_monitor.c):
 * a MONITOR connection, the runs of one of the library's scripts read
 * from it (their arguments unescaped), and such a run sent again later,
 * exactly as it was: a message of the library delivered late, for the
 * tests of what a late message may do (sentinel_giveback.c,
 * redlock_giveback.c).
 */
#ifndef DLOCK_TEST_TH_MONITOR_H
#define DLOCK_TEST_TH_MONITOR_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "harness.h"

#define TH_RUN_MAX_ARGS 24

/* One command: its arguments (each malloc'd, NUL-terminated) and their
 * lengths. */
typedef struct th_run {
    int argc;
    char *argv[TH_RUN_MAX_ARGS];
    size_t len[TH_RUN_MAX_ARGS];
} th_run;

void th_run_free(th_run *r);

/* A MONITOR connection to s (5 s timeouts), or NULL (on stderr). */
redisContext *th_monitor_open(const th_server *s);

/*
 * Read m up to now (an ECHO marker sent to s, m's server) and keep in out
 * (at most max; *n set) the runs of the script whose source contains
 * mark, with key as KEYS[1]: sent as EVAL with the source, or as EVALSHA
 * once an EVAL showed the source (its SHA from SCRIPT LOAD). *src, when
 * not NULL and still NULL, gets a malloc'd copy of the source. 0, or -1
 * (on stderr).
 */
int th_monitor_runs(redisContext *m, const th_server *s, const char *mark,
                    const char *key, th_run *out, int max, int *n, char **src);

/* Send r to s again as it was sent, on a new connection. 0, or -1 (on
 * stderr). */
int th_run_replay(const th_server *s, const th_run *r);

#endif /* DLOCK_TEST_TH_MONITOR_H */
