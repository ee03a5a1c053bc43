/*
 * fenced_read.c - the fenced read-modify-write (dlock_fenced_read) against
 * a real redis-server: a read with a token raises the resource's fence to
 * it and returns the value; an older token is refused and changes
 * nothing; the argument checks; a key of another type is an error, not a
 * crash; SCRIPT FLUSH is survived. And the lost update the chaos suite's
 * multi_chaos found: a holder of several locks (dlock_lock_acquire_all,
 * watchdog on) reads its counters and is frozen with SIGSTOP past its
 * lease; a newer holder of the same locks reads them; the frozen holder
 * resumes and writes counter+1 with its old tokens. With dlock_fenced_get
 * for the reads those writes were accepted (nothing newer had been written
 * yet) and the newer holder's writes then lost them; with
 * dlock_fenced_read they are refused (DLOCK_STALE) and every counter ends
 * exactly one up.
 */
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

static dlock_client *client(void)
{
    return fixture_client(DLOCK_WAIT_FAIR, 0, 0);
}

/* KEY's fenced counter read with TOKEN: its status; *n the value (0 when
 * none). */
static int read_counter(dlock_client *c, const char *key, uint64_t token,
                        long long *n)
{
    char *v = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    int rc = dlock_fenced_read(c, key, token, &v, &len, &fence);
    *n = v != NULL ? atoll(v) : 0;
    free(v);
    return rc;
}

/* The counter KEY as the server holds it (-1: none). */
static long long server_counter(const char *key)
{
    redisReply *r = th_cmd(&srv, "HGET %s value", key);
    long long n = -1;
    assert_non_null(r);
    if (r->type == REDIS_REPLY_STRING)
        n = atoll(r->str);
    freeReplyObject(r);
    return n;
}

/* Write N to KEY fenced with TOKEN; the status. */
static int write_counter(dlock_client *c, const char *key, uint64_t token,
                         long long n)
{
    char v[32];
    int len = snprintf(v, sizeof v, "%lld", n);
    return dlock_fenced_set(c, key, token, v, (size_t)len);
}

static void test_read_raises_fence(void **state)
{
    dlock_client *c = client();
    char *v = NULL;
    size_t len = 7;
    uint64_t fence = 7;
    redisReply *r;
    (void)state;

    /* Nothing there: no value, and the token becomes the fence. */
    assert_int_equal(dlock_fenced_read(c, "fr:x", 10, &v, &len, &fence),
                     DLOCK_OK);
    assert_null(v);
    assert_int_equal(len, 0);
    assert_int_equal(fence, 10);
    /* An older write is refused from now on, the same token's accepted. */
    assert_int_equal(dlock_fenced_set(c, "fr:x", 9, "nine", 4), DLOCK_STALE);
    assert_int_equal(dlock_fenced_set(c, "fr:x", 10, "ten", 3), DLOCK_OK);
    /* A newer read returns the value and moves the fence on. */
    assert_int_equal(dlock_fenced_read(c, "fr:x", 12, &v, &len, &fence),
                     DLOCK_OK);
    assert_string_equal(v, "ten");
    assert_int_equal(len, 3);
    assert_int_equal(fence, 12);
    free(v);
    assert_int_equal(dlock_fenced_set(c, "fr:x", 11, "eleven", 6), DLOCK_STALE);
    /* The same token again reads; an older one is refused, reads nothing
     * and reports the fence. */
    assert_int_equal(dlock_fenced_read(c, "fr:x", 12, &v, &len, &fence),
                     DLOCK_OK);
    assert_string_equal(v, "ten");
    free(v);
    v = (char *)"junk";
    assert_int_equal(dlock_fenced_read(c, "fr:x", 11, &v, &len, &fence),
                     DLOCK_STALE);
    assert_null(v);
    assert_int_equal(len, 0);
    assert_int_equal(fence, 12);
    assert_non_null(strstr(dlock_errmsg(c), "older than 12"));
    /* What the server holds: the value kept, the fence raised. */
    r = th_cmd(&srv, "HMGET fr:x value fence");
    assert_non_null(r);
    assert_string_equal(r->element[0]->str, "ten");
    assert_string_equal(r->element[1]->str, "12");
    freeReplyObject(r);
    /* dlock_fenced_get sees the same. */
    assert_int_equal(dlock_fenced_get(c, "fr:x", &v, &len, &fence), DLOCK_OK);
    assert_string_equal(v, "ten");
    assert_int_equal(fence, 12);
    free(v);
    dlock_client_free(c);
}

static void test_bad_input(void **state)
{
    dlock_client *c = client();
    char *v = NULL, big[DLOCK_KEY_MAX + 2];
    size_t len = 0;
    uint64_t fence = 0;
    (void)state;

    assert_int_equal(dlock_fenced_read(NULL, "k", 1, &v, &len, &fence),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_read(c, NULL, 1, &v, &len, &fence),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_read(c, "", 1, &v, &len, &fence),
                     DLOCK_EINVAL);
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(dlock_fenced_read(c, big, 1, &v, &len, &fence),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_read(c, "k", 0, &v, &len, &fence),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "token"));
    assert_int_equal(
        dlock_fenced_read(c, "k", (1ULL << 53) + 1, &v, &len, &fence),
        DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_read(c, "k", 1, NULL, &len, &fence),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_read(c, "k", 1, &v, NULL, &fence),
                     DLOCK_EINVAL);
    assert_int_equal(dlock_fenced_read(c, "k", 1, &v, &len, NULL),
                     DLOCK_EINVAL);
    /* A key of another type: the server's error, nothing returned. */
    freeReplyObject(th_cmd(&srv, "SET fr:str hello"));
    v = NULL;
    assert_true(dlock_fenced_read(c, "fr:str", 5, &v, &len, &fence) < 0);
    assert_null(v);
    assert_int_equal(th_cmd_int(&srv, "EXISTS fr:str"), 1);
    /* After SCRIPT FLUSH the script is sent again. */
    freeReplyObject(th_cmd(&srv, "SCRIPT FLUSH"));
    assert_int_equal(dlock_fenced_read(c, "fr:f", 3, &v, &len, &fence),
                     DLOCK_OK);
    assert_int_equal(fence, 3);
    dlock_client_free(c);
}

#define NKEYS 2
static const char *const lock_names[NKEYS] = {"fr:lock-b", "fr:lock-a"};
static const char *const counters[NKEYS] = {"fr:{lock-b}:counter",
                                            "fr:{lock-a}:counter"};

/* The frozen holder, a child: on a byte from go[0] take both locks
 * (lease 600 ms, watchdog), read both counters with the locks' tokens and
 * report "r"; on the next byte (after its SIGSTOP and SIGCONT) write
 * counter+1 to each with its token and report both statuses. Exits
 * non-zero on anything unexpected (a forked child must not use cmocka). */
static void frozen_holder(int go, int done)
{
    const char *url = th_url(&srv);
    dlock_client *c;
    dlock_lock *l[NKEYS];
    dlock_acquire_options ao;
    long long n[NKEYS];
    int rcs[NKEYS];
    char x;

    if (read(go, &x, 1) != 1)
        _exit(2);
    c = th_client(&url, 1, DLOCK_WAIT_FAIR, 0, 0);
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 600;
    ao.watchdog = 1;
    if (c == NULL || dlock_lock_acquire_all(l, c, lock_names, NKEYS, &ao) != 0)
        _exit(3);
    for (int k = 0; k < NKEYS; k++)
        if (read_counter(c, counters[k], dlock_lock_token(l[k]), &n[k]) != 0)
            _exit(4);
    if (write(done, "r", 1) != 1 || read(go, &x, 1) != 1)
        _exit(5);
    for (int k = 0; k < NKEYS; k++)
        rcs[k] =
            write_counter(c, counters[k], dlock_lock_token(l[k]), n[k] + 1);
    if (write(done, rcs, sizeof rcs) != (ssize_t)sizeof rcs)
        _exit(6);
    dlock_lock_release_all(l, NKEYS);
    dlock_client_free(c);
    _exit(0);
}

static void test_paused_holder_write_refused(void **state)
{
    int go[2], done[2], rcs[NKEYS], st;
    dlock_lock *l[NKEYS];
    dlock_acquire_options ao;
    dlock_client *c;
    long long n[NKEYS];
    pid_t pid;
    char x;
    (void)state;

    for (int k = 0; k < NKEYS; k++)
        th_cmd_int(&srv, "HSET %s value 41 fence 1", counters[k]);
    /* Forked before this process has a client (and its threads). */
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        close(done[0]);
        frozen_holder(go[0], done[1]);
    }
    close(go[0]);
    close(done[1]);
    assert_int_equal(write(go[1], "g", 1), 1);
    assert_int_equal(read(done[0], &x, 1), 1);
    /* The holder has read both counters: freeze it, watchdog and all. */
    assert_int_equal(kill(pid, SIGSTOP), 0);

    /* Its leases run out; this holder gets both locks and reads. */
    c = client();
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 5000;
    ao.wait_ms = 10000;
    assert_int_equal(dlock_lock_acquire_all(l, c, lock_names, NKEYS, &ao),
                     DLOCK_OK);
    for (int k = 0; k < NKEYS; k++) {
        assert_int_equal(
            read_counter(c, counters[k], dlock_lock_token(l[k]), &n[k]),
            DLOCK_OK);
        assert_int_equal(n[k], 41);
    }

    /* The frozen holder resumes and writes with its old tokens before
     * this one writes: refused on every key. */
    assert_int_equal(write(go[1], "w", 1), 1);
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_int_equal(read(done[0], rcs, sizeof rcs), (ssize_t)sizeof rcs);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    for (int k = 0; k < NKEYS; k++)
        assert_int_equal(rcs[k], DLOCK_STALE);

    /* This holder's update is the only one: no update lost. */
    for (int k = 0; k < NKEYS; k++) {
        assert_int_equal(
            write_counter(c, counters[k], dlock_lock_token(l[k]), n[k] + 1),
            DLOCK_OK);
        assert_int_equal(server_counter(counters[k]), 42);
    }
    assert_int_equal(dlock_lock_release_all(l, NKEYS), DLOCK_OK);
    close(go[1]);
    close(done[0]);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_raises_fence),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_paused_holder_write_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
