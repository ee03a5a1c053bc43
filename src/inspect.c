/*
 * inspect.c - looking at what the servers hold, beside the lock itself:
 * fenced values (a write that refuses an older token), inspecting a
 * lock, adopting a lock another process took (dlock_lock_adopt), and
 * checking the server settings the lock relies on (dlock_client_check).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "core.h"
#include "health.h"
#include "held.h"
#include "lock.h"

/* Check a resource key for the fenced calls. */
static int check_key(const dlock_client *c, const char *key)
{
    size_t n;
    if (key == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "key is NULL");
    n = strlen(key);
    if (n == 0 || n > DLOCK_KEY_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "key must be 1 to %d bytes (got %zu)",
                                DLOCK_KEY_MAX, n);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_fenced_set(dlock_client *c, const char *key, uint64_t token,
                     const void *value, size_t len)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL && len > 0)
        return dlock__set_error(c, DLOCK_EINVAL, "value is NULL");
    if (token == 0 || token > (1ULL << 53))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "token must be 1 to 2^53 (got %" PRIu64 ")",
                                token);
    dlock__cmd_begin(&b, DLOCK__S_FENCED_SET);
    dlock__cmd_key(&b, key, strlen(key));
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg(&b, value != NULL ? value : "", len);
    dlock__cmd_durable(c, &b.cmd);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced set");
    } else if (res[0].reply->type == REDIS_REPLY_ARRAY &&
               dlock__elem_int(res[0].reply, 0) == 1 &&
               c->ns.wait_replicas > 0 && res[0].acks < c->ns.wait_replicas) {
        /* Written on the master, but a failover could lose it. */
        rc = dlock__set_error(c, DLOCK_NOT_REPLICATED,
                              "fenced set %s: written, but %lld of the %d "
                              "replicas asked for acknowledged it",
                              key, res[0].acks < 0 ? 0 : res[0].acks,
                              c->ns.wait_replicas);
    } else if (res[0].reply->type == REDIS_REPLY_ARRAY &&
               dlock__elem_int(res[0].reply, 0) == 1) {
        /* {1, token}: written. */
        rc = DLOCK_OK;
    } else if (res[0].reply->type == REDIS_REPLY_ARRAY &&
               res[0].reply->elements == 2) {
        rc = dlock__set_error(c, DLOCK_STALE,
                              "fenced set %s: token %" PRIu64
                              " is older than %lld",
                              key, token, dlock__elem_int(res[0].reply, 1));
    } else {
        rc = dlock__set_error(c, DLOCK_EPROTO, "fenced set: unexpected reply");
    }
    dlock__results_clear(res, c->ns.n);
    return rc;
}

/* See dlock.h. */
int dlock_fenced_get(dlock_client *c, const char *key, char **value,
                     size_t *len, uint64_t *fence)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    const redisReply *r;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL || len == NULL || fence == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "NULL out-parameter");
    *value = NULL;
    *len = 0;
    *fence = 0;
    dlock__cmd_begin(&b, DLOCK__S_FENCED_GET);
    dlock__cmd_key(&b, key, strlen(key));
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced get");
        dlock__results_clear(res, c->ns.n);
        return rc;
    }
    r = res[0].reply;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        dlock__results_clear(res, c->ns.n);
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced get: unexpected reply");
    }
    if (r->element[0]->type == REDIS_REPLY_STRING) {
        *value = malloc(r->element[0]->len + 1);
        if (*value == NULL) {
            dlock__results_clear(res, c->ns.n);
            return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
        }
        memcpy(*value, r->element[0]->str, r->element[0]->len);
        (*value)[r->element[0]->len] = '\0';
        *len = r->element[0]->len;
    }
    if (r->element[1]->type == REDIS_REPLY_STRING)
        *fence = strtoull(r->element[1]->str, NULL, 10);
    dlock__results_clear(res, c->ns.n);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_lock_inspect(dlock_client *c, const char *name, dlock_info *out)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__keys *keys;
    dlock__cmdbuf b;
    int i, answered = 0, rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    out->ttl_ms = -1;
    out->waiters = -1;
    keys = dlock__keys_new(c, name);
    if (keys == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    dlock__cmd_begin(&b, DLOCK__S_INSPECT);
    dlock__cmd_key(&b, keys->key, keys->keylen);
    dlock__cmd_key(&b, keys->fkey, keys->fkeylen);
    dlock__cmd_key(&b, keys->qkey, keys->qkeylen);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    for (i = 0; i < c->ns.n; i++) {
        const redisReply *r = res[i].reply;
        const redisReply *f;
        long long pttl;
        uint64_t n;
        size_t k;
        int bad;
        if (res[i].status != DLOCK_OK)
            continue;
        /* {pttl, {owner, count, ...}, token, queue length}: check every
         * type before reading anything. */
        bad = r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
              r->element[0]->type != REDIS_REPLY_INTEGER ||
              r->element[1]->type != REDIS_REPLY_ARRAY ||
              r->element[2]->type != REDIS_REPLY_INTEGER ||
              r->element[3]->type != REDIS_REPLY_INTEGER ||
              r->element[1]->elements % 2 != 0;
        for (k = 0; !bad && k < r->element[1]->elements; k++)
            bad = r->element[1]->element[k]->type != REDIS_REPLY_STRING;
        if (bad) {
            dlock__malformed(&c->ns, res, i, "the inspect script");
            continue;
        }
        answered++;
        pttl = dlock__elem_int(r, 0);
        f = r->element[1];
        n = (uint64_t)dlock__elem_int(r, 2);
        if (n > out->last_token)
            out->last_token = n;
        if (dlock__elem_int(r, 3) > out->waiters)
            out->waiters = dlock__elem_int(r, 3);
        if (pttl >= 0 && f->type == REDIS_REPLY_ARRAY && f->elements >= 2) {
            out->nodes_holding++;
            out->held = 1;
            if (out->ttl_ms < 0 || pttl < out->ttl_ms)
                out->ttl_ms = pttl;
            snprintf(out->owner, sizeof out->owner, "%.*s",
                     (int)f->element[0]->len, f->element[0]->str);
            out->reentry = strtoll(f->element[1]->str, NULL, 10);
        }
    }
    if (answered < c->ns.quorum)
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "inspect");
    else
        rc = DLOCK_OK;
    dlock__results_clear(res, c->ns.n);
    free(keys);
    return rc;
}

/* See dlock.h. */
int dlock_lock_adopt(dlock_lock **out, dlock_client *c, const char *name,
                     const char *owner, uint64_t token)
{
    dlock_info info;
    dlock__held *h;
    int rc;

    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL || owner == NULL || owner[0] == '\0' ||
        strlen(owner) >= sizeof info.owner)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "adopt: out and a valid owner are required");
    rc = dlock_lock_inspect(c, name, &info);
    if (rc != DLOCK_OK)
        return rc;
    if (!info.held || strcmp(info.owner, owner) != 0 ||
        info.nodes_holding < c->ns.quorum)
        return dlock__set_error(c, DLOCK_NOT_OWNER, "adopt %s: not held by %s",
                                name, owner);
    h = dlock__held_new(c, name, owner);
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    h->flags |= DLOCK__HELD_ADOPTED; /* never re-entered by a thread of ours */
    h->depth = (int)info.reentry;
    h->handles = 1;
    h->token = token != 0 ? token : info.last_token;
    h->nodes = dlock__all_nodes(c);
    h->lease_ms = info.ttl_ms;
    atomic_store(&h->valid_until_ms,
                 dlock__now_ms() + info.ttl_ms - dlock__drift(c, info.ttl_ms));
    pthread_mutex_lock(&c->held_mu);
    dlock__held_link(c, h);
    pthread_mutex_unlock(&c->held_mu);
    return dlock__handle_new(c, h, out);
}

/* Append one finding (a line) to buf, as much as fits. */
static void finding(char *buf, size_t len, int *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finding(char *buf, size_t len, int *n, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    (*n)++;
    if (used + 1 >= len)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
    used = strlen(buf);
    if (used + 1 < len) {
        buf[used] = '\n';
        buf[used + 1] = '\0';
    }
}

/* The value of a CONFIG GET reply ({name, value}), or NULL. */
static const char *config_value(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return NULL;
    return r->element[1]->str;
}

/* See dlock.h. */
int dlock_client_check(dlock_client *c, char *buf, size_t len)
{
    static const char *const names[3] = {"maxmemory-policy", "appendonly",
                                         "appendfsync"};
    int i, k, n = 0;

    if (c == NULL || buf == NULL || len == 0)
        return c == NULL
                   ? DLOCK_EINVAL
                   : dlock__set_error(c, DLOCK_EINVAL,
                                      "check: no buffer for the findings");
    buf[0] = '\0';
    for (i = 0; i < c->ns.n; i++) {
        const char *host = dlock__node_name(&c->ns.node[i]);
        int64_t deadline = dlock__now_ms() + c->opts.command_timeout_ms;
        char err[DLOCK__ERRLEN] = "";
        redisReply *r[3] = {NULL, NULL, NULL};
        dlock__conn *conn = NULL;
        const char *policy, *aof, *fsync;
        int rc = DLOCK_EIO, attempt;

        /* A second try on a fresh connection: a pooled one may have been
         * closed by the server since it was last used. */
        for (attempt = 0; attempt < 2 && rc != DLOCK_OK; attempt++) {
            conn = NULL;
            rc = dlock__node_get(&c->ns, i, &conn, deadline, err, sizeof err);
            for (k = 0; rc == DLOCK_OK && k < 3; k++) {
                const char *argv[3] = {"CONFIG", "GET", names[k]};
                rc = dlock__conn_append_argv(conn, 3, argv, NULL);
            }
            if (rc == DLOCK_OK)
                rc = dlock__conn_roundtrip(conn, 3, r, deadline, -1, err,
                                           sizeof err);
            if (conn != NULL)
                dlock__node_put(&c->ns, i, conn, rc == DLOCK_OK);
            if (rc == DLOCK_OK)
                atomic_fetch_add(&c->stats.requests, 3);
            if (dlock__now_ms() >= deadline)
                break;
        }
        if (rc != DLOCK_OK) {
            finding(buf, len, &n, "%s: not checked: %s", host, err);
            continue;
        }
        for (k = 0; k < 3; k++)
            if (r[k]->type == REDIS_REPLY_ERROR)
                break;
        if (k < 3) {
            finding(buf, len, &n,
                    "%s: not checked: CONFIG GET %s refused: %.120s", host,
                    names[k], r[k]->str);
        } else {
            policy = config_value(r[0]);
            aof = config_value(r[1]);
            fsync = config_value(r[2]);
            if (policy != NULL && strcmp(policy, "noeviction") != 0)
                finding(buf, len, &n,
                        "%s: maxmemory-policy is %s: under memory pressure "
                        "Redis may evict a lock key, and then two owners "
                        "can hold the lock (use noeviction)",
                        host, policy);
            if (c->ns.n > 1 && aof != NULL && fsync != NULL &&
                (strcmp(aof, "yes") != 0 || strcmp(fsync, "always") != 0))
                finding(buf, len, &n,
                        "%s: appendonly %s, appendfsync %s: a restart can "
                        "forget locks and fencing counters; Redlock needs "
                        "appendfsync always or restarts delayed past the "
                        "longest lease",
                        host, aof, fsync);
        }
        for (k = 0; k < 3; k++)
            if (r[k] != NULL)
                freeReplyObject(r[k]);
    }
    return n + dlock__health_warnings(c, buf, len);
}
