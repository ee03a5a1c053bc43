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

#include "api/chancheck.h"
#include "topo/cluster.h"
#include "io/conn.h"
#include "hold/core.h"
#include "api/health.h"
#include "hold/held.h"
#include "hold/holder.h"
#include "hold/release.h"
#include "topo/ident.h"
#include "api/shared_info.h"
#include "api/waiters.h"

/* See dlock.h. */
int dlock_fenced_set(dlock_client *c, const char *key, uint64_t token,
                     const void *value, size_t len)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL && len > 0)
        return dlock__set_error(c, DLOCK_EINVAL, "value is NULL");
    if (token == 0 || token > (1ULL << 53))
        return dlock__set_error(c, DLOCK_EINVAL,
                                "token must be 1 to 2^53 (got %" PRIu64 ")",
                                token);
    /* The string layout's value is one string (s_fenced_set.lua), the
     * hash layout's a hash (fenced_set.lua). */
    dlock__cmd_begin(&b, dlock__string_layout(c) ? DLOCK__S_S_FENCED_SET
                                                 : DLOCK__S_FENCED_SET);
    dlock__cmd_key(&b, key, strlen(key));
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg(&b, value != NULL ? value : "", len);
    dlock__cmd_durable(c, &b.cmd);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced set");
    } else if (res[0].reply->type == REDIS_REPLY_ARRAY &&
               dlock__elem_int(res[0].reply, 0) == -2) {
        rc = dlock__set_error(c, DLOCK_EINVAL, "fenced set %s: %s", key,
                              DLOCK__FENCED_OTHER);
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

/* fenced get of the string layout: S_FENCED_GET's GET answer R (a
 * string "<fence> <value>" or nil) into the out-parameters (cleared by
 * the caller). DLOCK_OK, or an error with the message set. */
static int string_get_answer(dlock_client *c, const char *key,
                             const redisReply *r, char **value, size_t *len,
                             uint64_t *fence)
{
    const char *v;
    size_t vl;
    if (r->type == REDIS_REPLY_NIL)
        return DLOCK_OK;
    if (r->type != REDIS_REPLY_STRING)
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced get: unexpected reply");
    if (!dlock__fenced_split(r->str, r->len, fence, &v, &vl))
        return dlock__set_error(c, DLOCK_EINVAL, "fenced get %s: %s", key,
                                DLOCK__FENCED_OTHER);
    if (v == NULL)
        return DLOCK_OK;
    *value = malloc(vl + 1);
    if (*value == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    memcpy(*value, v, vl);
    (*value)[vl] = '\0';
    *len = vl;
    return DLOCK_OK;
}

/* fenced get of the hash layout: HMGET's answer R ({value, fence}) into
 * the out-parameters (cleared by the caller). DLOCK_OK, or an error with
 * the message set. */
static int hash_get_answer(dlock_client *c, const redisReply *r, char **value,
                           size_t *len, uint64_t *fence)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced get: unexpected reply");
    if (r->element[0]->type == REDIS_REPLY_STRING) {
        *value = malloc(r->element[0]->len + 1);
        if (*value == NULL)
            return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
        memcpy(*value, r->element[0]->str, r->element[0]->len);
        (*value)[r->element[0]->len] = '\0';
        *len = r->element[0]->len;
    }
    if (r->element[1]->type == REDIS_REPLY_STRING)
        *fence = strtoull(r->element[1]->str, NULL, 10);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_fenced_get(dlock_client *c, const char *key, char **value,
                     size_t *len, uint64_t *fence)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int rc, str;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL || len == NULL || fence == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "NULL out-parameter");
    *value = NULL;
    *len = 0;
    *fence = 0;
    /* One plain command (fenced_get.lua's or s_fenced_get.lua's, without
     * a script's cost on the server: one read needs no atomicity beyond
     * the command's): GET of the string layout's one string, HMGET of
     * the hash layout's fields. */
    str = dlock__string_layout(c);
    dlock__cmd_begin(&b, str ? DLOCK__S_S_FENCED_GET : DLOCK__S_FENCED_GET);
    b.cmd.raw = 1;
    if (str)
        dlock__cmd_arg(&b, "GET", 3);
    else
        dlock__cmd_arg(&b, "HMGET", 5);
    dlock__cmd_key(&b, key, strlen(key));
    if (!str) {
        dlock__cmd_arg(&b, "value", 5);
        dlock__cmd_arg(&b, "fence", 5);
    }
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK && str &&
        strstr(res[0].err, "WRONGTYPE") != NULL)
        rc = dlock__set_error(c, DLOCK_EINVAL, "fenced get %s: %s", key,
                              DLOCK__FENCED_OTHER);
    else if (res[0].status != DLOCK_OK)
        rc = dlock__fail_step(c, res, 1, res[0].status, "fenced get");
    else if (str)
        rc = string_get_answer(c, key, res[0].reply, value, len, fence);
    else
        rc = hash_get_answer(c, res[0].reply, value, len, fence);
    if (rc != DLOCK_OK) {
        free(*value);
        *value = NULL;
        *len = 0;
        *fence = 0;
    }
    dlock__results_clear(res, c->ns.n);
    return rc;
}

/* Read node i's answer to inspect.lua (res[i]) into out: the last token,
 * the queue's length and, where the node holds the lock, its holder.
 * Returns 1 when the node answered well-formed, else 0 (a malformed
 * answer is marked so). */
static int inspect_answer(dlock_client *c, dlock__result *res, int i,
                          dlock_info *out)
{
    const redisReply *r = res[i].reply;
    const redisReply *f;
    long long pttl;
    uint64_t n;
    size_t k;
    int bad;
    if (res[i].status != DLOCK_OK)
        return 0;
    /* {pttl, {owner, count, ...}, token, queue length, info}: check
     * every type before reading anything. */
    bad = r->type != REDIS_REPLY_ARRAY || r->elements != 5 ||
          r->element[0]->type != REDIS_REPLY_INTEGER ||
          r->element[1]->type != REDIS_REPLY_ARRAY ||
          r->element[2]->type != REDIS_REPLY_INTEGER ||
          r->element[3]->type != REDIS_REPLY_INTEGER ||
          r->element[4]->type != REDIS_REPLY_ARRAY ||
          r->element[1]->elements % 2 != 0;
    for (k = 0; !bad && k < r->element[1]->elements; k++)
        bad = r->element[1]->element[k]->type != REDIS_REPLY_STRING;
    if (bad) {
        dlock__malformed(&c->ns, res, i, "the inspect script");
        return 0;
    }
    pttl = dlock__elem_int(r, 0);
    f = r->element[1];
    n = (uint64_t)dlock__elem_int(r, 2);
    if (n > out->last_token)
        out->last_token = n;
    if (dlock__elem_int(r, 3) > out->fair_queue)
        out->fair_queue = dlock__elem_int(r, 3);
    /* Fields starting with '#' are a read-write lock's marks
     * (rw_acquire.lua), not an owner. */
    for (k = 0; k + 1 < f->elements && f->element[k]->str[0] == '#';)
        k += 2;
    if (pttl >= 0 && k + 1 < f->elements) {
        out->nodes_holding++;
        out->held = 1;
        if (out->ttl_ms < 0 || pttl < out->ttl_ms)
            out->ttl_ms = pttl;
        snprintf(out->owner, sizeof out->owner, "%.*s", (int)f->element[k]->len,
                 f->element[k]->str);
        out->reentry = strtoll(f->element[k + 1]->str, NULL, 10);
        if (r->element[4]->elements > 0)
            dlock__holder_parse(r->element[4], out);
    }
    return 1;
}

/* dlock_lock_inspect; count_waiters 0 spares the waiters' step (adopt
 * needs only the holder). */
static int inspect(dlock_client *c, const char *name, dlock_info *out,
                   int count_waiters)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__keys *keys;
    dlock__cmdbuf b;
    char *ikey;
    int i, answered = 0, rc;
    int64_t deadline;

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
    out->held_ms = -1;
    out->notify_waiters = -1;
    out->fair_queue = -1;
    keys = dlock__keys_new(c, name);
    ikey = keys != NULL ? malloc(keys->keylen + sizeof DLOCK__HOLDER_SUFFIX)
                        : NULL;
    if (ikey == NULL) {
        free(keys);
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    }
    dlock__cmd_begin(&b, DLOCK__S_INSPECT);
    dlock__cmd_key(&b, keys->key, keys->keylen);
    dlock__cmd_key(&b, keys->fkey, keys->fkeylen);
    dlock__cmd_key(&b, keys->qkey, keys->qkeylen);
    /* Whoever holds it may record holder info, whether or not we do. */
    dlock__cmd_key(&b, ikey, dlock__holder_key(ikey, keys->key, keys->keylen));
    /* Both steps (the lock, then its waiters) within one timeout. */
    deadline = dlock__deadline(c, 0);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, deadline, res);
    for (i = 0; i < c->ns.n; i++)
        answered += inspect_answer(c, res, i, out);
    if (answered < c->ns.quorum)
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "inspect");
    else
        rc = DLOCK_OK;
    dlock__results_clear(res, c->ns.n);
    if (rc == DLOCK_OK && count_waiters)
        dlock__count_waiters(c, keys, deadline, out);
    free(keys);
    free(ikey);
    return rc;
}

/* See dlock.h. */
int dlock_lock_inspect(dlock_client *c, const char *name, dlock_info *out)
{
    return inspect(c, name, out, 1);
}

/* Adopt OWNER's semaphore permit or read lease of NAME (shared_info.c
 * finds it). Returns 1 when OWNER has neither and NAME is not a
 * semaphore (OWNER may hold it exclusively), else as dlock_lock_adopt. */
static int adopt_shared(dlock_lock **out, dlock_client *c, const char *name,
                        const char *owner, uint64_t token)
{
    dlock__held *h;
    int64_t ttl = -1;
    uint64_t tok = 0;
    int kind, rc = dlock__check_name(c, name);

    if (rc == DLOCK_OK)
        rc = dlock__shared_owner(c, name, owner, &kind, &ttl, &tok);
    if (rc != DLOCK_OK)
        return rc;
    if (kind == -2)
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "adopt %s: no permit of the semaphore is "
                                "held by %s",
                                name, owner);
    if (kind < 0)
        return 1;
    h = dlock__held_new(c, name, owner);
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    h->k.kind = kind;
    h->flags |= DLOCK__HELD_ADOPTED;
    h->depth = 1;
    h->handles = 1;
    h->token = token != 0 ? token : tok;
    h->nodes = dlock__all_nodes(c);
    atomic_store(&h->held_on, h->nodes);
    h->lease_ms = ttl > 0 ? ttl : 1;
    atomic_store(&h->valid_until_ms,
                 dlock__now_ms() + ttl - dlock__drift(c, ttl));
    pthread_mutex_lock(&c->held_mu);
    dlock__held_link(c, h);
    pthread_mutex_unlock(&c->held_mu);
    return dlock__handle_new(c, h, out);
}

/* See dlock.h. A permit or a reader is looked for first (a name holds
 * one kind; the lock's own inspect would not list them). */
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
    rc = adopt_shared(out, c, name, owner, token);
    if (rc != 1)
        return rc;
    rc = inspect(c, name, &info, 0);
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
    atomic_store(&h->held_on, h->nodes);
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

/* A finding when ROLE says the server is a replica (or could not be
 * asked): a lock must be written to a master. ro: replica-read-only's
 * value, NULL when unknown. */
static void replica_finding(char *buf, size_t len, int *n, const char *host,
                            const redisReply *role, const char *ro)
{
    const redisReply *m;
    if (role->type == REDIS_REPLY_ERROR) {
        finding(buf, len, n,
                "%s: not checked for replication: ROLE refused: %.120s", host,
                role->str);
        return;
    }
    if (role->type != REDIS_REPLY_ARRAY || role->elements < 1 ||
        role->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(role->element[0]->str, "slave") != 0)
        return;
    m = role->elements >= 3 ? role->element[1] : NULL;
    if (ro != NULL && strcmp(ro, "no") == 0)
        finding(buf, len, n,
                "%s: a writable replica of %s:%lld: a lock taken there is "
                "not seen by the master's clients and vanishes at the next "
                "resync (use the master)",
                host, m != NULL && m->type == REDIS_REPLY_STRING ? m->str : "?",
                dlock__elem_int(role, 2));
    else
        finding(buf, len, n,
                "%s: a read-only replica of %s:%lld: every acquire is "
                "refused (READONLY; use the master)",
                host, m != NULL && m->type == REDIS_REPLY_STRING ? m->str : "?",
                dlock__elem_int(role, 2));
}

/* The servers to check, into nodes: the node set's, or in a cluster
 * every master of the slot map (loaded now if need be; a map that cannot
 * be loaded is a finding). Returns how many. */
static int check_nodes(dlock_client *c, dlock__node **nodes, char *buf,
                       size_t len, int *n)
{
    char err[DLOCK__ERRLEN] = "";
    int i;
    if (c->ns.cluster == NULL) {
        for (i = 0; i < c->ns.n; i++)
            nodes[i] = &c->ns.node[i];
        return c->ns.n;
    }
    if (dlock__cluster_refresh(&c->ns,
                               dlock__now_ms() + c->opts.command_timeout_ms,
                               err, sizeof err) != DLOCK_OK &&
        dlock__cluster_masters(&c->ns, nodes, DLOCK_MAX_SERVERS) == 0) {
        finding(buf, len, n, "cluster: not checked: %s", err);
        return 0;
    }
    return dlock__cluster_masters(&c->ns, nodes, DLOCK_MAX_SERVERS);
}

/* What dlock_client_check asks every node: CONFIG GET of each of these,
 * then ROLE (reply NCONF). */
static const char *const check_names[] = {"maxmemory-policy", "appendonly",
                                          "appendfsync", "replica-read-only",
                                          "cluster-enabled"};
enum { NCONF = 5, NREPLY = NCONF + 1 };

/* Ask node nd the settings (r[0..NREPLY-1], owned by the caller on
 * DLOCK_OK), by the client's command timeout; a second try on a fresh
 * connection, as a pooled one may have been closed by the server since
 * it was last used. DLOCK_OK or the failure with err set. */
static int ask_settings(dlock_client *c, dlock__node *nd, redisReply **r,
                        char *err, size_t errlen)
{
    int64_t deadline = dlock__now_ms() + c->opts.command_timeout_ms;
    int rc = DLOCK_EIO, attempt, k;

    for (attempt = 0; attempt < 2 && rc != DLOCK_OK; attempt++) {
        dlock__conn *conn = NULL;
        rc = dlock__node_take(&c->ns, nd, &conn, deadline, err, errlen);
        for (k = 0; rc == DLOCK_OK && k < NCONF; k++) {
            const char *argv[3] = {"CONFIG", "GET", check_names[k]};
            rc = dlock__conn_append_argv(conn, 3, argv, NULL);
        }
        if (rc == DLOCK_OK) {
            const char *argv[1] = {"ROLE"};
            rc = dlock__conn_append_argv(conn, 1, argv, NULL);
        }
        if (rc == DLOCK_OK)
            rc = dlock__conn_roundtrip(conn, NREPLY, r, deadline, -1, err,
                                       errlen);
        if (conn != NULL)
            dlock__node_give(&c->ns, nd, conn, rc == DLOCK_OK);
        if (rc == DLOCK_OK)
            atomic_fetch_add(&c->stats.requests, NREPLY);
        if (dlock__now_ms() >= deadline)
            break;
    }
    return rc;
}

/* The findings of node HOST's settings r (as ask_settings read them)
 * appended to buf (len bytes; *n counts them). */
static void settings_findings(const dlock_client *c, const char *host,
                              redisReply **r, char *buf, size_t len, int *n)
{
    const char *policy, *aof, *fsync, *cluster;
    int k;

    replica_finding(buf, len, n, host, r[NCONF], config_value(r[3]));
    for (k = 0; k < 4; k++)
        if (r[k]->type == REDIS_REPLY_ERROR)
            break;
    if (k < 4) {
        finding(buf, len, n, "%s: not checked: CONFIG GET %s refused: %.120s",
                host, check_names[k], r[k]->str);
        return;
    }
    policy = config_value(r[0]);
    aof = config_value(r[1]);
    fsync = config_value(r[2]);
    cluster = config_value(r[4]);
    if (policy != NULL && strcmp(policy, "noeviction") != 0)
        finding(buf, len, n,
                "%s: maxmemory-policy is %s: under memory pressure "
                "Redis may evict a lock key, and then two owners "
                "can hold the lock (use noeviction)",
                host, policy);
    if (c->ns.cluster == NULL && cluster != NULL && strcmp(cluster, "yes") == 0)
        finding(buf, len, n,
                "%s: this is a Redis Cluster node: use "
                "redis+cluster:// (with redis:// only the keys of "
                "its own slots work, the others fail)",
                host);
    if (c->ns.n > 1 && aof != NULL && fsync != NULL &&
        (strcmp(aof, "yes") != 0 || strcmp(fsync, "always") != 0))
        finding(buf, len, n,
                "%s: appendonly %s, appendfsync %s: a restart can "
                "forget locks and fencing counters; Redlock needs "
                "appendfsync always or restarts delayed past the "
                "longest lease",
                host, aof, fsync);
}

/* See dlock.h. */
int dlock_client_check(dlock_client *c, char *buf, size_t len)
{
    dlock__node *nodes[DLOCK_MAX_SERVERS];
    int i, k, n = 0, nn;

    if (c == NULL || buf == NULL || len == 0)
        return c == NULL
                   ? DLOCK_EINVAL
                   : dlock__set_error(c, DLOCK_EINVAL,
                                      "check: no buffer for the findings");
    buf[0] = '\0';
    {
        char same[DLOCK__ERRLEN];
        if (dlock__ident_refused(&c->ns, same, sizeof same))
            finding(buf, len, &n, "%s: every operation is refused", same);
    }
    nn = check_nodes(c, nodes, buf, len, &n);
    for (i = 0; i < nn; i++) {
        const char *host = dlock__node_name(nodes[i]);
        char err[DLOCK__ERRLEN] = "";
        redisReply *r[NREPLY] = {NULL};
        char msg[512];

        if (ask_settings(c, nodes[i], r, err, sizeof err) != DLOCK_OK) {
            finding(buf, len, &n, "%s: not checked: %s", host, err);
            continue;
        }
        settings_findings(c, host, r, buf, len, &n);
        for (k = 0; k < NREPLY; k++)
            if (r[k] != NULL)
                freeReplyObject(r[k]);
        if (dlock__check_channels(c, nodes[i], msg, sizeof msg))
            finding(buf, len, &n, "%s", msg);
    }
    return n + dlock__health_warnings(c, buf, len);
}
