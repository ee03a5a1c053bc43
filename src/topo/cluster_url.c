/*
 * cluster_url.c - the seed URL of a Redis Cluster (see cluster.h):
 * redis+cluster:// or rediss+cluster:// with one or more seed nodes,
 * parsed into the endpoints the node table starts from. Pure: no I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/cluster.h"

/* 1 when the n bytes at s equal the lower-case word w, ignoring case. */
static int prefix_ci(const char *s, const char *w, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\0')
            return 0;
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != w[i])
            return 0;
    }
    return 1;
}

/* Length of the cluster scheme that url starts with ("redis+cluster://"
 * or "rediss+cluster://"), 0 when none; *tls says which. */
static size_t cluster_scheme(const char *url, int *tls)
{
    if (url != NULL && prefix_ci(url, "redis+cluster://", 16)) {
        *tls = 0;
        return 16;
    }
    if (url != NULL && prefix_ci(url, "rediss+cluster://", 17)) {
        *tls = 1;
        return 17;
    }
    return 0;
}

/* See cluster.h. */
int dlock__cluster_is_url(const char *url)
{
    int tls;
    return cluster_scheme(url, &tls) != 0;
}

/* Parse one seed: HOST[:PORT] (seg, len bytes) with the URL's user
 * information and path, through the redis:// parser so that every rule of
 * url.c holds for seeds too. */
static int parse_seed(dlock__endpoint *ep, int tls, const char *ui,
                      size_t uilen, const char *seg, size_t len,
                      const char *path, int k, char *err, size_t errlen)
{
    size_t cap = 10 + uilen + len + strlen(path) + 1;
    char *buf = malloc(cap);
    char e[DLOCK__ERRLEN];
    const char *why;
    int rc;

    if (buf == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    snprintf(buf, cap, "%s%.*s%.*s%s", tls ? "rediss://" : "redis://",
             (int)uilen, ui, (int)len, seg, path);
    rc = dlock__url_parse(ep, buf, e, sizeof e);
    explicit_bzero(buf, cap); /* it held the password */
    free(buf);
    if (rc != DLOCK_OK) {
        why = strncmp(e, "server URL: ", 12) == 0 ? e + 12 : e;
        return dlock__fail(err, errlen, rc, "cluster URL: seed %d: %s", k, why);
    }
    if (ep->db != 0) {
        dlock__endpoint_clear(ep);
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "cluster URL: a Redis Cluster has database 0 "
                           "only");
    }
    return DLOCK_OK;
}

/* See cluster.h. */
int dlock__cluster_parse_url(const char *url, dlock__endpoint *eps, int max,
                             char *err, size_t errlen)
{
    const char *rest, *aend, *at = NULL, *p, *hosts, *seg;
    int tls = 0, n = 0, rc;
    size_t skip = cluster_scheme(url, &tls);

    if (skip == 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "cluster URL: expected redis+cluster:// or "
                           "rediss+cluster://");
    rest = url + skip;
    aend = rest + strcspn(rest, "/");
    for (p = rest; p < aend; p++)
        if (*p == '@')
            at = p;
    hosts = at != NULL ? at + 1 : rest;
    if (hosts == aend)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "cluster URL: no seed node "
                           "(redis+cluster://HOST:PORT[,HOST:PORT...])");
    for (seg = hosts; seg <= aend; seg = p + 1) {
        p = memchr(seg, ',', (size_t)(aend - seg));
        if (p == NULL)
            p = aend;
        if (p == seg) {
            rc = dlock__fail(err, errlen, DLOCK_EINVAL,
                             "cluster URL: empty seed (two commas, or a "
                             "comma at an end)");
            goto fail;
        }
        if (n >= max) {
            rc = dlock__fail(err, errlen, DLOCK_EINVAL,
                             "cluster URL: more than %d seeds", max);
            goto fail;
        }
        rc = parse_seed(&eps[n], tls, rest,
                        at != NULL ? (size_t)(hosts - rest) : 0, seg,
                        (size_t)(p - seg), aend, n + 1, err, errlen);
        if (rc != DLOCK_OK)
            goto fail;
        n++;
    }
    return n;
fail:
    while (n > 0)
        dlock__endpoint_clear(&eps[--n]);
    return rc;
}
