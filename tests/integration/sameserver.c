/*
 * sameserver.c - a Redlock majority never comes from one Redis server.
 * Two entries that are the same server are refused: by their URLs at
 * dlock_client_new (the same URL twice, another db of it, the same unix
 * socket), and by the server's run_id once connected (127.0.0.1 and
 * localhost, the unix socket and the TCP port of one server): the
 * operation fails with DLOCK_EINVAL naming both entries, leaves no lock
 * behind, and every later operation of that client is refused too.
 * Independent servers, and a server that refuses INFO (compared by URL
 * only), still work. Before the change `A A DEAD` and `A localhost:A DEAD`
 * acquired with "2 of 3" from one server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

static th_server srv_a, srv_b, srv_c, srv_dead;

static int setup(void **state)
{
    th_server_opts a = {0};
    (void)state;
    a.extra_conf = "user noinfo on >pw ~* &* +@all -info";
    if (th_server_start(&srv_a, &a) != 0 || th_server_start(&srv_b, NULL) ||
        th_server_start(&srv_c, NULL) || th_server_start(&srv_dead, NULL))
        return -1;
    th_server_stop(&srv_dead); /* its port now refuses connections */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&srv_c);
    th_server_stop(&srv_b);
    th_server_stop(&srv_a);
    return 0;
}

/* dlock_client_new on urls: the status, the message in err. */
static int make(const char *const *urls, size_t n, dlock_client **c, char *err,
                size_t errlen)
{
    dlock_options o;
    int rc;
    dlock_options_init(&o);
    o.servers = urls;
    o.nservers = n;
    o.command_timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    rc = dlock_client_new(c, &o, err, errlen);
    print_message("new: %s: %s\n", dlock_status_name(rc), err);
    return rc;
}

static void refused_by_url(const char *u1, const char *u2)
{
    char dead[64], err[512];
    const char *urls[3] = {u1, u2, dead};
    dlock_client *c = NULL;
    snprintf(dead, sizeof dead, "redis://127.0.0.1:%d", srv_dead.port);
    assert_int_equal(make(urls, 3, &c, err, sizeof err), DLOCK_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "servers 1 ("));
    assert_non_null(strstr(err, "and 2 ("));
    assert_non_null(strstr(err, "same Redis server"));
}

static void same_url_twice(void **state)
{
    (void)state;
    refused_by_url(srv_a.url, srv_a.url);
}

static void another_db(void **state)
{
    char db1[440];
    (void)state;
    snprintf(db1, sizeof db1, "%s/1", srv_a.url);
    refused_by_url(srv_a.url, db1);
}

static void same_socket(void **state)
{
    char db2[440];
    (void)state;
    snprintf(db2, sizeof db2, "%s?db=2", srv_a.unix_url);
    refused_by_url(srv_a.unix_url, db2);
}

/* Entries that only the run_id tells apart: the acquire is refused with
 * EINVAL naming both, nothing stays held, and later calls fail alike. */
static void refused_by_run_id(const char *u1, const char *u2, const char *name)
{
    char dead[64], err[512], key[128];
    const char *urls[3] = {u1, u2, dead};
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    dlock_info info;
    int rc;

    snprintf(dead, sizeof dead, "redis://127.0.0.1:%d", srv_dead.port);
    assert_int_equal(make(urls, 3, &c, err, sizeof err), DLOCK_OK);
    rc = dlock_lock_acquire(&l, c, name, 0, 30000);
    print_message("acquire: %s: %s\n", dlock_status_name(rc), dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_EINVAL);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(c), "servers 1 ("));
    assert_non_null(strstr(dlock_errmsg(c), "and 2 ("));
    assert_non_null(strstr(dlock_errmsg(c), "same Redis server"));
    /* What the step may have taken was given back at once. */
    snprintf(key, sizeof key, "EXISTS dlock:{%s}", name);
    assert_int_equal(th_cmd_int(&srv_a, key), 0);
    /* The client stays refused. */
    assert_int_equal(dlock_lock_acquire(&l, c, name, 0, 30000), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_inspect(c, name, &info), DLOCK_EINVAL);
    dlock_client_free(c);
}

static void localhost_and_ip(void **state)
{
    char lh[64];
    (void)state;
    snprintf(lh, sizeof lh, "redis://localhost:%d", srv_a.port);
    refused_by_run_id(srv_a.url, lh, "ss-localhost");
}

static void unix_and_tcp(void **state)
{
    (void)state;
    refused_by_run_id(srv_a.unix_url, srv_a.url, "ss-unix");
}

/* Three independent servers: no false alarm, also on later calls. */
static void independent_servers(void **state)
{
    const char *urls[3] = {srv_a.url, srv_b.url, srv_c.url};
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    char err[512];
    int i;
    (void)state;
    assert_int_equal(make(urls, 3, &c, err, sizeof err), DLOCK_OK);
    for (i = 0; i < 3; i++) {
        assert_int_equal(dlock_lock_acquire(&l, c, "ss-ok", 0, 30000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* A server that refuses INFO cannot be compared by run_id: it is used,
 * compared by its URL only. */
static void info_refused(void **state)
{
    char u[128];
    const char *urls[3] = {u, srv_b.url, srv_c.url};
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    char err[512];
    (void)state;
    snprintf(u, sizeof u, "redis://noinfo:pw@127.0.0.1:%d", srv_a.port);
    assert_int_equal(make(urls, 3, &c, err, sizeof err), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, c, "ss-noinfo", 0, 30000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_url_twice), cmocka_unit_test(another_db),
        cmocka_unit_test(same_socket),    cmocka_unit_test(localhost_and_ip),
        cmocka_unit_test(unix_and_tcp),   cmocka_unit_test(independent_servers),
        cmocka_unit_test(info_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
