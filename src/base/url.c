/*
 * url.c - server URLs to dlock__endpoint.
 *
 * The client takes its servers as URLs (redis://, rediss:// for TLS,
 * unix:// for a local socket); this file turns one into the endpoint the
 * transport connects to, or says precisely what is wrong with it. It is
 * strict on purpose: a typo in a port or a database number must fail at
 * dlock_client_new(), not connect somewhere unexpected.
 *
 * Syntax accepted (see url.h):
 *   redis://[user[:password]@]host[:port][/db]
 *   rediss://[user[:password]@]host[:port][/db]
 *   unix://[user[:password]@]/absolute/path[?db=N]
 *
 * The user information ends at the last '@' of the authority, so a raw
 * '@' or ':' in a password works; '/' in a password must be written %2F.
 * Error messages never quote the user information, nor anything that could
 * be part of a mis-split password.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "base/url.h"

#define DEFAULT_PORT 6379
#define MAX_HOST 255

/* Free every string of ep and zero it, so it can be parsed into again or
 * dropped. A zeroed endpoint is fine. */
void dlock__endpoint_clear(dlock__endpoint *ep)
{
    if (ep == NULL)
        return;
    free(ep->host);
    free(ep->path);
    free(ep->user);
    if (ep->password != NULL) {
        /* Do not leave the secret lying in freed heap memory. */
        volatile char *p = ep->password;
        while (*p != '\0')
            *p++ = '\0';
        free(ep->password);
    }
    free(ep->display);
    memset(ep, 0, sizeof *ep);
}

/* A malloc'd copy of the len bytes at s, NUL-terminated; NULL when out of
 * memory. */
static char *dupn(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Value of one hex digit, or -1. */
static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Percent-decode the len bytes at s into a new string in *out. An empty
 * input gives *out = NULL (no value). Returns 0, -1 for a malformed escape
 * or one that decodes to NUL, -2 when out of memory.
 */
static int pct_decode(char **out, const char *s, size_t len)
{
    char *d;
    size_t i, n = 0;
    *out = NULL;
    if (len == 0)
        return 0;
    d = malloc(len + 1);
    if (d == NULL)
        return -2;
    for (i = 0; i < len; i++) {
        if (s[i] == '%') {
            int hi, lo;
            if (i + 2 >= len) {
                free(d);
                return -1;
            }
            hi = hexval(s[i + 1]);
            lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(d);
                return -1;
            }
            d[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            d[n++] = s[i];
        }
    }
    d[n] = '\0';
    *out = d;
    return 0;
}

/*
 * Parse the decimal number in the len bytes at s, which must be all digits
 * (at least one) and at most max. Returns the value, or -1.
 */
static long parse_num(const char *s, size_t len, long max)
{
    long v = 0;
    size_t i;
    if (len == 0)
        return -1;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v > max)
            return -1;
    }
    return v;
}

/* 1 when the len bytes at s are a plausible host name: letters, digits,
 * '-', '_' and '.', not starting with '-' or '.'. */
static int valid_hostname(const char *s, size_t len)
{
    size_t i;
    if (len == 0 || len > MAX_HOST || s[0] == '-' || s[0] == '.')
        return 0;
    for (i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

/*
 * Split the user information (len bytes at s, between "//" and the '@')
 * into ep->user and ep->password, percent-decoding both. Empty parts are
 * left NULL. DLOCK_OK, DLOCK_EINVAL or DLOCK_ENOMEM; the message never
 * quotes the input.
 */
static int parse_userinfo(dlock__endpoint *ep, const char *s, size_t len,
                          char *err, size_t errlen)
{
    const char *colon = memchr(s, ':', len);
    size_t ulen = colon != NULL ? (size_t)(colon - s) : len;
    int r = pct_decode(&ep->user, s, ulen);
    if (r == -2)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (r != 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: bad percent-encoding in the user "
                           "name");
    if (colon != NULL) {
        r = pct_decode(&ep->password, colon + 1, len - ulen - 1);
        if (r == -2)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        if (r != 0)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: bad percent-encoding in the "
                               "password");
    }
    return DLOCK_OK;
}

/*
 * The bracketed IPv6 host "[addr][:port]" at s (s[0] == '['; hend: where
 * the host and port end): the address into *h, *hlen (without the
 * brackets), the port's text into *p (NULL: none). DLOCK_OK or
 * DLOCK_EINVAL with the message.
 */
static int parse_v6_host(const char *s, const char *hend, const char **h,
                         size_t *hlen, const char **p, char *err, size_t errlen)
{
    const char *rb = memchr(s, ']', (size_t)(hend - s));
    char tmp[INET6_ADDRSTRLEN + 1];
    struct in6_addr a6;
    if (rb == NULL)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: '[' without ']' around an IPv6 "
                           "address");
    *h = s + 1;
    *hlen = (size_t)(rb - *h);
    if (*hlen == 0 || *hlen >= sizeof tmp)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: bad IPv6 address");
    memcpy(tmp, *h, *hlen);
    tmp[*hlen] = '\0';
    if (inet_pton(AF_INET6, tmp, &a6) != 1)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: bad IPv6 address \"%s\"", tmp);
    if (rb + 1 < hend) {
        if (rb[1] != ':')
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: unexpected text after the "
                               "IPv6 address");
        *p = rb + 2;
    }
    return DLOCK_OK;
}

/*
 * Parse "host[:port][/db]" of a redis:// or rediss:// URL: the len bytes at
 * s after the user information. Fills host, port, db and display.
 */
static int parse_hostport(dlock__endpoint *ep, const char *s, size_t len,
                          char *err, size_t errlen)
{
    const char *end = s + len;
    const char *slash = memchr(s, '/', len);
    const char *hend = slash != NULL ? slash : end;
    const char *h = NULL, *p = NULL;
    size_t hlen = 0; /* set by both branches; gcc -O2 cannot tell */
    long port = DEFAULT_PORT, db = 0;
    int v6 = 0;
    size_t dlen;

    if (s[0] == '[') {
        if (parse_v6_host(s, hend, &h, &hlen, &p, err, errlen) != DLOCK_OK)
            return DLOCK_EINVAL;
        v6 = 1;
    } else {
        const char *colon = memchr(s, ':', (size_t)(hend - s));
        h = s;
        hlen = (size_t)((colon != NULL ? colon : hend) - s);
        if (colon != NULL)
            p = colon + 1;
        if (hlen == 0)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: no host");
        if (!valid_hostname(h, hlen))
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: bad host name \"%.*s\"",
                               (int)(hlen > 64 ? 64 : hlen), h);
    }
    if (p != NULL) {
        size_t plen = (size_t)(hend - p);
        port = parse_num(p, plen, 65535);
        if (plen == 0)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: empty port");
        if (port < 1)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: bad port \"%.*s\" (1 to 65535)",
                               (int)(plen > 16 ? 16 : plen), p);
    }
    if (slash != NULL && slash + 1 < end) {
        size_t blen = (size_t)(end - slash - 1);
        db = parse_num(slash + 1, blen, 2147483647L);
        if (db < 0)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: bad database \"%.*s\" (a number "
                               "from 0 to 2147483647)",
                               (int)(blen > 16 ? 16 : blen), slash + 1);
    }
    ep->host = dupn(h, hlen);
    ep->port = (int)port;
    ep->db = (int)db;
    dlen = hlen + 16;
    ep->display = malloc(dlen);
    if (ep->host == NULL || ep->display == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    snprintf(ep->display, dlen, v6 ? "[%s]:%d" : "%s:%d", ep->host, ep->port);
    return DLOCK_OK;
}

/*
 * Parse "/path[?db=N]" of a unix:// URL (len bytes at s). Fills path, db
 * and display.
 */
static int parse_unix(dlock__endpoint *ep, const char *s, size_t len, char *err,
                      size_t errlen)
{
    const char *q = memchr(s, '?', len);
    size_t plen = q != NULL ? (size_t)(q - s) : len;
    long db = 0;

    if (plen == 0 || s[0] != '/')
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: unix:// needs an absolute path "
                           "(unix:///path/to/redis.sock)");
    if (plen < 2)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: empty unix socket path");
    if (plen >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "server URL: unix socket path longer than %zu "
                           "bytes",
                           sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
    if (q != NULL) {
        const char *v = q + 1;
        size_t vlen = len - plen - 1;
        if (vlen < 3 || memcmp(v, "db=", 3) != 0)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: unknown parameter (only ?db=N "
                               "is known)");
        db = parse_num(v + 3, vlen - 3, 2147483647L);
        if (db < 0)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: bad database \"%.*s\" (a number "
                               "from 0 to 2147483647)",
                               (int)(vlen - 3 > 16 ? 16 : vlen - 3), v + 3);
    }
    ep->path = dupn(s, plen);
    ep->display = dupn(s, plen);
    ep->db = (int)db;
    if (ep->path == NULL || ep->display == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}

/* 1 when the first n bytes of s equal the lower-case word w, ignoring the
 * case of s. */
static int prefix_ci(const char *s, const char *w, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != w[i])
            return 0;
    }
    return 1;
}

/*
 * Recognise the scheme: sets *kind and returns the length of "scheme://",
 * or 0 when unknown (with a message in err).
 */
static size_t parse_scheme(dlock__ep_kind *kind, const char *url, char *err,
                           size_t errlen)
{
    const char *sep = strstr(url, "://");
    size_t n, i;
    if (sep == NULL) {
        dlock__fail(err, errlen, DLOCK_EINVAL,
                    "server URL: no scheme (expected redis://, rediss:// "
                    "or unix://)");
        return 0;
    }
    n = (size_t)(sep - url);
    if (n == 5 && prefix_ci(url, "redis", 5)) {
        *kind = DLOCK__EP_TCP;
        return n + 3;
    }
    if (n == 6 && prefix_ci(url, "rediss", 6)) {
        *kind = DLOCK__EP_TLS;
        return n + 3;
    }
    if (n == 4 && prefix_ci(url, "unix", 4)) {
        *kind = DLOCK__EP_UNIX;
        return n + 3;
    }
    /* Quote the scheme only when it looks like one, so that a password in
     * a garbled URL is never echoed. */
    for (i = 0; i < n; i++) {
        char c = url[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (i > 0 &&
               ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))))
            break;
    }
    if (n > 0 && n <= 16 && i == n)
        dlock__fail(err, errlen, DLOCK_EINVAL,
                    "server URL: unknown scheme \"%.*s\" (expected redis://, "
                    "rediss:// or unix://)",
                    (int)n, url);
    else
        dlock__fail(err, errlen, DLOCK_EINVAL,
                    "server URL: no valid scheme (expected redis://, "
                    "rediss:// or unix://)");
    return 0;
}

/* Where the user information of url's rest (after the scheme of kind;
 * end: its end) ends: *at, the '@' (left as it is when there is none).
 * The checks of what may stand there: a unix:// path absolute, no '@'
 * after a host, no query or fragment. DLOCK_OK or DLOCK_EINVAL with the
 * message (which never quotes the input). */
static int find_userinfo(dlock__ep_kind kind, const char *rest, const char *end,
                         const char **at, char *err, size_t errlen)
{
    const char *p;
    if (kind == DLOCK__EP_UNIX) {
        /* unix://[userinfo@]/path: the user information, if any, is
         * everything before the path's first '/' and must end in '@'. */
        if (rest[0] != '/') {
            const char *slash = strchr(rest, '/');
            if (slash == NULL || slash == rest || slash[-1] != '@')
                return dlock__fail(err, errlen, DLOCK_EINVAL,
                                   "server URL: unix:// needs an absolute "
                                   "path (unix:///path/to/redis.sock)");
            *at = slash - 1;
        }
    } else {
        /* The authority ends at the first '/'; its last '@' ends the user
         * information. An '@' after the authority means a password with a
         * raw '/': refuse it without quoting anything. */
        const char *aend = strchr(rest, '/');
        if (aend == NULL)
            aend = end;
        for (p = rest; p < aend; p++)
            if (*p == '@')
                *at = p;
        if (memchr(aend, '@', (size_t)(end - aend)) != NULL)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: '@' after the host (write '/' "
                               "in a password as %%2F)");
        for (p = *at != NULL ? *at + 1 : rest; p < end; p++)
            if (*p == '?' || *p == '#')
                return dlock__fail(err, errlen, DLOCK_EINVAL,
                                   "server URL: unexpected '%c' (no query "
                                   "or fragment is known for this scheme)",
                                   *p);
    }
    return DLOCK_OK;
}

/* Parse url into ep; see url.h for the contract. Works on a zeroed
 * copy and clears it again on any failure. */
int dlock__url_parse(dlock__endpoint *ep, const char *url, char *err,
                     size_t errlen)
{
    dlock__endpoint e;
    const char *rest, *end, *at = NULL, *p;
    size_t skip;
    int r;

    memset(&e, 0, sizeof e);
    if (ep == NULL)
        return dlock__fail(err, errlen, DLOCK_EINVAL, "no endpoint");
    memset(ep, 0, sizeof *ep);
    if (url == NULL || url[0] == '\0')
        return dlock__fail(err, errlen, DLOCK_EINVAL, "empty server URL");
    for (p = url; *p != '\0'; p++) {
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "server URL: contains a space or control "
                               "character");
    }
    skip = parse_scheme(&e.kind, url, err, errlen);
    if (skip == 0)
        return DLOCK_EINVAL;
    rest = url + skip;
    end = rest + strlen(rest);
    if (find_userinfo(e.kind, rest, end, &at, err, errlen) != DLOCK_OK)
        return DLOCK_EINVAL;

    if (at != NULL) {
        r = parse_userinfo(&e, rest, (size_t)(at - rest), err, errlen);
        if (r != DLOCK_OK)
            goto fail;
        rest = at + 1;
    }
    if (e.kind == DLOCK__EP_UNIX) {
        r = parse_unix(&e, rest, (size_t)(end - rest), err, errlen);
    } else {
        if (rest == end) {
            r = dlock__fail(err, errlen, DLOCK_EINVAL, "server URL: no host");
            goto fail;
        }
        r = parse_hostport(&e, rest, (size_t)(end - rest), err, errlen);
    }
    if (r != DLOCK_OK)
        goto fail;
    *ep = e;
    return DLOCK_OK;

fail:
    dlock__endpoint_clear(&e);
    return r;
}

/* ---- Sentinel URLs ------------------------------------------------------ */

/* See url.h. */
int dlock__url_is_sentinel(const char *url)
{
    if (url == NULL)
        return 0;
    return (strlen(url) >= 17 && prefix_ci(url, "redis+sentinel://", 17)) ||
           (strlen(url) >= 18 && prefix_ci(url, "rediss+sentinel://", 18));
}

/* See url.h. */
void dlock__sentinel_url_clear(dlock__sentinel_url *su)
{
    int i;
    if (su == NULL)
        return;
    for (i = 0; i < su->n && i < DLOCK__SENTINELS_MAX; i++)
        dlock__endpoint_clear(&su->sentinel[i]);
    free(su->master);
    /* The user information is parsed into an endpoint and moved here:
     * clear it the same way (the password is wiped). */
    {
        dlock__endpoint tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.user = su->user;
        tmp.password = su->password;
        dlock__endpoint_clear(&tmp);
    }
    memset(su, 0, sizeof *su);
}

/* Parse one "HOST[:PORT]" of a sentinel list (len bytes at s) into ep,
 * the port defaulting to 26379. */
static int parse_sentinel_host(dlock__endpoint *ep, const char *s, size_t len,
                               int tls, char *err, size_t errlen)
{
    const char *rb = s[0] == '[' ? memchr(s, ']', len) : NULL;
    const char *after = rb != NULL ? rb + 1 : s;
    int has_port = memchr(after, ':', len - (size_t)(after - s)) != NULL;
    int r = parse_hostport(ep, s, len, err, errlen);
    if (r != DLOCK_OK)
        return r;
    ep->kind = tls ? DLOCK__EP_TLS : DLOCK__EP_TCP;
    if (!has_port) {
        ep->port = DLOCK__SENTINEL_PORT;
        snprintf(ep->display, strlen(ep->host) + 16,
                 rb != NULL ? "[%s]:%d" : "%s:%d", ep->host, ep->port);
    }
    return DLOCK_OK;
}

/* Check and decode the master name (len bytes at s) into su->master. */
static int parse_master_name(dlock__sentinel_url *su, const char *s, size_t len,
                             char *err, size_t errlen)
{
    size_t i;
    int r;
    if (len == 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: no master name (write "
                           "redis+sentinel://HOST:PORT/MASTERNAME)");
    r = pct_decode(&su->master, s, len);
    if (r == -2)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (r != 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: bad percent-encoding in the master "
                           "name");
    if (strlen(su->master) > 255)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: master name longer than 255 bytes");
    for (i = 0; su->master[i] != '\0'; i++)
        if ((unsigned char)su->master[i] <= ' ' || su->master[i] == 0x7f)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "sentinel URL: the master name contains a "
                               "space or control character");
    return DLOCK_OK;
}

/* Parse "?db=N" (len bytes at s, after the '?'). */
static int parse_sentinel_query(dlock__sentinel_url *su, const char *s,
                                size_t len, char *err, size_t errlen)
{
    long db;
    if (len < 3 || memcmp(s, "db=", 3) != 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: unknown parameter (only ?db=N is "
                           "known)");
    db = parse_num(s + 3, len - 3, 2147483647L);
    if (db < 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: bad database \"%.*s\" (a number "
                           "from 0 to 2147483647)",
                           (int)(len - 3 > 16 ? 16 : len - 3), s + 3);
    su->db = (int)db;
    return DLOCK_OK;
}

/* The sentinels of a sentinel URL, rest up to slash: HOST[:PORT] items
 * separated by commas, into s->sentinel[] (s->n of them, also those
 * parsed before a failure, which the caller clears). DLOCK_OK or
 * DLOCK_EINVAL with err set. */
static int parse_sentinel_list(dlock__sentinel_url *s, const char *rest,
                               const char *slash, char *err, size_t errlen)
{
    const char *p;
    int r = DLOCK_OK;

    for (p = rest; p <= slash && r == DLOCK_OK;) {
        const char *comma = memchr(p, ',', (size_t)(slash - p));
        const char *iend = comma != NULL ? comma : slash;
        if (iend == p) {
            r = dlock__fail(err, errlen, DLOCK_EINVAL,
                            s->n == 0 && comma == NULL
                                ? "sentinel URL: no sentinel host"
                                : "sentinel URL: empty entry in the sentinel "
                                  "list");
            break;
        }
        if (s->n == DLOCK__SENTINELS_MAX) {
            r = dlock__fail(err, errlen, DLOCK_EINVAL,
                            "sentinel URL: more than %d sentinels",
                            DLOCK__SENTINELS_MAX);
            break;
        }
        r = parse_sentinel_host(&s->sentinel[s->n], p, (size_t)(iend - p),
                                s->tls, err, errlen);
        s->n++;
        p = iend + 1;
        if (comma == NULL)
            break;
    }
    return r;
}

/* See url.h. The user information ends at the last '@' before the first
 * '/', as for redis:// URLs. */
int dlock__sentinel_url_parse(dlock__sentinel_url *su, const char *url,
                              char *err, size_t errlen)
{
    dlock__sentinel_url s;
    dlock__endpoint ui;
    const char *rest, *slash, *q, *p, *at = NULL, *end;
    int r = DLOCK_OK;

    memset(&s, 0, sizeof s);
    memset(&ui, 0, sizeof ui);
    if (su == NULL)
        return dlock__fail(err, errlen, DLOCK_EINVAL, "no sentinel URL");
    memset(su, 0, sizeof *su);
    if (!dlock__url_is_sentinel(url))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: expected redis+sentinel:// or "
                           "rediss+sentinel://");
    for (p = url; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "sentinel URL: contains a space or control "
                               "character");
    s.tls = url[5] == 's' || url[5] == 'S';
    rest = url + (s.tls ? 18 : 17);
    end = rest + strlen(rest);
    slash = strchr(rest, '/');
    for (p = rest; p < (slash != NULL ? slash : end); p++)
        if (*p == '@')
            at = p;
    if (slash != NULL && memchr(slash, '@', (size_t)(end - slash)) != NULL)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "sentinel URL: '@' after the hosts (write '/' in "
                           "a password as %%2F)");
    if (at != NULL) {
        r = parse_userinfo(&ui, rest, (size_t)(at - rest), err, errlen);
        s.user = ui.user;
        s.password = ui.password;
        if (r != DLOCK_OK)
            goto fail;
        rest = at + 1;
    }
    if (slash == NULL) {
        r = dlock__fail(err, errlen, DLOCK_EINVAL,
                        "sentinel URL: no master name (write "
                        "redis+sentinel://HOST:PORT/MASTERNAME)");
        goto fail;
    }
    if (strchr(slash, '#') != NULL) {
        r = dlock__fail(err, errlen, DLOCK_EINVAL,
                        "sentinel URL: unexpected '#'");
        goto fail;
    }
    r = parse_sentinel_list(&s, rest, slash, err, errlen);
    if (r != DLOCK_OK)
        goto fail;
    q = strchr(slash, '?');
    r = parse_master_name(&s, slash + 1,
                          (size_t)((q != NULL ? q : end) - slash - 1), err,
                          errlen);
    if (r == DLOCK_OK && q != NULL)
        r = parse_sentinel_query(&s, q + 1, (size_t)(end - q - 1), err, errlen);
    if (r != DLOCK_OK)
        goto fail;
    *su = s;
    return DLOCK_OK;

fail:
    dlock__sentinel_url_clear(&s);
    return r;
}
