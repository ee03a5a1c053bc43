/*
 * waiters_count.c - dlock_lock_inspect() counts the waiters Redis can tell
 * of, and says -1 when it cannot: processes waiting by notification (the
 * subscribers of the lock's release channel: one per process however many
 * threads wait) plus the fair-mode queue (one per thread). Before the
 * change `waiters` was the fair queue's length alone, 0 while processes
 * waited by notification.
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
#include "th_waiter.h"

static th_server srv;

static int setup(void **state)
{
    th_server_opts o = {0};
    (void)state;
    o.extra_conf = "user nopubsub on >pw ~* &* +@all -pubsub";
    return th_server_start(&srv, &o);
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&srv);
    return 0;
}

/* A thread that waits for NAME on client C (30 s, lease 30 s), then
 * releases it. */
static void start_waiter(th_waiter *w, dlock_client *c, const char *name)
{
    *w = (th_waiter){.c = c, .name = name, .wait_ms = 30000, .lease_ms = 30000};
    assert_int_equal(th_waiter_start(w), 0);
}

/* Inspect NAME on c until `waiters` is want (bounded: the waiters need a
 * moment to subscribe or queue); the last result in *info. */
static void inspect_until(dlock_client *c, const char *name, int64_t want,
                          dlock_info *info)
{
    int64_t end = th_now_ms() + 10000;
    do {
        assert_int_equal(dlock_lock_inspect(c, name, info), DLOCK_OK);
        if (info->waiters == want)
            break;
        th_sleep_ms(20);
    } while (th_now_ms() < end);
    print_message("%s: waiters %lld (notify %lld, fair %lld)\n", name,
                  (long long)info->waiters, (long long)info->notify_waiters,
                  (long long)info->fair_queue);
}

/* Two processes (clients) wait by notification, one with two threads:
 * two waiters. */
static void notify_waiters(void **state)
{
    const char *urls[1] = {srv.url};
    dlock_client *h = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_client *p1 = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_client *p2 = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 0, 0);
    dlock_lock *l = NULL;
    dlock_info info;
    static th_waiter w[3]; /* outlives a failed assertion */
    int i;
    (void)state;
    assert_non_null(h);
    assert_non_null(p1);
    assert_non_null(p2);
    assert_int_equal(dlock_lock_acquire(&l, h, "wc-n", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(h, "wc-n", &info), DLOCK_OK);
    assert_int_equal(info.waiters, 0);
    assert_int_equal(info.notify_waiters, 0);
    start_waiter(&w[0], p1, "wc-n");
    start_waiter(&w[1], p1, "wc-n");
    start_waiter(&w[2], p2, "wc-n");
    inspect_until(h, "wc-n", 2, &info);
    assert_int_equal(info.waiters, 2);
    assert_int_equal(info.notify_waiters, 2);
    assert_int_equal(info.fair_queue, 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (i = 0; i < 3; i++) {
        th_waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
    }
    dlock_client_free(p2);
    dlock_client_free(p1);
    dlock_client_free(h);
}

/* Two clients wait in fair mode: two queued waiters (a client queues
 * one waiter per lock at a time, its other threads wait their turn
 * inside the process). */
static void fair_waiters(void **state)
{
    const char *urls[1] = {srv.url};
    dlock_client *h = th_client(urls, 1, DLOCK_WAIT_FAIR, 0, 0);
    dlock_client *p1 = th_client(urls, 1, DLOCK_WAIT_FAIR, 0, 0);
    dlock_client *p2 = th_client(urls, 1, DLOCK_WAIT_FAIR, 0, 0);
    dlock_lock *l = NULL;
    dlock_info info;
    static th_waiter w[2];
    int i;
    (void)state;
    assert_non_null(h);
    assert_non_null(p1);
    assert_non_null(p2);
    assert_int_equal(dlock_lock_acquire(&l, h, "wc-f", 0, 30000), DLOCK_OK);
    start_waiter(&w[0], p1, "wc-f");
    start_waiter(&w[1], p2, "wc-f");
    inspect_until(h, "wc-f", 2, &info);
    assert_int_equal(info.waiters, 2);
    assert_int_equal(info.fair_queue, 2);
    assert_int_equal(info.notify_waiters, 0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    for (i = 0; i < 2; i++) {
        th_waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
    }
    dlock_client_free(p2);
    dlock_client_free(p1);
    dlock_client_free(h);
}

/* A user that may not run PUBSUB: the inspect works, the number of
 * waiters is unknown (-1), not 0. */
static void unknown_without_pubsub(void **state)
{
    char url[128];
    const char *urls[1] = {url};
    dlock_client *c;
    dlock_info info;
    (void)state;
    snprintf(url, sizeof url, "redis://nopubsub:pw@127.0.0.1:%d", srv.port);
    c = th_client(urls, 1, DLOCK_WAIT_NOTIFY, 0, 0);
    assert_non_null(c);
    assert_int_equal(dlock_lock_inspect(c, "wc-u", &info), DLOCK_OK);
    assert_int_equal(info.notify_waiters, -1);
    assert_int_equal(info.waiters, -1);
    assert_int_equal(info.fair_queue, 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(notify_waiters),
        cmocka_unit_test(fair_waiters),
        cmocka_unit_test(unknown_without_pubsub),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
