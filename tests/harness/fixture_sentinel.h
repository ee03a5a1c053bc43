/*
 * fixture_sentinel.h - the Sentinel fixture of the Sentinel tests that
 * need nothing more than the deployment (tests/harness/topology.h: a
 * master, two replicas, three sentinels).
 *
 * Include it once per test file, after <cmocka.h>, "dlock.h",
 * "harness.h" and "topology.h". It defines, for that file:
 *   sent            the group's deployment
 *   surl            its client URL (redis+sentinel://s1,s2,s3/dlock)
 *   setup/teardown  for cmocka_run_group_tests(): start and stop sent
 * Definitions in a header, as static functions, as in fixture.h.
 */
#ifndef TH_FIXTURE_SENTINEL_H
#define TH_FIXTURE_SENTINEL_H

static th_sentinel sent;
static char surl[512];

/* Start the deployment; 0 or -1. */
static int setup(void **state)
{
    (void)state;
    if (th_sentinel_start(&sent) != 0)
        return -1;
    th_sentinel_url(&sent, surl, sizeof surl);
    return 0;
}

/* Stop it (every process it started). */
static int teardown(void **state)
{
    (void)state;
    th_sentinel_stop(&sent);
    return 0;
}

#endif /* TH_FIXTURE_SENTINEL_H */
