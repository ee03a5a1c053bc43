/*
 * fenced_read.c - dlock_fenced_read: the read of a fenced read-modify-write.
 *
 * A fenced write (dlock_fenced_set, inspect.c) refuses a token older than
 * the newest one written, which orders the writes but not a
 * read-modify-write: holder A (token t) reads N and is paused past its
 * lease, B (token t+1) reads N, A resumes and writes N+1 (accepted: t is
 * still the newest token written), B writes N+1 (accepted): one update is
 * lost. A read with the token (fenced_read.lua) makes the token the
 * resource's floor at the read, so A's write is refused instead. The
 * chaos suite's multi_chaos found the lost update (docs/reliability.md).
 *
 * Beside the other fenced calls, but its own file: it only runs a script
 * (core.h's step adapters) and reads the answer.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/release.h"

/* Check the arguments; DLOCK_OK or DLOCK_EINVAL with the message set. */
static int check_args(const dlock_client *c, const char *key, uint64_t token,
                      char **value, size_t *len, uint64_t *fence)
{
    int rc = dlock__check_key(c, key);

    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL || len == NULL || fence == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "NULL out-parameter");
    if (token == 0 || token > (1ULL << 53))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "token must be 1 to 2^53 (got %" PRIu64 ")",
                                token);
    return DLOCK_OK;
}

/* Copy the reply's value (a string, or nil: none) to *value and *len.
 * DLOCK_OK or DLOCK_ENOMEM. */
static int copy_value(const dlock_client *c, const redisReply *v, char **value,
                      size_t *len)
{
    if (v->type != REDIS_REPLY_STRING)
        return DLOCK_OK;
    *value = malloc(v->len + 1);
    if (*value == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    memcpy(*value, v->str, v->len);
    (*value)[v->len] = '\0';
    *len = v->len;
    return DLOCK_OK;
}

/* The status of fenced_read.lua's or s_fenced_read.lua's answer R ({1,
 * value, token} read, {0, nil, fence} refused, {-2, nil, 0}: not a
 * string-layout fenced value), filling the out-parameters. */
static int answer(const dlock_client *c, const dlock__result *res,
                  const char *key, uint64_t token, char **value, size_t *len,
                  uint64_t *fence)
{
    const redisReply *r = res->reply;
    int rc;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced read: unexpected reply");
    if (r->element[0]->integer == -2)
        return dlock__set_error(c, DLOCK_EINVAL, "fenced read %s: %s", key,
                                DLOCK__FENCED_OTHER);
    *fence = (uint64_t)dlock__elem_int(r, 2);
    if (r->element[0]->integer != 1)
        return dlock__set_error(c, DLOCK_STALE,
                                "fenced read %s: token %" PRIu64
                                " is older than %" PRIu64,
                                key, token, *fence);
    rc = copy_value(c, r->element[1], value, len);
    if (rc != DLOCK_OK)
        return rc;
    if (c->ns.wait_replicas > 0 && res->acks < c->ns.wait_replicas)
        /* Read, but the raised fence could be lost in a failover. */
        return dlock__set_error(c, DLOCK_NOT_REPLICATED,
                                "fenced read %s: read, but %lld of the %d "
                                "replicas asked for acknowledged the fence",
                                key, res->acks < 0 ? 0 : res->acks,
                                c->ns.wait_replicas);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_fenced_read(dlock_client *c, const char *key, uint64_t token,
                      char **value, size_t *len, uint64_t *fence)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = check_args(c, key, token, value, len, fence);
    if (rc != DLOCK_OK)
        return rc;
    *value = NULL;
    *len = 0;
    *fence = 0;
    /* The string layout's value is one string (s_fenced_read.lua). */
    dlock__cmd_begin(&b, dlock__string_layout(c) ? DLOCK__S_S_FENCED_READ
                                                 : DLOCK__S_FENCED_READ);
    dlock__cmd_key(&b, key, strlen(key));
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_durable(c, &b.cmd);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK)
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced read");
    else
        rc = answer(c, &res[0], key, token, value, len, fence);
    if (rc != DLOCK_OK && rc != DLOCK_NOT_REPLICATED) {
        free(*value);
        *value = NULL;
        *len = 0;
    }
    dlock__results_clear(res, c->ns.n);
    return rc;
}
