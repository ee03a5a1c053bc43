/*
 * fixture_n.h - the several-server fixture of the Redlock tests.
 *
 * Define FIXTURE_NS (how many servers; FIXTURE_AOF_ALWAYS too to run them
 * with appendfsync always), then include it once per test file, after
 * <cmocka.h>, "dlock.h" and "harness.h". It defines, for that file:
 *   srv[FIXTURE_NS]  the group's redis-servers
 *   main_pid         the test process (a forked child is not it)
 *   setup/teardown   for cmocka_run_group_tests(): start them; stop them,
 *                    resuming first any a test left SIGSTOPped
 *   fixture_urls     their URLs, for th_client() or dlock_options
 * (Static definitions in a header: see fixture.h.)
 */
#ifndef TH_FIXTURE_N_H
#define TH_FIXTURE_N_H

#include <sys/types.h>
#include <unistd.h>

static th_server srv[FIXTURE_NS];
static pid_t main_pid;

static int setup(void **state)
{
    th_server_opts so = {0};
    int i;
    (void)state;
    main_pid = getpid();
#ifdef FIXTURE_AOF_ALWAYS
    so.aof_always = 1;
#endif
    for (i = 0; i < FIXTURE_NS; i++)
        if (th_server_start(&srv[i], &so) != 0)
            return -1;
    return 0;
}

static int teardown(void **state)
{
    int i;
    (void)state;
    for (i = 0; i < FIXTURE_NS; i++) {
        th_server_resume(&srv[i]);
        th_server_stop(&srv[i]);
    }
    return 0;
}

/* urls[0..FIXTURE_NS-1] = the servers' URLs. */
__attribute__((unused)) static void fixture_urls(const char **urls)
{
    int i;
    for (i = 0; i < FIXTURE_NS; i++)
        urls[i] = th_url(&srv[i]);
}

#endif /* TH_FIXTURE_N_H */
