/*
 * client.c - dlock_client, the composition root: options and their
 * defaults, and the client's lifetime, which puts the layers together (a
 * topology fills the node set, the scripts are hashed, the notifier and
 * the watchdog are made; client_free takes them apart in reverse). Also
 * the client id, dlock_errmsg, counters and cancellation. It may call
 * every layer; no file calls it.
 */
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/holder.h"
#include "notify/notify.h"
#include "hold/watchdog.h"

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
    o->wait_strategy = DLOCK_WAIT_FAIR;
    o->spin_min_ms = 1;
    o->spin_max_ms = 128;
    o->drift_ppm = 10000;
    o->drift_fixed_ms = 2;
    o->wait_replicas_timeout_ms = 1000;
    o->lock_delay_ms = -1;
    o->fence_retention_ms = DLOCK__FENCE_RETENTION_MS;
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

/* Copy *from into *to: a version 1 struct (built against an earlier
 * header) ends before fence_retention_ms, which is not read but takes its
 * default; the version becomes the current one. */
static void copy_options(dlock_options *to, const dlock_options *from)
{
    if (from->version == 1) {
        dlock_options_init(to);
        memcpy(to, from, offsetof(dlock_options, fence_retention_ms));
        to->version = DLOCK_OPTIONS_VERSION;
        return;
    }
    *to = *from;
}

/* Reject options that would make a silently wrong lock. */
static int check_options(const dlock_options *o, char *err, size_t errlen)
{
    size_t i;
    if (o->version != DLOCK_OPTIONS_VERSION && o->version != 1)
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
    if (o->spin_min_ms < 1 || o->spin_max_ms < o->spin_min_ms)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "need 1 <= spin_min_ms <= spin_max_ms");
    if (o->drift_ppm < 0 || o->drift_ppm >= 1000000 || o->drift_fixed_ms < 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "drift_ppm must be 0 to 999999 and "
                           "drift_fixed_ms >= 0");
    if (o->wait_replicas < 0 || o->wait_replicas > 1000 ||
        (o->wait_replicas > 0 && (o->wait_replicas_timeout_ms <= 0 ||
                                  o->wait_replicas_timeout_ms > 3600000)))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "wait_replicas must be 0 to 1000, and its "
                           "timeout 1 ms to 1 hour");
    if (o->lock_delay_ms < -1 || o->lock_delay_ms > 365LL * 24 * 3600 * 1000)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "lock_delay_ms must be -1 (automatic), 0 (off) "
                           "or a duration of at most a year");
    if (o->version >= 2 && o->fence_retention_ms != 0 &&
        (o->fence_retention_ms < 1000 ||
         o->fence_retention_ms > 10LL * 366 * 24 * 3600 * 1000))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "fence_retention_ms must be 0 (keep nothing) or "
                           "1000 ms to 10 years");
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL))
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "tls_cert_file and tls_key_file go together");
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_client_set_layout(dlock_client *c, dlock_layout layout)
{
    int busy;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (layout != DLOCK_LAYOUT_HASH && layout != DLOCK_LAYOUT_STRING)
        return dlock__set_error(c, DLOCK_EINVAL, "unknown layout %d",
                                (int)layout);
    pthread_mutex_lock(&c->held_mu);
    busy = c->held != NULL;
    pthread_mutex_unlock(&c->held_mu);
    if (busy)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "layout: the client holds locks; choose the "
                                "layout before the first acquire");
    if (layout == DLOCK_LAYOUT_STRING && c->ns.kind == DLOCK__TOPO_REDLOCK &&
        c->opts.wait_strategy == DLOCK_WAIT_FAIR)
        /* A fair queue over several servers needs the hash layout's
         * wake-instead-of-hand-over release and split tickets. */
        return dlock__set_error(c, DLOCK_EINVAL,
                                "layout string over %d servers (Redlock): "
                                "fair waits are not supported; use "
                                "wait_strategy notify or spin",
                                c->ns.n);
    if (layout == DLOCK_LAYOUT_STRING && c->opts.holder_info)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "layout string: holder_info is not "
                                "supported");
    c->layout = layout;
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_client_set_outage_ride_ms(dlock_client *c, int64_t ms)
{
    if (c == NULL)
        return DLOCK_EINVAL;
    if (ms < 1 && ms != -1)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "outage ride: %" PRId64
                                " ms: give 1 ms or more, or -1 (the "
                                "whole wait)",
                                ms);
    atomic_store(&c->outage_ride_ms, ms);
    return DLOCK_OK;
}

/* Free everything client_new may have made; c is partly built. */
static void client_destroy(dlock_client *c)
{
    size_t i;
    dlock__watchdog_free(c);
    dlock__notify_free(c->notifier);
    c->notifier = NULL;
    dlock__topology_free(&c->ns);
    dlock__holder_free(c);
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
    free(c->sentinel_username);
    if (c->sentinel_password != NULL)
        explicit_bzero(c->sentinel_password, strlen(c->sentinel_password));
    free(c->sentinel_password);
    pthread_mutex_destroy(&c->held_mu);
    pthread_cond_destroy(&c->held_cv);
    pthread_mutex_destroy(&c->wait_mu);
    pthread_cond_destroy(&c->wait_cv);
    dlock__msgs_destroy(&c->msgs);
    free(c);
}

/* Copy the strings of opts into c (c->opts is a shallow copy of opts):
 * the copy must not point at the caller's memory. Returns 1 when out of
 * memory (what was copied is freed with c), else 0. */
static int own_strings(dlock_client *c, const dlock_options *opts)
{
    int oom = 0;
    size_t k;
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
    c->sentinel_username = dup_opt(opts->sentinel_username, &oom);
    c->sentinel_password = dup_opt(opts->sentinel_password, &oom);
    c->opts.servers = (const char *const *)c->servers;
    c->opts.username = c->username;
    c->opts.password = c->password;
    c->opts.key_prefix = c->key_prefix;
    c->opts.tls_ca_file = c->tls_ca_file;
    c->opts.tls_ca_dir = c->tls_ca_dir;
    c->opts.tls_server_name = c->tls_server_name;
    c->opts.tls_cert_file = c->tls_cert_file;
    c->opts.tls_key_file = c->tls_key_file;
    c->opts.sentinel_username = c->sentinel_username;
    c->opts.sentinel_password = c->sentinel_password;
    return oom;
}

/* Make the notifier (over the parts of c it needs) and the watchdog;
 * their threads start on first use. DLOCK_OK or the failure. */
static int start_threads(dlock_client *c)
{
    dlock__notify_ctx nx = {.ns = &c->ns,
                            .msgs = &c->msgs,
                            .stats = &c->stats,
                            .cancel_gen = &c->cancel_gen,
                            .nopub = &c->nopub,
                            .connect_timeout_ms = c->opts.connect_timeout_ms};
    int rc = dlock__notify_init(&c->notifier, &nx);
    if (rc == DLOCK_OK)
        rc = dlock__watchdog_init(c);
    return rc;
}

/* See dlock.h. */
int dlock_client_new(dlock_client **out, const dlock_options *opts,
                     char *errbuf, size_t errlen)
{
    dlock_client *c;
    int rc, oom;
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
    copy_options(&c->opts, opts);
    oom = own_strings(c, opts);
    if (oom) {
        client_destroy(c);
        return dlock__fail(errbuf, errlen, DLOCK_ENOMEM, "out of memory");
    }
    c->prefixlen = strlen(c->key_prefix);
    rc = dlock__holder_init(c, opts, errbuf, errlen);
    if (rc != DLOCK_OK) {
        client_destroy(c);
        return rc;
    }

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
    rc = start_threads(c);
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
    if (c == NULL)
        return;
    dlock_client_cancel(c);
    dlock__watchdog_free(c);
    dlock__notify_free(c->notifier);
    c->notifier = NULL;
    /* Handles still out are the caller's bug; their leases run out. */
    dlock__registry_clear(c);
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
    dlock__notify_cancel(c->notifier);
}
