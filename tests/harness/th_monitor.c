/*
 * th_monitor.c - a server's MONITOR stream read into commands, and a
 * command sent again as it was (see th_monitor.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "th_monitor.h"

void th_run_free(th_run *r)
{
    int i;
    for (i = 0; i < r->argc; i++)
        free(r->argv[i]);
    r->argc = 0;
}

/* The value of hex digit ch, or -1. */
static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* One escape of Redis's quoting (sdscatrepr) at *pp (after the
 * backslash) into *out; *pp advanced past it. 0, or -1. */
static int unescape(const char **pp, char *out)
{
    const char *p = *pp;
    switch (*p) {
    case 'n':
        *out = '\n';
        break;
    case 'r':
        *out = '\r';
        break;
    case 't':
        *out = '\t';
        break;
    case 'a':
        *out = '\a';
        break;
    case 'b':
        *out = '\b';
        break;
    case 'x':
        if (hexval(p[1]) < 0 || hexval(p[2]) < 0)
            return -1;
        *out = (char)(hexval(p[1]) * 16 + hexval(p[2]));
        p += 2;
        break;
    case '\0':
        return -1;
    default:
        *out = *p;
        break; /* \\ and \" */
    }
    *pp = p + 1;
    return 0;
}

/* One quoted argument at *pp into a new string (r's next); *pp advanced
 * past its closing quote. 0, or -1. */
static int take_arg(const char **pp, th_run *r)
{
    const char *p = *pp;
    char *out;
    size_t n = 0;
    if (*p != '"' || r->argc == TH_RUN_MAX_ARGS)
        return -1;
    p++;
    out = malloc(strlen(p) + 1);
    if (out == NULL)
        return -1;
    while (*p != '"') {
        if (*p == '\0') {
            free(out);
            return -1;
        }
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        p++;
        if (unescape(&p, out + n) < 0) {
            free(out);
            return -1;
        }
        n++;
    }
    out[n] = '\0';
    r->argv[r->argc] = out;
    r->len[r->argc] = n;
    r->argc++;
    *pp = p + 1;
    return 0;
}

/* Parse a MONITOR line ('<time> [<db> <client>] "arg" "arg" ...') into
 * *r. 0, or -1 for a line of another shape (r left empty). */
static int parse_line(const char *line, th_run *r)
{
    const char *p = strchr(line, ']');
    r->argc = 0;
    if (p == NULL)
        return -1;
    p++;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            return r->argc > 0 ? 0 : -1;
        if (take_arg(&p, r) < 0) {
            th_run_free(r);
            return -1;
        }
    }
}

redisContext *th_monitor_open(const th_server *s)
{
    struct timeval tv = {5, 0};
    redisContext *m = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    redisReply *r;
    if (m == NULL || m->err) {
        fprintf(stderr, "th_monitor_open: %d: %s\n", s->port,
                m != NULL ? m->errstr : "out of memory");
        redisFree(m);
        return NULL;
    }
    redisSetTimeout(m, tv);
    r = redisCommand(m, "MONITOR");
    if (r == NULL || r->type != REDIS_REPLY_STATUS) {
        fprintf(stderr, "th_monitor_open: %d: MONITOR refused\n", s->port);
        if (r != NULL)
            freeReplyObject(r);
        redisFree(m);
        return NULL;
    }
    freeReplyObject(r);
    return m;
}

/* Is r a run of the script whose source contains mark (by its source,
 * or by sha once known), on key? */
static int is_run(const th_run *r, const char *mark, const char *sha,
                  const char *key)
{
    if (r->argc < 4 || strcmp(r->argv[3], key) != 0)
        return 0;
    if (strcasecmp(r->argv[0], "EVAL") == 0)
        return strstr(r->argv[1], mark) != NULL;
    return strcasecmp(r->argv[0], "EVALSHA") == 0 && sha[0] != '\0' &&
           strcasecmp(r->argv[1], sha) == 0;
}

/* The SHA of source (SCRIPT LOAD on s) into sha (48 bytes). 0, or -1. */
static int learn_sha(const th_server *s, const char *src, size_t len, char *sha)
{
    redisReply *l = th_cmd(s, "SCRIPT LOAD %b", src, len);
    int ok = l != NULL && l->type == REDIS_REPLY_STRING && l->len < 48;
    if (ok)
        memcpy(sha, l->str, l->len + 1);
    if (l != NULL)
        freeReplyObject(l);
    return ok ? 0 : -1;
}

int th_monitor_runs(redisContext *m, const th_server *s, const char *mark,
                    const char *key, th_run *out, int max, int *n, char **src)
{
    char marker[64], sha[48] = "";
    redisReply *r;
    *n = 0;
    snprintf(marker, sizeof marker, "th-monitor-marker-%lld",
             (long long)th_now_ms());
    r = th_cmd(s, "ECHO %s", marker);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    for (;;) {
        th_run x;
        void *v = NULL;
        if (redisGetReply(m, &v) != REDIS_OK) {
            fprintf(stderr, "th_monitor_runs: %d: %s\n", s->port, m->errstr);
            return -1;
        }
        r = v;
        if (r->type != REDIS_REPLY_STATUS) {
            freeReplyObject(r);
            return -1;
        }
        if (strstr(r->str, marker) != NULL) {
            freeReplyObject(r);
            return 0;
        }
        if (strstr(r->str, "EVAL") == NULL || parse_line(r->str, &x) != 0) {
            freeReplyObject(r);
            continue;
        }
        freeReplyObject(r);
        if (x.argc >= 2 && strcasecmp(x.argv[0], "EVAL") == 0 &&
            strstr(x.argv[1], mark) != NULL) {
            if (sha[0] == '\0' && learn_sha(s, x.argv[1], x.len[1], sha) < 0)
                fprintf(stderr, "th_monitor_runs: no SHA for %s\n", mark);
            if (src != NULL && *src == NULL &&
                (*src = malloc(x.len[1] + 1)) != NULL)
                memcpy(*src, x.argv[1], x.len[1] + 1);
        }
        if (is_run(&x, mark, sha, key) && *n < max) {
            out[(*n)++] = x;
            continue;
        }
        th_run_free(&x);
    }
}

int th_run_replay(const th_server *s, const th_run *r)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    redisReply *rep;
    const char *argv[TH_RUN_MAX_ARGS];
    int i;
    if (c == NULL || c->err) {
        redisFree(c);
        return -1;
    }
    for (i = 0; i < r->argc; i++)
        argv[i] = r->argv[i];
    rep = redisCommandArgv(c, r->argc, argv, r->len);
    redisFree(c);
    if (rep == NULL)
        return -1;
    freeReplyObject(rep);
    return 0;
}
