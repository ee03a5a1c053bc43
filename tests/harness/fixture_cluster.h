/*
 * fixture_cluster.h - the Cluster fixture of the cluster tests that need
 * nothing more than the cluster (tests/harness/topology.h: six nodes,
 * three masters with a replica each).
 *
 * Include it once per test file, after <cmocka.h>, "dlock.h",
 * "harness.h", "th_cluster.h" and "th_replication.h". It defines, for
 * that file:
 *   cl              the group's cluster
 *   url             its client URL, seeded with nodes 0 and 1
 *   setup/teardown  for cmocka_run_group_tests(): start and stop cl
 *   fixture_durable a client of url with th_durable settings (below)
 * Definitions in a header, as static functions, as in fixture.h.
 */
#ifndef TH_FIXTURE_CLUSTER_H
#define TH_FIXTURE_CLUSTER_H

static th_cluster cl;
static char url[1024];

static int setup(void **state)
{
    (void)state;
    if (th_cluster_start(&cl) != 0)
        return -1;
    th_cluster_url(&cl, 0, 1, url, sizeof url);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_cluster_stop(&cl);
    return 0;
}

/* A client of url with d's settings (th_durable_new); it fails the test
 * when it cannot be made (the reason on stderr). */
__attribute__((unused)) static dlock_client *
fixture_durable(const th_durable *d)
{
    dlock_client *c = th_durable_new(url, d, NULL, 0, NULL);
    assert_non_null(c);
    return c;
}

#endif /* TH_FIXTURE_CLUSTER_H */
