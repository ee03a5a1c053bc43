/*
 * fair_free_queue.c - fair waiters do not stall on a free lock whose
 * queue head is asleep (finding F6 of docs/reliability.md).
 *
 * A fair waiter that finds the lock free but another live waiter ahead of
 * it in the queue used to sleep until the next refresh of its place (a
 * third of the waiter TTL, 1 s). Nobody hands over a free lock, and a
 * waiter leaving the queue wakes nobody: when the head of the queue gave
 * up without trying again (its wait shorter than the refresh), the next
 * waiter slept on too. Waiters whose waits are at most the refresh period
 * then never tried as the head: each joined behind another, slept until
 * its own deadline, left and joined again at the back. The chaos suite's
 * fair_net_delay saw every acquire fail for 11 s and more.
 *
 * Here a killed waiter's entry (a child process waiting in fair mode,
 * killed -9) heads the queue of a free lock, as a queue entry outliving
 * its waiter does after network faults; three waiters with 800 ms waits
 * then contend for 8 s. Before the fix none of them ever got the lock;
 * now they poll while the lock is free and someone is ahead.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#define NAME "ffq"
#define KEY "dlock:{" NAME "}"

typedef struct contender {
    int64_t start_ms, end_ms;
    atomic_int got;
    atomic_llong first_ms; /* when the first acquire succeeded, 0: never */
    int failed;
} contender;

static void *contend(void *arg)
{
    contender *k = arg;
    const char *url = th_url(&srv);
    dlock_client *c = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    if (c == NULL) {
        k->failed = 1;
        return NULL;
    }
    while (th_now_ms() < k->start_ms)
        th_sleep_ms(5);
    while (th_now_ms() < k->end_ms) {
        dlock_lock *l = NULL;
        /* No pause after a failure: as a worker loop does, and it keeps
         * the waiters' cycles apart. */
        if (dlock_lock_acquire(&l, c, NAME, 800, 500) != DLOCK_OK)
            continue;
        long long zero = 0;
        atomic_compare_exchange_strong(&k->first_ms, &zero,
                                       (long long)th_now_ms());
        atomic_fetch_add(&k->got, 1);
        th_sleep_ms(20);
        dlock_lock_release(l);
    }
    dlock_client_free(c);
    return NULL;
}

static void test_free_lock_dead_head(void **state)
{
    const char *url = th_url(&srv);
    dlock_client *h = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    contender k[3];
    pthread_t t[3];
    dlock_lock *l;
    pid_t child;
    int64_t end, free_ms;
    int i, total = 0;
    (void)state;
    assert_non_null(h);
    /* The holder's lease runs out by itself: no release hands over. */
    assert_int_equal(dlock_lock_acquire(&l, h, NAME, 0, 1500), DLOCK_OK);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dlock_client *c = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
        dlock_lock *cl;
        if (c != NULL)
            dlock_lock_acquire(&cl, c, NAME, 30000, 30000);
        _exit(0);
    }
    end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "ZCARD " KEY ":q") != 1 && th_now_ms() < end)
        th_sleep_ms(2);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(th_cmd_int(&srv, "ZCARD " KEY ":q"), 1);
    /* The lock expires; the dead waiter's entry stays (its deadline is
     * up to 3 s after it last refreshed). */
    end = th_now_ms() + 5000;
    while (th_cmd_int(&srv, "EXISTS " KEY) != 0 && th_now_ms() < end)
        th_sleep_ms(5);
    free_ms = th_now_ms();
    assert_int_equal(th_cmd_int(&srv, "EXISTS " KEY), 0);
    assert_int_equal(th_cmd_int(&srv, "ZCARD " KEY ":q"), 1);
    for (i = 0; i < 3; i++) {
        k[i].start_ms = free_ms + 270 * i;
        k[i].end_ms = free_ms + 8000;
        atomic_init(&k[i].got, 0);
        atomic_init(&k[i].first_ms, 0);
        k[i].failed = 0;
        assert_int_equal(pthread_create(&t[i], NULL, contend, &k[i]), 0);
    }
    for (i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        assert_false(k[i].failed);
        total += atomic_load(&k[i].got);
        fprintf(stderr,
                "waiter %d: %d acquisitions, first %lld ms after "
                "the lock was free\n",
                i, atomic_load(&k[i].got),
                atomic_load(&k[i].first_ms)
                    ? atomic_load(&k[i].first_ms) - free_ms
                    : -1LL);
    }
    /* Liveness, not speed: once the dead entry's deadline has passed (at
     * most 3 s), a free lock must be had by one of them. */
    assert_true(total > 0);
    dlock_lock_release(l); /* long expired: NOT_OWNER */
    dlock_client_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_lock_dead_head),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
