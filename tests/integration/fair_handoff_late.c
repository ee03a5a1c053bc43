/*
 * fair_handoff_late.c - a fair handoff that reaches its waiter late must
 * not make the waiter believe it holds a lock the server has let go
 * (finding F7 of docs/reliability.md).
 *
 * The release script hands the lock to the first waiter with a short
 * lease (min(its lease, 2 s)) and publishes the handoff. The waiter used
 * to count that lease from the message's arrival; a message held up
 * (packet loss: the chaos suite's fair_netns_loss saw one arrive 689 ms
 * after the grant, with an 800 ms handoff lease), or a waiter process
 * paused while it waited, then believed it held the lock for up to the
 * whole handoff lease after the server had expired it, and another waiter
 * got it meanwhile: two holders with valid leases.
 *
 * Here the waiter is a child process, stopped (SIGSTOP) while the lock is
 * handed to it and resumed after the handoff lease ran out on the server.
 * Whatever its acquire returns, a lock it reports valid must exist on the
 * server.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

#define NAME "fhl"
#define KEY "dlock:{" NAME "}"

/* What the waiter saw right after its acquire returned. */
typedef struct seen {
    int rc;
    long long validity, pttl;
} seen;

static void test_late_handoff(void **state)
{
    const char *url = th_url(&srv);
    dlock_client *h = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    dlock_lock *l;
    seen s = {-1, 0, 0};
    int fd[2];
    pid_t child;
    int64_t end;
    (void)state;
    assert_non_null(h);
    assert_int_equal(pipe(fd), 0);
    assert_int_equal(dlock_lock_acquire(&l, h, NAME, 0, 10000), DLOCK_OK);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dlock_client *c = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
        dlock_lock *cl = NULL;
        seen r = {-1, 0, 0};
        close(fd[0]);
        if (c != NULL) {
            /* A 300 ms lease: the handoff lease is 300 ms too. */
            r.rc = dlock_lock_acquire(&cl, c, NAME, 30000, 300);
            if (r.rc == DLOCK_OK) {
                r.validity = dlock_lock_validity_ms(cl);
                r.pttl = th_cmd_int(&srv, "PTTL " KEY);
            }
        }
        if (write(fd[1], &r, sizeof r) != (ssize_t)sizeof r)
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    /* The waiter queued (it sleeps until the release or its refresh, 1 s
     * after this attempt): stop it, and hand the lock over meanwhile. */
    end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "ZCARD " KEY ":q") != 1 && th_now_ms() < end)
        th_sleep_ms(1);
    kill(child, SIGSTOP);
    assert_int_equal(th_cmd_int(&srv, "ZCARD " KEY ":q"), 1);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    /* The handoff lease runs out on the server (bounded wait). */
    end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "EXISTS " KEY) != 0 && th_now_ms() < end)
        th_sleep_ms(5);
    assert_int_equal(th_cmd_int(&srv, "EXISTS " KEY), 0);
    th_sleep_ms(150);
    kill(child, SIGCONT);
    assert_int_equal(read(fd[0], &s, sizeof s), (ssize_t)sizeof s);
    waitpid(child, NULL, 0);
    close(fd[0]);
    fprintf(stderr, "waiter: %s, validity %lld ms, server PTTL %lld ms\n",
            dlock_status_name(s.rc), s.validity, s.pttl);
    assert_int_equal(s.rc, DLOCK_OK);
    /* Valid by its own count means held on the server. */
    assert_true(s.validity <= 0 || s.pttl > 0);
    dlock_client_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_handoff),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
