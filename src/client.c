/*
 * client.c - dlock_client: options and their defaults, the client's
 * lifetime (nodes, TLS context, background threads), counters and
 * cancellation.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* See dlock.h. */
const char *dlock_version(void)
{
    return DLOCK_VERSION;
}

/* See dlock.h. */
void dlock_options_init(dlock_options *o)
{
    memset(o, 0, sizeof *o);
    o->version = DLOCK_OPTIONS_VERSION;
    o->key_prefix = "dlock";
    o->connect_timeout_ms = 2000;
    o->command_timeout_ms = 2000;
    o->pool_size = 4;
    o->wait_strategy = DLOCK_WAIT_NOTIFY;
    o->spin_min_ms = 1;
    o->spin_max_ms = 128;
    o->drift_ppm = 10000;
    o->drift_fixed_ms = 2;
}

/* strdup that keeps NULL as NULL; sets *oom on failure. */
static char *dup_opt(const char *s, int *oom)
{
    char *d;
    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        *oom = 1;
    return d;
}

/* Reject options that would make a silently wrong lock. */
static int check_options(const dlock_options *o, char *err, size_t errlen)
{
    size_t i;
    if (o->version != DLOCK_OPTIONS_VERSION)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "options version %u not supported (call "
                           "dlock_options_init)",
                           o->version);
    if (o->nservers == 0 || o->servers == NULL)
        return dlock__fail(err, errlen, DLOCK_EINVAL, "no server given");
    if (o->nservers > DLOCK_MAX_SERVERS)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "%zu servers given, at most %d", o->nservers,
                           DLOCK_MAX_SERVERS);
    for (i = 0; i < o->nservers; i++)
        if (o->servers[i] == NULL)
            return dlock__fail(err, errlen, DLOCK_EINVAL, "server %zu is NULL",
                               i);
    if (o->key_prefix == NULL || o->key_prefix[0] == '\0' ||
        strlen(o->key_prefix) > DLOCK_PREFIX_MAX ||
        strpbrk(o->key_prefix, "{}") != NULL)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "key_prefix must be 1 to %d bytes without "
                           "'{' or '}'",
                           DLOCK_PREFIX_MAX);
    if (o->connect_timeout_ms <= 0 || o->command_timeout_ms <= 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "connect_timeout_ms and command_timeout_ms must "
                           "be > 0");
    if (o->pool_size < 1 || o->pool_size > 1024)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "pool_size must be 1 to 1024");
    if (o->wait_strategy != DLOCK_WAIT_NOTIFY &&
        o->wait_strategy != DLOCK_WAIT_SPIN &&
        o->wait_strategy != DLOCK_WAIT_FAIR)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "unknown wait_strategy %d", (int)o->wait_strategy);
    if (o->wait_strategy == DLOCK_WAIT_FAIR && o->nservers > 1)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "the fair wait strategy needs a single server");
    if (o->spin_min_ms < 1 || o->spin_max_ms < o->spin_min_ms)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "need 1 <= spin_min_ms <= spin_max_ms");
    if (o->drift_ppm < 0 || o->drift_ppm >= 1000000 || o->drift_fixed_ms < 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "drift_ppm must be 0 to 999999 and "
                           "drift_fixed_ms >= 0");
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "tls_cert_file and tls_key_file go together");
    return DLOCK_OK;
}

/* Free everything client_new may have made; c is partly built. */
static void client_destroy(dlock_client *c)
{
    size_t i;
    dlock__watchdog_free(c);
    dlock__notify_free(c);
    dlock__nodeset_free(&c->ns);
    if (c->servers != NULL)
        for (i = 0; i < c->opts.nservers; i++)
            free(c->servers[i]);
    free(c->servers);
    free(c->username);
    if (c->password != NULL)
        explicit_bzero(c->password, strlen(c->password));
    free(c->password);
    free(c->key_prefix);
    free(c->tls_ca_file);
    free(c->tls_ca_dir);
    free(c->tls_server_name);
    free(c->tls_cert_file);
    free(c->tls_key_file);
    pthread_mutex_destroy(&c->held_mu);
    pthread_cond_destroy(&c->held_cv);
    pthread_mutex_destroy(&c->wait_mu);
    pthread_cond_destroy(&c->wait_cv);
    dlock__msgs_destroy(&c->msgs);
    free(c);
}

/* See dlock.h. */
int dlock_client_new(dlock_client **out, const dlock_options *opts,
                     char *errbuf, size_t errlen)
{
    dlock_client *c;
    int rc, oom = 0;
    size_t k;

    if (errbuf != NULL && errlen > 0)
        errbuf[0] = '\0';
    if (out == NULL)
        return dlock__fail(errbuf, errlen, DLOCK_EINVAL, "out is NULL");
    *out = NULL;
    if (opts == NULL)
        return dlock__fail(errbuf, errlen, DLOCK_EINVAL, "opts is NULL");
    rc = check_options(opts, errbuf, errlen);
    if (rc != DLOCK_OK)
        return rc;

    c = calloc(1, sizeof *c);
    if (c == NULL)
        return dlock__fail(errbuf, errlen, DLOCK_ENOMEM, "out of memory");
    if (dlock__msgs_init(&c->msgs) != 0) {
        free(c);
        return dlock__fail(errbuf, errlen, DLOCK_ENOMEM,
                           "no thread-specific key left");
    }
    pthread_mutex_init(&c->held_mu, NULL);
    dlock__cond_init(&c->held_cv);
    pthread_mutex_init(&c->wait_mu, NULL);
    dlock__cond_init(&c->wait_cv);
    c->opts = *opts;
    c->servers = calloc(opts->nservers, sizeof *c->servers);
    if (c->servers == NULL)
        oom = 1;
    for (k = 0; c->servers != NULL && k < opts->nservers; k++)
        c->servers[k] = dup_opt(opts->servers[k], &oom);
    c->username = dup_opt(opts->username, &oom);
    c->password = dup_opt(opts->password, &oom);
    c->key_prefix = dup_opt(opts->key_prefix, &oom);
    c->tls_ca_file = dup_opt(opts->tls_ca_file, &oom);
    c->tls_ca_dir = dup_opt(opts->tls_ca_dir, &oom);
    c->tls_server_name = dup_opt(opts->tls_server_name, &oom);
    c->tls_cert_file = dup_opt(opts->tls_cert_file, &oom);
    c->tls_key_file = dup_opt(opts->tls_key_file, &oom);
    /* The copy must not point at the caller's memory. */
    c->opts.servers = (const char *const *)c->servers;
    c->opts.username = c->username;
    c->opts.password = c->password;
    c->opts.key_prefix = c->key_prefix;
    c->opts.tls_ca_file = c->tls_ca_file;
    c->opts.tls_ca_dir = c->tls_ca_dir;
    c->opts.tls_server_name = c->tls_server_name;
    c->opts.tls_cert_file = c->tls_cert_file;
    c->opts.tls_key_file = c->tls_key_file;
    if (oom) {
        client_destroy(c);
        return dlock__fail(errbuf, errlen, DLOCK_ENOMEM, "out of memory");
    }
    c->prefixlen = strlen(c->key_prefix);

    rc = dlock__topology_fill(&c->ns, &c->opts, &c->stats, errbuf, errlen);
    if (rc == DLOCK_OK && dlock__random_bytes(c->id, sizeof c->id) != 0)
        rc = dlock__fail(errbuf, errlen, DLOCK_EIO, "getrandom: %s",
                         strerror(errno));
    if (rc != DLOCK_OK) {
        client_destroy(c);
        return rc;
    }
    for (k = 0; k < sizeof c->id; k++)
        snprintf(c->idhex + 2 * k, 3, "%02x", c->id[k]);
    dlock__scripts_init(c->scripts);
    rc = dlock__notify_init(c);
    if (rc == DLOCK_OK)
        rc = dlock__watchdog_init(c);
    if (rc != DLOCK_OK) {
        client_destroy(c);
        return dlock__fail(errbuf, errlen, rc, "cannot start threads");
    }
    if (c->ns.tls != NULL && opts->tls_insecure) {
        static const char warn[] =
            "WARNING: TLS verification is OFF (tls_insecure): anyone on "
            "the path can read and forge traffic";
        dlock__set_error(c, DLOCK_OK, "%s", warn);
        dlock__fail(errbuf, errlen, DLOCK_OK, "%s", warn);
    }
    *out = c;
    return DLOCK_OK;
}

/* See dlock.h. */
void dlock_client_free(dlock_client *c)
{
    dlock__held *h, *next;
    if (c == NULL)
        return;
    dlock_client_cancel(c);
    dlock__watchdog_free(c);
    dlock__notify_free(c);
    /* Handles still out are the caller's bug; their leases run out. */
    for (h = c->held; h != NULL; h = next) {
        next = h->next;
        dlock__held_free(h);
    }
    c->held = NULL;
    for (h = c->undos; h != NULL; h = next) {
        next = h->next;
        dlock__held_free(h);
    }
    c->undos = NULL;
    client_destroy(c);
}

/* See dlock.h. */
const char *dlock_errmsg(const dlock_client *c)
{
    if (c == NULL)
        return "client is NULL";
    return dlock__msgs_peek(&c->msgs);
}

/* See dlock.h. */
const char *dlock_client_id(const dlock_client *c)
{
    return c != NULL ? c->idhex : "";
}

/* See dlock.h. */
void dlock_client_cancel(dlock_client *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->wait_mu);
    atomic_fetch_add(&c->cancel_gen, 1);
    pthread_cond_broadcast(&c->wait_cv);
    pthread_mutex_unlock(&c->wait_mu);
    dlock__notify_cancel(c);
}

/* See dlock.h. */
void dlock_client_stats(const dlock_client *c, dlock_stats *s)
{
    if (s == NULL)
        return;
    memset(s, 0, sizeof *s);
    if (c == NULL)
        return;
    s->requests = atomic_load(&c->stats.requests);
    s->acquisitions = atomic_load(&c->stats.acquisitions);
    s->busy = atomic_load(&c->stats.busy);
    s->waits = atomic_load(&c->stats.waits);
    s->wakeups = atomic_load(&c->stats.wakeups);
    s->renewals = atomic_load(&c->stats.renewals);
    s->lost = atomic_load(&c->stats.lost);
    s->reconnects = atomic_load(&c->stats.reconnects);
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
        const char *host = c->ns.node[i].ep.display;
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
    return n;
}

/* See internal.h. The hold number makes every hold's owner id unique, so
 * that a late message of an earlier hold (a release, an undo or a renewal
 * delayed on the network past its timeout) can never act on a later hold
 * of the same thread. */
void dlock__owner_id(dlock_client *c, char *buf, size_t len)
{
    /* 32 + 1 + 20 + 1 + 20 + NUL; formatted by hand (hot path). */
    char *p = buf;
    if (len < 75) {
        snprintf(buf, len, "?");
        return;
    }
    memcpy(p, c->idhex, 32);
    p += 32;
    *p++ = ':';
    p += dlock__fmt_i64(p, dlock__thread_id());
    *p++ = ':';
    p += dlock__fmt_u64(p, atomic_fetch_add(&c->hold_seq, 1) + 1);
    *p = '\0';
}
