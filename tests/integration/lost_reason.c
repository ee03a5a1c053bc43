/*
 * lost_reason.c - the library says why a lease was lost, and notices a
 * replica.
 *
 * dlock_lock_lost_reason(): DLOCK_OK while the lock is held; after the
 * watchdog found it lost, DLOCK_NOT_OWNER when the servers answered that
 * it is no longer ours (its key deleted, another owner), or the last
 * renewal's failure (DLOCK_ETIMEDOUT against a stopped server) with a
 * sentence naming the server. It works from inside the lost callback.
 *
 * dlock_client_check() reports a server that is a replica (ROLE), read-only
 * or writable, and not its master.
 *
 * Before the change neither existed: the callback had no reason at all
 * (the tool asked the servers again, which a stopped server does not
 * answer), and the check did not look at replication.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

static th_server srv, rep, wrep;

static int setup(void **state)
{
    th_server_opts ro = {0}, rw = {0};
    static char c1[128], c2[160];
    (void)state;
    if (th_server_start(&srv, NULL) != 0)
        return -1;
    snprintf(c1, sizeof c1, "replicaof 127.0.0.1 %d", srv.port);
    snprintf(c2, sizeof c2, "replicaof 127.0.0.1 %d\nreplica-read-only no",
             srv.port);
    ro.extra_conf = c1;
    rw.extra_conf = c2;
    if (th_server_start(&rep, &ro) != 0 || th_server_start(&wrep, &rw) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_server_resume(&srv);
    th_server_stop(&wrep);
    th_server_stop(&rep);
    th_server_stop(&srv);
    return 0;
}

/* What the lost callback saw. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int cb_calls, cb_code;
static char cb_why[512];

static void on_lost(dlock_lock *l, void *ud)
{
    const char *why;
    int code = dlock_lock_lost_reason(l, &why);
    (void)ud;
    pthread_mutex_lock(&mu);
    cb_calls++;
    cb_code = code;
    snprintf(cb_why, sizeof cb_why, "%s", why);
    pthread_mutex_unlock(&mu);
}

/* A watchdog lock NAME with a 1 s lease on c. */
static dlock_lock *hold(dlock_client *c, const char *name)
{
    dlock_acquire_options o;
    dlock_lock *l = NULL;
    dlock_acquire_options_init(&o);
    o.lease_ms = 1000;
    o.watchdog = 1;
    o.on_lost = on_lost;
    assert_int_equal(dlock_lock_acquire_ex(&l, c, name, &o), DLOCK_OK);
    pthread_mutex_lock(&mu);
    cb_calls = 0;
    cb_code = 1;
    cb_why[0] = '\0';
    pthread_mutex_unlock(&mu);
    return l;
}

/* Wait (bounded) until the lock is reported lost. */
static void wait_lost(dlock_lock *l)
{
    int64_t end = th_now_ms() + 15000;
    while (dlock_lock_status(l) != DLOCK_LOST && th_now_ms() < end)
        th_sleep_ms(20);
    assert_int_equal(dlock_lock_status(l), DLOCK_LOST);
    /* The callback runs right after the state is set. */
    end = th_now_ms() + 5000;
    for (;;) {
        int calls;
        pthread_mutex_lock(&mu);
        calls = cb_calls;
        pthread_mutex_unlock(&mu);
        if (calls > 0 || th_now_ms() >= end)
            break;
        th_sleep_ms(10);
    }
}

static void not_lost_yet(void **state)
{
    const char *urls[1] = {srv.url};
    dlock_client *c = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 500, 500);
    dlock_lock *l;
    const char *why = "x";
    (void)state;
    assert_non_null(c);
    l = hold(c, "lr-ok");
    assert_int_equal(dlock_lock_lost_reason(l, &why), DLOCK_OK);
    assert_string_equal(why, "");
    assert_int_equal(dlock_lock_lost_reason(NULL, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void key_deleted(void **state)
{
    const char *urls[1] = {srv.url};
    dlock_client *c = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 500, 500);
    dlock_lock *l;
    const char *why;
    (void)state;
    assert_non_null(c);
    l = hold(c, "lr-del");
    assert_int_equal(th_cmd_int(&srv, "DEL dlock:{lr-del}"), 1);
    wait_lost(l);
    assert_int_equal(dlock_lock_lost_reason(l, &why), DLOCK_NOT_OWNER);
    print_message("deleted: %s\n", why);
    assert_non_null(strstr(why, "no longer this owner's"));
    pthread_mutex_lock(&mu);
    assert_int_equal(cb_calls, 1);
    assert_int_equal(cb_code, DLOCK_NOT_OWNER);
    assert_string_equal(cb_why, why);
    pthread_mutex_unlock(&mu);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    dlock_client_free(c);
}

static void server_stopped(void **state)
{
    const char *urls[1] = {srv.url};
    dlock_client *c = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 200, 200);
    dlock_lock *l;
    const char *why;
    char port[16];
    int code;
    (void)state;
    assert_non_null(c);
    l = hold(c, "lr-stop");
    th_server_pause(&srv);
    wait_lost(l);
    code = dlock_lock_lost_reason(l, &why);
    th_server_resume(&srv);
    print_message("stopped: %s: %s\n", dlock_status_name(code), why);
    assert_int_equal(code, DLOCK_ETIMEDOUT);
    assert_non_null(strstr(why, "renewals failed: extend: "));
    snprintf(port, sizeof port, ":%d", srv.port);
    assert_non_null(strstr(why, port));
    pthread_mutex_lock(&mu);
    assert_int_equal(cb_code, DLOCK_ETIMEDOUT);
    pthread_mutex_unlock(&mu);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);
    dlock_client_free(c);
}

/* dlock_client_check on url alone; the findings in buf. */
static int check(const char *url, char *buf, size_t len)
{
    const char *urls[1] = {url};
    dlock_client *c = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 2000, 2000);
    int n;
    assert_non_null(c);
    n = dlock_client_check(c, buf, len);
    print_message("check %s: %d: %s\n", url, n, buf);
    dlock_client_free(c);
    return n;
}

static void replica_found(void **state)
{
    char buf[2048], master[64];
    (void)state;
    snprintf(master, sizeof master, "of 127.0.0.1:%d", srv.port);
    assert_true(check(rep.url, buf, sizeof buf) >= 1);
    assert_non_null(strstr(buf, "a read-only replica"));
    assert_non_null(strstr(buf, master));
    assert_true(check(wrep.url, buf, sizeof buf) >= 1);
    assert_non_null(strstr(buf, "a writable replica"));
    assert_non_null(strstr(buf, master));
    /* The master itself: no replica finding (the topology warning about
     * its replicas without wait_replicas is not one). */
    check(srv.url, buf, sizeof buf);
    assert_null(strstr(buf, "a read-only replica"));
    assert_null(strstr(buf, "a writable replica"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(not_lost_yet),
        cmocka_unit_test(key_deleted),
        cmocka_unit_test(server_stopped),
        cmocka_unit_test(replica_found),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
