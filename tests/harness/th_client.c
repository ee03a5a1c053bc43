/*
 * th_client.c - the one way the integration tests make a dlock client for
 * the throwaway servers: their URLs, the harness's TLS CA when the
 * transport is tls, a wait strategy and optional timeouts (or a fence
 * retention).
 */
#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "harness.h"

/* dlock_client_new(o), or NULL with the reason on stderr. */
static dlock_client *make(const dlock_options *o)
{
    dlock_client *c = NULL;
    char err[512];
    int rc = dlock_client_new(&c, o, err, sizeof err);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "th_client: %s: %s\n", dlock_strerror(rc), err);
        return NULL;
    }
    return c;
}

/* *o: the defaults for the one server *url (url must outlive o), with
 * the harness's TLS CA. */
static void one_server(dlock_options *o, const char **url)
{
    dlock_options_init(o);
    o->servers = url;
    o->nservers = 1;
    o->tls_ca_file = th_ca_file();
}

/* See harness.h. */
dlock_client *th_client_keep(const char *url, int64_t keep_ms)
{
    dlock_options o;
    one_server(&o, &url);
    o.fence_retention_ms = keep_ms;
    return make(&o);
}

/* See harness.h. */
dlock_client *th_client_spin(const char *url, int strategy, int64_t spin_min_ms,
                             int64_t spin_max_ms)
{
    dlock_options o;
    one_server(&o, &url);
    o.wait_strategy = (dlock_wait_strategy)strategy;
    o.spin_min_ms = spin_min_ms;
    o.spin_max_ms = spin_max_ms;
    return make(&o);
}

/* See harness.h. */
dlock_client *th_client_string(const char *url, int64_t keep_ms)
{
    return th_client_string_wait(url, keep_ms, DLOCK_WAIT_NOTIFY);
}

/* See harness.h. */
dlock_client *th_client_string_wait(const char *url, int64_t keep_ms,
                                    int strategy)
{
    dlock_options o;
    dlock_client *c;
    one_server(&o, &url);
    o.fence_retention_ms = keep_ms;
    o.wait_strategy = (dlock_wait_strategy)strategy;
    c = make(&o);
    if (c != NULL &&
        dlock_client_set_layout(c, DLOCK_LAYOUT_STRING) != DLOCK_OK) {
        fprintf(stderr, "th_client_string: %s\n", dlock_errmsg(c));
        dlock_client_free(c);
        c = NULL;
    }
    return c;
}

/* See harness.h. */
dlock_client *th_client(const char *const *urls, size_t n, int strategy,
                        int64_t cmd_timeout_ms, int64_t connect_timeout_ms)
{
    return th_client_user(urls, n, strategy, cmd_timeout_ms, connect_timeout_ms,
                          NULL, NULL);
}

/* See harness.h. */
dlock_client *th_client_user(const char *const *urls, size_t n, int strategy,
                             int64_t cmd_timeout_ms, int64_t connect_timeout_ms,
                             const char *user, const char *password)
{
    dlock_options o;
    dlock_options_init(&o);
    o.username = user;
    o.password = password;
    o.servers = urls;
    o.nservers = n;
    o.wait_strategy = (dlock_wait_strategy)strategy;
    o.tls_ca_file = th_ca_file();
    if (cmd_timeout_ms > 0)
        o.command_timeout_ms = cmd_timeout_ms;
    if (connect_timeout_ms > 0)
        o.connect_timeout_ms = connect_timeout_ms;
    return make(&o);
}

/* See harness.h. */
int th_nodes_holding(dlock_client *c, const char *name, int want)
{
    int64_t end = th_now_ms() + 20000;
    for (;;) {
        dlock_info info;
        memset(&info, 0, sizeof info);
        if (dlock_lock_inspect(c, name, &info) != DLOCK_OK)
            return -1;
        if (info.nodes_holding == want || th_now_ms() >= end)
            return info.nodes_holding;
        th_sleep_ms(20);
    }
}
