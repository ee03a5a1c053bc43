/*
 * refused.c - refusals by the server that no retry can cure come back as
 * DLOCK_EREFUSED, not as an outage (DLOCK_EIO, DLOCK_NO_QUORUM...), so
 * that a caller that retries on outages does not retry a misconfiguration
 * forever: an ACL user without the right to run scripts, one without
 * access to the lock's keys, a read-only replica, EVAL renamed away. With
 * Redlock, refusals that leave no majority are reported as the refusal;
 * one refusing node among healthy ones still gives the lock.
 * Before the change every one of these was DLOCK_ESERVER (one server) or
 * DLOCK_NO_QUORUM (Redlock), i.e. exit 69 in the tool.
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

static th_server srv_a;   /* users without eval / without the lock's keys */
static th_server srv_rep; /* a replica of srv_a */
static th_server srv_ren; /* EVAL renamed away */
static th_server srv_d, srv_e;

static int setup(void **state)
{
    th_server_opts a = {0}, rep = {0}, ren = {0};
    char conf[128];
    (void)state;
    a.extra_conf = "user noeval on >pw ~* &* +@all -eval -evalsha\n"
                   "user nokeys on >pw ~other:* &* +@all\n";
    if (th_server_start(&srv_a, &a) != 0)
        return -1;
    snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d", srv_a.port);
    rep.extra_conf = conf;
    ren.extra_conf = "rename-command EVAL \"\"";
    if (th_server_start(&srv_rep, &rep) != 0 ||
        th_server_start(&srv_ren, &ren) != 0 ||
        th_server_start(&srv_d, NULL) != 0 ||
        th_server_start(&srv_e, NULL) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&srv_e);
    th_server_stop(&srv_d);
    th_server_stop(&srv_ren);
    th_server_stop(&srv_rep);
    th_server_stop(&srv_a);
    return 0;
}

/* Acquire NAME once on the servers in urls; return the status and leave
 * the message in msg. A lock obtained is released. */
static int try_acquire(const char *const *urls, size_t n, const char *name,
                       char *msg, size_t msglen)
{
    dlock_client *c = th_client(urls, n, DLOCK_WAIT_NOTIFY, 1000, 1000);
    dlock_lock *l = NULL;
    int rc;
    assert_non_null(c);
    rc = dlock_lock_acquire(&l, c, name, 0, 5000);
    snprintf(msg, msglen, "%s", dlock_errmsg(c));
    print_message("%s: %s: %s\n", name, dlock_status_name(rc), msg);
    if (l != NULL)
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    return rc;
}

static void user_url(char *buf, size_t len, const th_server *s,
                     const char *user)
{
    snprintf(buf, len, "redis://%s:pw@127.0.0.1:%d", user, s->port);
}

static void acl_without_eval(void **state)
{
    char url[128], msg[1280];
    const char *urls[1] = {url};
    (void)state;
    user_url(url, sizeof url, &srv_a, "noeval");
    assert_int_equal(try_acquire(urls, 1, "r-noeval", msg, sizeof msg),
                     DLOCK_EREFUSED);
    assert_non_null(strstr(msg, "NOPERM"));
}

static void acl_without_keys(void **state)
{
    char url[128], msg[1280];
    const char *urls[1] = {url};
    (void)state;
    user_url(url, sizeof url, &srv_a, "nokeys");
    assert_int_equal(try_acquire(urls, 1, "r-nokeys", msg, sizeof msg),
                     DLOCK_EREFUSED);
    assert_non_null(strstr(msg, "NOPERM"));
}

static void readonly_replica(void **state)
{
    const char *urls[1] = {srv_rep.url};
    char msg[1280];
    (void)state;
    assert_int_equal(try_acquire(urls, 1, "r-replica", msg, sizeof msg),
                     DLOCK_EREFUSED);
    /* Known a replica by the INFO of its connection: refused before the
     * script is sent; otherwise the script's READONLY. */
    assert_true(strstr(msg, "READONLY") != NULL ||
                strstr(msg, "is a replica") != NULL);
}

static void eval_renamed(void **state)
{
    const char *urls[1] = {srv_ren.url};
    char msg[1280];
    (void)state;
    /* EVALSHA answers NOSCRIPT; the EVAL that follows is unknown. */
    assert_int_equal(try_acquire(urls, 1, "r-renamed", msg, sizeof msg),
                     DLOCK_EREFUSED);
    assert_non_null(strstr(msg, "unknown command"));
}

/* Two of three nodes refuse: no majority is possible, and that is the
 * refusal, not an outage. */
static void redlock_refused_majority(void **state)
{
    char url[128], msg[1280];
    const char *urls[3] = {url, srv_rep.url, srv_d.url};
    (void)state;
    user_url(url, sizeof url, &srv_a, "noeval");
    assert_int_equal(try_acquire(urls, 3, "r-red2", msg, sizeof msg),
                     DLOCK_EREFUSED);
    assert_non_null(strstr(msg, "NOPERM"));
    /* Known a replica by the INFO of its connection: refused before the
     * script is sent; otherwise the script's READONLY. */
    assert_true(strstr(msg, "READONLY") != NULL ||
                strstr(msg, "is a replica") != NULL);
}

/* One of three refuses: the other two still make the majority. */
static void redlock_one_refusal(void **state)
{
    char url[128], msg[1280];
    const char *urls[3] = {url, srv_d.url, srv_e.url};
    (void)state;
    user_url(url, sizeof url, &srv_a, "noeval");
    assert_int_equal(try_acquire(urls, 3, "r-red1", msg, sizeof msg), DLOCK_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(acl_without_eval),
        cmocka_unit_test(acl_without_keys),
        cmocka_unit_test(readonly_replica),
        cmocka_unit_test(eval_renamed),
        cmocka_unit_test(redlock_refused_majority),
        cmocka_unit_test(redlock_one_refusal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
