/*
 * waiting_noperm.c - a user without pub/sub channel permission (issue 16,
 * defect 4): Redis 7 creates ACL users with no channel permission
 * (acl-pubsub-default resetchannels). The release script's PUBLISH is then
 * refused (NOPERM) after the key was deleted: the release must still
 * report success, a waiter (its SUBSCRIBE refused too) must get the lock
 * by polling soon after the release, with one warning, and
 * dlock_client_check() must say what is missing and which ACL rule
 * fixes it. Over tcp, tls and unix.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

#include "fixture_nochan.h"

/* A client that logs in as the user without channel permission. */
static dlock_client *nochan_client(int strategy)
{
    const char *url = th_url(&srv);
    dlock_client *c = th_client_user(&url, 1, strategy, 0, 0, "nochan", "pw");
    assert_non_null(c);
    return c;
}

/* Wait (bounded) until client c has found a lock busy at least once: its
 * waiter is then waiting, not about to find the lock free (a fixed sleep
 * is not enough on a loaded machine). */
static void wait_busy(dlock_client *c)
{
    dlock_stats st;
    int64_t end = th_now_ms() + 10000;
    do {
        dlock_client_stats(c, &st);
        if (st.busy > 0)
            return;
        th_sleep_ms(5);
    } while (th_now_ms() < end);
    fail_msg("the waiter never tried");
}

typedef struct waiter {
    dlock_client *c;
    const char *name;
    int rc;
    int64_t done_ms;
    char msg[512];
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    dlock_lock *l;
    w->rc = dlock_lock_acquire(&l, w->c, w->name, 20000, 10000);
    w->done_ms = th_now_ms();
    snprintf(w->msg, sizeof w->msg, "%s", dlock_errmsg(w->c));
    if (w->rc == DLOCK_OK)
        dlock_lock_release(l);
    return NULL;
}

/* No channel permission: the release succeeds, the waiter (default
 * strategy, and notify) gets the lock once it is released, with the
 * warning; the key is gone. */
static void test_release_and_wait(void **state)
{
    int strategies[2] = {DLOCK_WAIT_FAIR, DLOCK_WAIT_NOTIFY};
    int s;
    (void)state;
    for (s = 0; s < 2; s++) {
        dlock_client *a = nochan_client(strategies[s]);
        dlock_client *b = nochan_client(strategies[s]);
        waiter w = {b, "np-lock", -1, 0, ""};
        dlock_lock *l;
        pthread_t t;
        int64_t t_rel;

        assert_int_equal(dlock_lock_acquire(&l, a, "np-lock", 0, 10000),
                         DLOCK_OK);
        assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
        wait_busy(b);
        th_sleep_ms(300);
        t_rel = th_now_ms();
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        pthread_join(t, NULL);
        assert_int_equal(w.rc, DLOCK_OK);
        fprintf(stderr,
                "strategy %d: waiter had the lock %lld ms after "
                "the release; message: %s\n",
                strategies[s], (long long)(w.done_ms - t_rel), w.msg);
        assert_non_null(strstr(w.msg, "NOPERM"));
        assert_non_null(strstr(w.msg, "&dlock:*"));
        assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{np-lock}"), 0);
        assert_int_equal(th_cmd_int(&srv, "ZCARD dlock:{np-lock}:q"), 0);
        dlock_client_free(a);
        dlock_client_free(b);
    }
}

/* The warning comes once per client, not on every acquire. */
static void test_one_warning(void **state)
{
    dlock_client *a = nochan_client(DLOCK_WAIT_FAIR);
    dlock_client *b = nochan_client(DLOCK_WAIT_FAIR);
    int k;
    (void)state;
    for (k = 0; k < 2; k++) {
        waiter w = {b, "np-once", -1, 0, ""};
        dlock_lock *l;
        pthread_t t;
        assert_int_equal(dlock_lock_acquire(&l, a, "np-once", 0, 10000),
                         DLOCK_OK);
        assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
        if (k == 0)
            wait_busy(b);
        th_sleep_ms(100);
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
        pthread_join(t, NULL);
        assert_int_equal(w.rc, DLOCK_OK);
        if (k == 0)
            assert_non_null(strstr(w.msg, "NOPERM"));
        else
            assert_string_equal(w.msg, "");
    }
    dlock_client_free(a);
    dlock_client_free(b);
}

/* dlock_client_check names the missing permission and the fix; a user
 * with channel permission gets no such finding. */
static void test_check(void **state)
{
    dlock_client *c = nochan_client(DLOCK_WAIT_FAIR);
    const char *url = th_url(&srv);
    dlock_client *ok = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    char buf[2048];
    int n;
    (void)state;
    n = dlock_client_check(c, buf, sizeof buf);
    fprintf(stderr, "check: %d finding(s):\n%s", n, buf);
    assert_true(n >= 1);
    assert_non_null(strstr(buf, "NOPERM"));
    assert_non_null(strstr(buf, "&dlock:*"));
    assert_non_null(strstr(buf, "allchannels"));
    assert_non_null(ok);
    n = dlock_client_check(ok, buf, sizeof buf);
    assert_null(strstr(buf, "NOPERM"));
    dlock_client_free(c);
    dlock_client_free(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_and_wait),
        cmocka_unit_test(test_one_warning),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
