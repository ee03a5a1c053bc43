/*
 * fixture.h - the one-server fixture most integration tests share.
 *
 * Include it once per test file, after <cmocka.h>, "dlock.h" and
 * "harness.h". It defines, for that file:
 *   srv             the group's redis-server (its own temp dir, free port)
 *   main_pid        the test process (a forked child is not it)
 *   setup/teardown  for cmocka_run_group_tests(): start and stop srv
 *   fixture_client  a client of srv (below)
 * Definitions in a header, as static functions, because each test is one
 * file and one program: there is nothing to link them into twice.
 */
#ifndef TH_FIXTURE_H
#define TH_FIXTURE_H

#include <sys/types.h>
#include <unistd.h>

static th_server srv;
static pid_t main_pid;

static int setup(void **state)
{
    (void)state;
    main_pid = getpid();
    return th_server_start(&srv, NULL);
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&srv);
    return 0;
}

/* A client of srv with this wait strategy and timeouts (0: the
 * defaults; see th_client). It fails the test when it cannot be made; in a
 * forked child it exits with status 9 instead (a child must not longjmp
 * into cmocka). */
__attribute__((unused)) static dlock_client *
fixture_client(int strategy, int64_t command_timeout_ms,
               int64_t connect_timeout_ms)
{
    const char *url = th_url(&srv);
    dlock_client *c =
        th_client(&url, 1, strategy, command_timeout_ms, connect_timeout_ms);
    if (c == NULL && getpid() != main_pid)
        _exit(9);
    assert_non_null(c);
    return c;
}

#endif /* TH_FIXTURE_H */
