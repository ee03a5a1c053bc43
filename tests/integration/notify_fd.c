/*
 * notify_fd.c - waiters wake by file descriptor (issue 28): a release
 * message on a waiter's channel makes its eventfd (dlock__waiter_fd)
 * readable, and a handoff message names its waiter the same way, so that
 * a driver that polls instead of blocking (an event loop) can wait on
 * the subscriber thread's wakes. Uses the notifier's internal API
 * (src/notify/notify.h) against a real server: the channel messages are those
 * release.lua publishes ('r ID', 'h TOKEN OWNER').
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

#include "hold/core.h"
#include "notify/notify.h"

#define CHAN "dlock:{nfd}:c"
#define HCHAN "dlock:{nfd}:c:0123456789abcdef0123456789abcdef"
#define ME "0123456789abcdef0123456789abcdef:1:1"

/* poll fd for POLLIN up to ms: 1 readable, 0 not. */
static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, ms);
    return r == 1 && (p.revents & POLLIN) != 0;
}

/* A waiter of c on chan (me: the owner a handoff names, or NULL). */
static dlock__waiter *begin(dlock_client *c, const char *chan, const char *me)
{
    dlock__waiter *w = NULL;
    assert_int_equal(dlock__notify_begin(c->notifier, chan, strlen(chan), me,
                                         &w, dlock__now_ms() + 5000,
                                         atomic_load(&c->cancel_gen)),
                     DLOCK_OK);
    assert_non_null(w);
    return w;
}

/* The descriptor, readable once at first (what came before it), then
 * quiet until a message. */
static int fresh_fd(dlock__waiter *w)
{
    int fd = dlock__waiter_fd(w);
    assert_true(fd >= 0);
    assert_int_equal(dlock__waiter_fd(w), fd); /* one per waiter */
    assert_true(readable(fd, 0));
    dlock__waiter_fd_clear(w);
    assert_false(readable(fd, 0));
    return fd;
}

static void publish(const char *chan, const char *msg)
{
    assert_true(th_cmd_int(&srv, "PUBLISH %s %s", chan, msg) >= 1);
}

/* A release message makes the waiter's fd readable; the look that
 * follows (an until_ms past) says it was woken, without blocking. */
static void test_release_wakes_fd(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock__waiter *w = begin(c, CHAN, NULL);
    int fd = fresh_fd(w);
    (void)state;
    assert_int_equal(dlock__notify_wait(w, 0), 0); /* nothing yet */
    publish(CHAN, "r t1");
    assert_true(readable(fd, 5000));
    dlock__waiter_fd_clear(w);
    assert_int_equal(dlock__notify_wait(w, 0), 1);
    assert_int_equal(dlock__notify_wait(w, 0), 0); /* consumed */
    dlock__notify_end(w);
    dlock_client_free(c);
}

/* A fair handoff names the waiter: its fd wakes and the look finds the
 * lock handed to it, with the token. */
static void test_handoff_wakes_fd(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    dlock__waiter *w = begin(c, HCHAN, ME);
    int fd = fresh_fd(w);
    (void)state;
    assert_int_equal(dlock__notify_wait_handoff(w, 0), 0);
    publish(HCHAN, "h 77 " ME);
    assert_true(readable(fd, 5000));
    dlock__waiter_fd_clear(w);
    assert_int_equal(dlock__notify_wait_handoff(w, 0), 1);
    assert_int_equal(dlock__notify_handed(w), 1);
    assert_int_equal(dlock__notify_handoff_token(w), 77);
    dlock__notify_end(w);
    dlock_client_free(c);
}

/* A blocking wait of the process's only waiter reads the subscriber
 * connection itself and leaves it parked (read by nobody) when it ends.
 * A waiter that then asks for a descriptor must still be woken: the
 * subscriber thread reads the link for it again. */
static void test_fd_after_parked_link(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock__waiter *w = begin(c, CHAN, NULL);
    int fd;
    (void)state;
    /* Reads the link itself for 50 ms, then parks it. */
    assert_int_equal(dlock__notify_wait(w, dlock__now_ms() + 50), 0);
    dlock__notify_end(w);
    w = begin(c, CHAN, NULL);
    fd = fresh_fd(w);
    publish(CHAN, "r t2");
    assert_true(readable(fd, 5000));
    dlock__waiter_fd_clear(w);
    assert_int_equal(dlock__notify_wait(w, 0), 1);
    dlock__notify_end(w);
    dlock_client_free(c);
}

/* Two waiters of one channel, one polling and one blocking: the message
 * wakes both. */
static void test_fd_beside_blocking_waiter(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    dlock__waiter *a = begin(c, CHAN, NULL);
    dlock__waiter *b = begin(c, CHAN, NULL);
    int fd = fresh_fd(a);
    (void)state;
    publish(CHAN, "r t3");
    assert_int_equal(dlock__notify_wait(b, dlock__now_ms() + 5000), 1);
    assert_true(readable(fd, 5000));
    dlock__waiter_fd_clear(a);
    assert_int_equal(dlock__notify_wait(a, 0), 1);
    dlock__notify_end(a);
    dlock__notify_end(b);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_wakes_fd),
        cmocka_unit_test(test_handoff_wakes_fd),
        cmocka_unit_test(test_fd_after_parked_link),
        cmocka_unit_test(test_fd_beside_blocking_waiter),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
