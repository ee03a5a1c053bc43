/*
 * wait_outage.c - a waiting library acquire rides out a short outage of
 * a standalone server (issue 29 item 8): during a CLIENT PAUSE WRITE
 * longer than the command timeout, or a kill -9 and restart on the same
 * port, dlock_lock_acquire() with a 10 s wait is granted once the server
 * is back, where before it returned ETIMEDOUT or EIO at its first failed
 * attempt. A try (wait_ms 0) still returns the error at once, and so
 * does an acquire with DLOCK_ACQUIRE_NO_OUTAGE_WAIT.
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
#define FIXTURE_NS 1
#include "fixture_n.h"

#define CMD_TIMEOUT_MS 200

/* A client of srv[0] with a short command timeout, its connection
 * opened by a first lock. */
static dlock_client *warm_client(void)
{
    const char *urls[1] = {th_url(&srv[0])};
    dlock_client *c =
        th_client(urls, 1, DLOCK_WAIT_NOTIFY, CMD_TIMEOUT_MS, CMD_TIMEOUT_MS);
    dlock_lock *l = NULL;
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, c, "wo-warm", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    return c;
}

/* Acquire NAME with opts on c; the status (released when granted). */
static int acquire(dlock_client *c, const char *name, int64_t wait_ms,
                   unsigned flags)
{
    dlock_acquire_options ao;
    dlock_lock *l = NULL;
    int rc;
    dlock_acquire_options_init(&ao);
    ao.wait_ms = wait_ms;
    ao.lease_ms = 30000;
    ao.flags = flags;
    rc = dlock_lock_acquire_ex(&l, c, name, &ao);
    print_message("%s (wait %lld, flags %u): %s: %s\n", name,
                  (long long)wait_ms, flags, dlock_status_name(rc),
                  dlock_errmsg(c));
    if (rc == DLOCK_OK)
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    else
        assert_null(l);
    return rc;
}

/* CLIENT PAUSE WRITE for 1.5 s: the acquire's script waits past the
 * command timeout; a waiting acquire gets the lock after the pause. */
static void write_pause(void **state)
{
    dlock_client *c = warm_client();
    int rc;
    (void)state;
    th_cmd_int(&srv[0], "CLIENT PAUSE 1500 WRITE");
    assert_int_equal(acquire(c, "wo-pause-try", 0, 0), DLOCK_ETIMEDOUT);
    assert_int_equal(
        acquire(c, "wo-pause-flag", 10000, DLOCK_ACQUIRE_NO_OUTAGE_WAIT),
        DLOCK_ETIMEDOUT);
    rc = acquire(c, "wo-pause", 10000, 0);
    th_cmd_int(&srv[0], "CLIENT UNPAUSE"); /* (unfixed: the next tests) */
    assert_int_equal(rc, DLOCK_OK);
    dlock_client_free(c);
}

/* A waiting acquire in a thread (the servers must be started by the
 * main thread: they die with the thread that started them). */
struct waiter {
    dlock_client *c;
    int rc;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    w->rc = acquire(w->c, "wo-restart", 10000, 0);
    return NULL;
}

/* kill -9 and a restart on the same port 0.8 s later: refused
 * connections (EIO) while it is down; granted when it is back. */
static void restart(void **state)
{
    struct waiter w = {warm_client(), -1};
    pthread_t t;
    (void)state;
    th_server_kill9(&srv[0]);
    assert_int_equal(acquire(w.c, "wo-down-try", 0, 0), DLOCK_EIO);
    assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
    th_sleep_ms(800);
    assert_int_equal(th_server_restart(&srv[0]), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    dlock_client_free(w.c);
}

/* A wait shorter than the outage returns the outage's error at its end,
 * not DLOCK_TIMEDOUT. */
static void deadline_says_cause(void **state)
{
    dlock_client *c = warm_client();
    int rc;
    (void)state;
    th_cmd_int(&srv[0], "CLIENT PAUSE 3000 WRITE");
    rc = acquire(c, "wo-short", 700, 0);
    th_cmd_int(&srv[0], "CLIENT UNPAUSE");
    assert_int_equal(rc, DLOCK_ETIMEDOUT);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(write_pause),
        cmocka_unit_test(deadline_says_cause),
        cmocka_unit_test(restart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
