/*
 * fair_paused.c - a fair waiter frozen (SIGSTOP) while the lock is handed
 * to it, against a real redis-server. The release hands the lock to the
 * first waiter with a short lease (min(its lease, 2 s)); the waiter is
 * stopped, so it neither reads the handoff message nor confirms, and the
 * lease lapses; another client takes the lock. When the waiter resumes it
 * finds the old handoff message: it must not take it for a fresh grant
 * (the chaos suite's multi_chaos saw dlock_lock_acquire_all return such a
 * lock as valid, with an old token, while another worker held it). It
 * waits on, and gets the lock only after the other holder releases, with
 * a newer token, and the server names it the owner. The same for a
 * semaphore's permit handed to a FIFO waiter.
 */
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

/* What the waiter reports when its acquire returned. */
typedef struct report {
    int rc;         /* the acquire's status */
    int owner;      /* 1: the server names this hold the owner */
    uint64_t token; /* its token */
    int64_t valid;  /* its validity then, ms */
} report;

/* Take NAME: a lock, or a permit of a semaphore of limit 1 when SEM. */
static int take(dlock_lock **l, dlock_client *c, const char *name, int sem,
                const dlock_acquire_options *ao)
{
    return sem ? dlock_sem_acquire(l, c, name, 1, ao)
               : dlock_lock_acquire_ex(l, c, name, ao);
}

/* The waiter, a child: on a byte from go, wait (fair, lease 600 ms) for
 * NAME; report whether the server names it the owner (a lock; for a
 * permit: whether its lease is still there). Exits non-zero on anything
 * unexpected (a forked child must not use cmocka). */
static void waiter(const char *name, int sem, int go, int done)
{
    const char *url = th_url(&srv);
    dlock_client *c;
    dlock_lock *l = NULL;
    dlock_acquire_options ao;
    dlock_info info;
    report r;
    char x;

    if (read(go, &x, 1) != 1)
        _exit(2);
    c = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    if (c == NULL)
        _exit(3);
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 600;
    ao.wait_ms = 30000;
    memset(&r, 0, sizeof r);
    r.rc = take(&l, c, name, sem, &ao);
    if (r.rc == DLOCK_OK) {
        r.token = dlock_lock_token(l);
        r.valid = dlock_lock_validity_ms(l);
        if (sem)
            r.owner = dlock_lock_extend(l, 600) == DLOCK_OK;
        else
            r.owner = dlock_lock_inspect(c, name, &info) == DLOCK_OK &&
                      strcmp(info.owner, dlock_lock_owner(l)) == 0;
    }
    if (write(done, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(4);
    dlock_lock_release(l);
    dlock_client_free(c);
    _exit(0);
}

/* Wait until someone is queued for NAME (bounded): the fair queue of a
 * lock (<prefix>:{NAME}:q) or of a semaphore (a list). */
static void wait_queued(const char *name)
{
    for (int i = 0; i < 500; i++) {
        redisReply *r = th_cmd(&srv, "TYPE dlock:{%s}:q", name);
        int there;
        assert_non_null(r);
        there = strcmp(r->str, "none") != 0;
        freeReplyObject(r);
        if (there)
            return;
        th_sleep_ms(10);
    }
    fail_msg("nobody queued for %s", name);
}

static void stale_handoff_not_taken(const char *name, int sem)
{
    int go[2], done[2], st;
    struct pollfd pfd;
    dlock_client *c1, *c2;
    dlock_lock *l1 = NULL, *l2 = NULL;
    dlock_acquire_options ao;
    report r;
    pid_t pid;

    /* Forked before this process has a client (and its threads). */
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        close(done[0]);
        waiter(name, sem, go[0], done[1]);
    }
    close(go[0]);
    close(done[1]);
    {
        const char *url = th_url(&srv);
        c1 = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
        c2 = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    }
    assert_non_null(c1);
    assert_non_null(c2);
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 30000;
    assert_int_equal(take(&l1, c1, name, sem, &ao), DLOCK_OK);
    assert_int_equal(write(go[1], "g", 1), 1);
    wait_queued(name);

    /* Freeze the waiter, then release: the lock is handed to it with a
     * 600 ms lease it cannot confirm. */
    assert_int_equal(kill(pid, SIGSTOP), 0);
    assert_int_equal(dlock_lock_release(l1), DLOCK_OK);
    /* Once that lease lapsed another client gets the lock. */
    ao.wait_ms = 10000;
    assert_int_equal(take(&l2, c2, name, sem, &ao), DLOCK_OK);

    /* The waiter resumes with the old handoff message in its socket. It
     * may not return while l2 is held: if it does, the server must name
     * it the owner (it cannot, l2 holds). Give it a second to show. */
    assert_int_equal(kill(pid, SIGCONT), 0);
    pfd.fd = done[0];
    pfd.events = POLLIN;
    pfd.revents = 0;
    if (poll(&pfd, 1, 1000) == 1) {
        assert_int_equal(read(done[0], &r, sizeof r), (ssize_t)sizeof r);
        fail_msg("the waiter returned %s while another client held the "
                 "lock: token %llu (the holder's %llu), validity %lld ms, "
                 "owner on the server: %s",
                 dlock_status_name(r.rc), (unsigned long long)r.token,
                 (unsigned long long)dlock_lock_token(l2), (long long)r.valid,
                 r.owner ? "yes" : "no");
    }
    /* Now it gets the lock: after l2, with a newer token. */
    {
        uint64_t t2 = dlock_lock_token(l2);
        assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
        assert_int_equal(read(done[0], &r, sizeof r), (ssize_t)sizeof r);
        assert_int_equal(r.rc, DLOCK_OK);
        assert_int_equal(r.owner, 1);
        assert_true(r.token > t2);
        assert_true(r.valid > 0);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(go[1]);
    close(done[0]);
    dlock_client_free(c1);
    dlock_client_free(c2);
}

static void test_lock(void **state)
{
    (void)state;
    stale_handoff_not_taken("fp:lock", 0);
}

static void test_semaphore(void **state)
{
    (void)state;
    stale_handoff_not_taken("fp:sem", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock),
        cmocka_unit_test(test_semaphore),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
