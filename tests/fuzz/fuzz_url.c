/*
 * fuzz_url.c - libFuzzer target for server URL parsing (dlock__url_parse).
 *
 * Any bytes, NUL-terminated, go to the parser, and then to the sentinel
 * URL parser (dlock__sentinel_url_parse) with that scheme in front. It must return DLOCK_OK or
 * DLOCK_EINVAL/DLOCK_ENOMEM, leave the endpoint cleared on failure, give a
 * sane endpoint on success, and never put the password in the message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    if (!url)
        return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    dlock__endpoint ep;
    memset(&ep, 0, sizeof ep);
    char err[256];
    err[0] = '\0';
    int rc = dlock__url_parse(&ep, url, err, sizeof err);
    if (rc == DLOCK_OK) {
        if (ep.kind == DLOCK__EP_UNIX) {
            if (!ep.path || ep.path[0] == '\0')
                abort();
        } else if (!ep.host || ep.port < 1 || ep.port > 65535) {
            abort();
        }
        if (ep.db < 0 || !ep.display)
            abort();
        /* No credentials in the display string: it is host:port or the
         * path, never the userinfo part (a host or path cannot hold '@'
         * unless the URL's own path does). */
        if (ep.password && ep.password[0] && ep.kind != DLOCK__EP_UNIX &&
            strchr(ep.display, '@'))
            abort();
    } else {
        if (rc != DLOCK_EINVAL && rc != DLOCK_ENOMEM)
            abort();
        if (ep.host || ep.path || ep.user || ep.password || ep.display)
            abort(); /* not left cleared */
        if (err[0] == '\0')
            abort(); /* a failure must say why */
    }
    dlock__endpoint_clear(&ep);

    /* The same bytes as a sentinel URL (prefixed when they are not one,
     * so that the parser's insides are reached). */
    {
        dlock__sentinel_url su;
        char *su_url = malloc(size + 18);
        int k;
        if (su_url != NULL) {
            snprintf(su_url, size + 18, "%s%s",
                     dlock__url_is_sentinel(url) ? "" : "redis+sentinel://",
                     url);
            rc = dlock__sentinel_url_parse(&su, su_url, err, sizeof err);
            if (rc == DLOCK_OK) {
                if (su.n < 1 || su.n > DLOCK__SENTINELS_MAX || !su.master ||
                    su.master[0] == '\0' || su.db < 0)
                    abort();
                for (k = 0; k < su.n; k++)
                    if (!su.sentinel[k].host || su.sentinel[k].port < 1 ||
                        su.sentinel[k].port > 65535 || !su.sentinel[k].display)
                        abort();
            } else {
                if (rc != DLOCK_EINVAL && rc != DLOCK_ENOMEM)
                    abort();
                if (su.n != 0 || su.master || su.user || su.password)
                    abort(); /* not left cleared */
                if (err[0] == '\0')
                    abort();
            }
            dlock__sentinel_url_clear(&su);
            free(su_url);
        }
    }
    free(url);
    return 0;
}
