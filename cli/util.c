/*
 * util.c - pure helpers of the dlock tool: strict parsing of durations and
 * exit codes, hiding passwords in server URLs, and quoting for JSON and for
 * the shell. Nothing here talks to a server or keeps state.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The longest duration accepted anywhere: ten years, far below where
 * milliseconds would overflow an int64_t. */
#define MAX_SECONDS 315360000.0

/*
 * Parse SECONDS as a non-negative decimal number of seconds ("5", "0.25",
 * "1e3") into milliseconds, rounded to the nearest millisecond but never
 * down to 0 for a positive value. Signs, whitespace, hex, "inf", "nan" and
 * values beyond ten years are rejected. Returns 0 on success; -1 with *why
 * set to a short reason otherwise.
 */
int cli_parse_seconds(const char *s, int64_t *ms, const char **why)
{
    const char *p = s;
    size_t digits = 0;
    char *end;
    double v;

    if (*p == '\0') {
        *why = "empty";
        return -1;
    }
    if (*p == '-') {
        *why = "must not be negative";
        return -1;
    }
    /* strtod alone accepts too much ("0x1p3", " 5", "inf"): check the
     * shape first. */
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0) {
        *why = "not a number of seconds";
        return -1;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p)) {
            *why = "not a number of seconds";
            return -1;
        }
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p != '\0') {
        *why = "not a number of seconds";
        return -1;
    }
    errno = 0;
    v = strtod(s, &end);
    if (errno == ERANGE || !isfinite(v) || v > MAX_SECONDS) {
        *why = "out of range";
        return -1;
    }
    *ms = (int64_t)llround(v * 1000.0);
    if (*ms == 0 && v > 0)
        *ms = 1;
    return 0;
}

/* Parse an exit status: a decimal integer from 0 to 255, nothing else.
 * Returns 0 on success, -1 otherwise. */
int cli_parse_code(const char *s, int *code)
{
    long v = 0;
    const char *p = s;

    if (*p == '\0')
        return -1;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (*p - '0');
        if (v > 255)
            return -1;
    }
    *code = (int)v;
    return 0;
}

/*
 * Check a --slot NAME: 1 to CLI_MAX_SLOT_LEN bytes, no ':' (the done-marker
 * is named "KEY:SLOT" and split at its last ':'), no control character and
 * no blank (it is shown in messages and in Redis key names). Returns NULL
 * when it is fine, else a short reason.
 */
const char *cli_check_slot_name(const char *s)
{
    size_t n = strlen(s);

    if (n == 0)
        return "empty";
    if (n > CLI_MAX_SLOT_LEN)
        return "longer than 128 bytes";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == ':')
            return "must not contain ':'";
        if (*p <= ' ' || *p == 0x7f)
            return "must not contain blanks or control characters";
    }
    return NULL;
}

/* Find the password inside URL's userinfo ("scheme://user:PASSWORD@..."):
 * sets *start and *len and returns 1, or returns 0 when there is none. */
static int find_password(const char *url, size_t *start, size_t *len)
{
    const char *auth = strstr(url, "://");
    const char *end, *at, *colon;

    if (auth == NULL)
        return 0;
    auth += 3;
    end = auth + strcspn(auth, "/?#");
    at = NULL;
    for (const char *q = auth; q < end; q++)
        if (*q == '@')
            at = q;
    if (at == NULL)
        return 0;
    colon = memchr(auth, ':', (size_t)(at - auth));
    if (colon == NULL)
        return 0;
    *start = (size_t)(colon + 1 - url);
    *len = (size_t)(at - colon - 1);
    return 1;
}

/*
 * Copy URL to OUT (at most OUTLEN bytes, always terminated) with the
 * password of its userinfo replaced by "***", so that it can be printed.
 */
void cli_redact_url(const char *url, char *out, size_t outlen)
{
    size_t start, len;

    if (outlen == 0)
        return;
    if (!find_password(url, &start, &len)) {
        snprintf(out, outlen, "%s", url);
        return;
    }
    snprintf(out, outlen, "%.*s***%s", (int)start, url, url + start + len);
}

/*
 * Overwrite, in place, the password of URL with 'x' characters. Used on the
 * argv strings after they were copied, so that /proc/PID/cmdline stops
 * showing the password (it was readable until then: the man page says to
 * use DLOCK_PASSWORD). Returns 1 if there was a password, else 0.
 */
int cli_mask_password(char *url)
{
    size_t start, len;

    if (!find_password(url, &start, &len) || len == 0)
        return 0;
    memset(url + start, 'x', len);
    return 1;
}

/* See cli.h. UTF-8 as RFC 3629 has it: no overlong forms, no surrogates,
 * nothing above U+10FFFF. */
int cli_utf8_len(const unsigned char *p)
{
    int n, i;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    for (i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

/* Write S to F as a JSON string literal, escaping quotes, backslashes and
 * control characters. Valid UTF-8 passes as it is; a byte outside a valid
 * UTF-8 sequence is written \u00XX, the character of the same number
 * (its Latin-1 reading), so that the output is always UTF-8. */
void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x80) {
            int n = cli_utf8_len(p);
            if (n == 0) {
                fprintf(f, "\\u%04x", *p);
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += n - 1;
            }
            continue;
        }
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Write S to F single-quoted for a POSIX shell ('it'\''s'), so that the
 * output of `dlock acquire --export` is safe to eval whatever the key. */
void cli_shell_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

/* Milliseconds on CLOCK_MONOTONIC, for measuring waits and grace periods. */
int64_t cli_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds since the Unix epoch on CLOCK_REALTIME, the wall clock the
 * slots of --once-per are cut from (the same clock cron fires by). */
int64_t cli_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Format a duration for people: "250 ms" below one second, "1.250 s"
 * from one second up. */
void cli_format_ms(int64_t ms, char *out, size_t outlen)
{
    if (ms < 1000)
        snprintf(out, outlen, "%lld ms", (long long)ms);
    else
        snprintf(out, outlen, "%lld.%03lld s", (long long)(ms / 1000),
                 (long long)(ms % 1000));
}

/* Parse a semaphore limit: a decimal 1 to DLOCK_SEM_LIMIT_MAX, nothing
 * else. 0, or -1. */
int cli_parse_limit(const char *s, int64_t *out)
{
    int64_t v = 0;
    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > DLOCK_SEM_LIMIT_MAX)
            return -1;
    }
    if (v < 1)
        return -1;
    *out = v;
    return 0;
}

/* See cli.h. */
char **cli_env_with(char **set, size_t nset)
{
    size_t n = 0, j = 0, i, k;
    char **env = NULL;

    for (k = 0; k < nset; k++)
        if (set[k] == NULL)
            goto fail;
    while (environ[n] != NULL)
        n++;
    env = calloc(n + nset + 1, sizeof *env);
    if (env == NULL)
        goto fail;
    for (i = 0; i < n; i++) {
        for (k = 0; k < nset; k++) {
            size_t len = strcspn(set[k], "=") + 1; /* "NAME=" */
            if (strncmp(environ[i], set[k], len) == 0)
                break;
        }
        if (k == nset)
            env[j++] = environ[i];
    }
    for (k = 0; k < nset; k++)
        env[j++] = set[k];
    return env;
fail:
    for (k = 0; k < nset; k++)
        free(set[k]);
    return NULL;
}

/* See cli.h. */
void cli_env_free(char **env, size_t nset)
{
    size_t n = 0;

    if (env == NULL)
        return;
    while (env[n] != NULL)
        n++;
    for (size_t k = n - nset; k < n; k++)
        free(env[k]);
    free(env);
}

/* See cli.h. */
char *cli_strf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    int rc;

    va_start(ap, fmt);
    rc = vasprintf(&s, fmt, ap);
    va_end(ap);
    return rc < 0 ? NULL : s;
}
