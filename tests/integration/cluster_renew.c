/*
 * cluster_renew.c - the watchdog's renewal round on a real Redis Cluster
 * (six nodes, three masters with a replica each, tests/harness/topology.h)
 * with wait_replicas 1: one round sends every master's renewals at once,
 * each master's behind one WAIT, so a master whose replica stalls costs
 * the round one WAIT timeout, not one per slot, and the other masters'
 * locks are renewed in time.
 *
 * (a) A's replica SIGSTOPped; six watchdog locks in six slots of master A
 *     (the lowest slots, so a round sorted by slot reaches them first)
 *     and one lock on master B with a lease (3 s) shorter than its
 *     renewal's due time (1 s) plus six WAIT timeouts (6 x 700 ms): B
 *     keeps being renewed through the rounds that carry A's stalled
 *     renewals and is never LOST. (One call per slot after another, the
 *     first such round kept B waiting 4.2 s.) A fixed round costs B one
 *     WAIT timeout: renewed 1.7 s into its 3 s lease, a margin a loaded
 *     machine keeps (1.5 s and 500 ms left it 0.5 s: it failed once).
 * (b) every master healthy: locks in three slots of each master, a
 *     semaphore permit and a reader (their own scripts, in the same
 *     round), all renewed round after round; after SCRIPT FLUSH on every
 *     master (NOSCRIPT: the source is sent); with one lock's slot half
 *     migrated (ASK) and then moved (MOVED); and a lock whose key is
 *     deleted is LOST while the others of its rounds go on.
 * Tests run in order on one cluster; each leaves it settled.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "th_cluster.h"
#include "th_replication.h"
#include "topology.h"

#define MAXL 16

#include "fixture_cluster.h"

/* RENEWED events per lock name (the watchdog thread counts, the test
 * reads). */
static struct {
    char name[64];
    atomic_int renewed;
    atomic_int lost;
    _Atomic int64_t max_us; /* the longest renewal round trip */
} seen[MAXL];
static int nseen;

static void on_event(const dlock_event *ev, void *ud)
{
    int i;
    (void)ud;
    for (i = 0; i < nseen; i++)
        if (strcmp(seen[i].name, ev->name) == 0) {
            if (ev->type == DLOCK_EVENT_RENEWED) {
                atomic_fetch_add(&seen[i].renewed, 1);
                if (ev->duration_us > atomic_load(&seen[i].max_us))
                    atomic_store(&seen[i].max_us, ev->duration_us);
            } else if (ev->type == DLOCK_EVENT_LOST)
                atomic_fetch_add(&seen[i].lost, 1);
        }
}

/* Track name's events; its index. */
static int track(const char *name)
{
    assert_true(nseen < MAXL);
    assert_true(snprintf(seen[nseen].name, sizeof seen[nseen].name, "%s",
                         name) < (int)sizeof seen[nseen].name);
    atomic_store(&seen[nseen].renewed, 0);
    atomic_store(&seen[nseen].lost, 0);
    atomic_store(&seen[nseen].max_us, 0);
    return nseen++;
}

/* A cluster client with wait_replicas 1 (WAIT timeout wait_ms) that
 * counts events. */
static dlock_client *rclient(int64_t wait_ms)
{
    th_durable d;
    th_durable_init(&d);
    d.command_timeout_ms = 2000;
    d.wait_replicas = 1;
    d.wait_timeout_ms = wait_ms;
    d.on_event = on_event;
    return fixture_durable(&d);
}

/* A name (prefix-N) whose key's slot the master on port serves and that
 * no name in used[0..nused-1] (slots) shares; its slot goes to used. */
static void name_on(char *buf, size_t len, const char *prefix, int port,
                    int *used, int *nused)
{
    int i, k;
    for (i = 0; i < 5000; i++) {
        char key[96];
        int slot, dup = 0;
        snprintf(buf, len, "%s-%d", prefix, i);
        snprintf(key, sizeof key, "dlock:{%s}", buf);
        slot = th_cluster_keyslot(&cl, key, strlen(key));
        assert_true(slot >= 0);
        for (k = 0; k < *nused; k++)
            dup |= used[k] == slot;
        if (dup || th_cluster_slot_port(&cl, slot) != port)
            continue;
        used[(*nused)++] = slot;
        return;
    }
    fail_msg("no name for port %d", port);
}

/* The ports of the three masters. */
static void masters(int *ports)
{
    ports[0] = th_cluster_slot_port(&cl, 0);
    ports[1] = th_cluster_slot_port(&cl, TH_CLUSTER_SLOTS / 2);
    ports[2] = th_cluster_slot_port(&cl, TH_CLUSTER_SLOTS - 1);
    assert_true(ports[0] > 0 && ports[1] > 0 && ports[2] > 0);
    assert_true(ports[0] != ports[1] && ports[1] != ports[2] &&
                ports[0] != ports[2]);
}

static dlock_lock *take(dlock_client *c, const char *name, int64_t lease_ms)
{
    dlock_acquire_options o;
    dlock_lock *l = NULL;
    int rc;
    dlock_acquire_options_init(&o);
    o.lease_ms = lease_ms;
    o.watchdog = 1;
    o.wait_ms = 5000;
    rc = dlock_lock_acquire_ex(&l, c, name, &o);
    if (rc != DLOCK_OK)
        print_error("acquire %s: %s (%s)\n", name, dlock_strerror(rc),
                    dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_OK);
    return l;
}

/* Wait (at most 60 s) until every tracked lock in idx[0..n-1] has at
 * least want more RENEWED events than base[], or one of them is LOST.
 * 0 when they all got there. */
static int wait_renewed(const int *idx, const int *base, int n, int want)
{
    int64_t end = th_now_ms() + 60000;
    while (th_now_ms() < end) {
        int i, all = 1;
        for (i = 0; i < n; i++) {
            if (atomic_load(&seen[idx[i]].lost) > 0)
                return -1;
            if (atomic_load(&seen[idx[i]].renewed) < base[i] + want)
                all = 0;
        }
        if (all)
            return 0;
        th_sleep_ms(20);
    }
    return -1;
}

/* (a) */
static void test_stalled_replica(void **state)
{
    int ports[3], used[16], nused = 0, i, bidx, base[1], abase[6], during[6], k;
    char names[7][64];
    dlock_lock *a[6], *b;
    dlock_client *c = rclient(700);
    th_server *rep;
    (void)state;
    nseen = 0;
    masters(ports);
    /* A: the master of slot 0, whose slots a round sorted by slot meets
     * first; B: the master of the last slot. */
    for (i = 0; i < 6; i++) {
        name_on(names[i], sizeof names[i], "ra", ports[0], used, &nused);
        track(names[i]);
    }
    name_on(names[6], sizeof names[6], "rb", ports[2], used, &nused);
    bidx = track(names[6]);
    for (i = 0; i < 6; i++)
        a[i] = take(c, names[i], 8000);
    b = take(c, names[6], 3000);

    rep = th_cluster_replica(&cl, ports[0]);
    assert_non_null(rep);
    th_server_pause(rep);
    /* The baseline of A's renewals is read once B has been renewed twice
     * since the pause. The watchdog runs its rounds one after the other
     * and reports a round's renewals before it starts the next, so every
     * round begun before the pause (B's first renewal since may be one)
     * has reported by B's second: a renewal of A counted after the
     * baseline was sent after the replica stopped. (A fixed sleep here
     * left a renewal acknowledged before the pause and reported late, by
     * a watchdog thread short of CPU, to be counted as one during it.) */
    base[0] = atomic_load(&seen[bidx].renewed);
    assert_int_equal(wait_renewed(&bidx, base, 1, 2), 0);
    for (i = 0; i < 6; i++)
        abase[i] = atomic_load(&seen[i].renewed);
    base[0] = atomic_load(&seen[bidx].renewed);
    /* B is due every 1 s; A's locks from 2.7 s on, then again while
     * their renewals are NOT_REPLICATED: six renewals of B span several
     * rounds that carry A's stalled WAIT. */
    i = wait_renewed(&bidx, base, 1, 6);
    /* Read before the resume: a renewal of A whose WAIT is blocked when
     * the replica runs again is acknowledged then, rightly, and reported
     * a moment later (issue 29, item 6: the "stray renewal during the
     * pause" that CI saw was such a one, counted after the resume). */
    for (k = 0; k < 6; k++)
        during[k] = atomic_load(&seen[k].renewed) - abase[k];
    th_server_resume(rep);
    if (i != 0)
        print_error("B renewed %d times, lost %d: %s\n",
                    atomic_load(&seen[bidx].renewed) - base[0],
                    atomic_load(&seen[bidx].lost),
                    dlock_lock_lost_reason(b, NULL) != DLOCK_OK ? "LOST" : "");
    assert_int_equal(i, 0);
    /* Reported, not asserted: a round that carried A's stalled calls
     * took about one WAIT timeout (700 ms), not one per slot. */
    print_message("longest round that renewed B: %lld ms\n",
                  (long long)atomic_load(&seen[bidx].max_us) / 1000);
    assert_int_equal(dlock_lock_status(b), DLOCK_OK);
    assert_int_equal(dlock_lock_lost_reason(b, NULL), DLOCK_OK);
    /* The rounds did carry A's locks: their WAIT found no replica, so
     * none was reported renewed while the replica was stopped (healthy,
     * each would have been renewed several times meanwhile).
     * Renewals acknowledged after the resume are reported, not
     * asserted. */
    {
        int stray = 0, after = 0;
        for (i = 0; i < 6; i++) {
            stray += during[i];
            after += atomic_load(&seen[i].renewed) - abase[i] - during[i];
        }
        if (stray > 0 || after > 0)
            print_message("renewals of A's locks: %d during the pause, "
                          "%d since the resume\n",
                          stray, after);
        assert_int_equal(stray, 0);
    }
    assert_int_equal(dlock_lock_release(b), DLOCK_OK);
    for (i = 0; i < 6; i++)
        dlock_lock_release(a[i]); /* LOST by now, or about to be */
    dlock_client_free(c);
    assert_int_equal(th_cluster_wait_ok(&cl, TH_TOPO_WAIT_MS), 0);
}

/* (b) */
static void test_healthy_masters(void **state)
{
    int ports[3], used[16], nused = 0, i, j, n = 0, idx[MAXL], base[MAXL];
    char names[MAXL][64];
    dlock_lock *l[MAXL];
    dlock_client *c = rclient(5000);
    dlock_acquire_options o;
    th_migration m;
    int mig, gone, slot, to;
    char key[96];
    (void)state;
    nseen = 0;
    masters(ports);
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++, n++) {
            name_on(names[n], sizeof names[n], "rh", ports[i], used, &nused);
            idx[n] = track(names[n]);
            l[n] = take(c, names[n], 1200);
        }
    dlock_acquire_options_init(&o);
    o.lease_ms = 1200;
    o.watchdog = 1;
    name_on(names[n], sizeof names[n], "rs", ports[1], used, &nused);
    idx[n] = track(names[n]);
    assert_int_equal(dlock_sem_acquire(&l[n], c, names[n], 3, &o), DLOCK_OK);
    n++;
    name_on(names[n], sizeof names[n], "rr", ports[2], used, &nused);
    idx[n] = track(names[n]);
    assert_int_equal(dlock_rw_acquire_shared(&l[n], c, names[n], 0, &o),
                     DLOCK_OK);
    n++;

    for (i = 0; i < n; i++)
        base[i] = 0;
    assert_int_equal(wait_renewed(idx, base, n, 4), 0);

    /* NOSCRIPT on every master: the calls go again with the source. */
    for (i = 0; i < 3; i++) {
        redisReply *r = th_cmd(th_cluster_node(&cl, ports[i]), "SCRIPT FLUSH");
        assert_non_null(r);
        freeReplyObject(r);
    }
    for (i = 0; i < n; i++)
        base[i] = atomic_load(&seen[idx[i]].renewed);
    assert_int_equal(wait_renewed(idx, base, n, 3), 0);

    /* Lock 0's slot half moved (its keys on the target: the source
     * answers ASK), then moved (MOVED). */
    mig = 0;
    assert_true(snprintf(key, sizeof key, "dlock:{%s}", names[mig]) <
                (int)sizeof key);
    slot = th_cluster_keyslot(&cl, key, strlen(key));
    to = ports[1];
    assert_int_equal(th_cluster_migrate_begin(&cl, slot, to, &m), 0);
    assert_true(th_cluster_migrate_keys(&cl, &m, 0) >= 1);
    for (i = 0; i < n; i++)
        base[i] = atomic_load(&seen[idx[i]].renewed);
    assert_int_equal(wait_renewed(idx, base, n, 3), 0);
    assert_int_equal(th_cluster_migrate_finish(&cl, &m), 0);
    for (i = 0; i < n; i++)
        base[i] = atomic_load(&seen[idx[i]].renewed);
    assert_int_equal(wait_renewed(idx, base, n, 3), 0);
    assert_true(th_cmd_int(th_cluster_node(&cl, to), "PTTL %s", key) > 0);

    /* A lock whose key is gone is LOST (NOT_OWNER); the others go on. */
    gone = 4;
    assert_true(snprintf(key, sizeof key, "dlock:{%s}", names[gone]) <
                (int)sizeof key);
    assert_int_equal(th_cmd_int(th_cluster_node(&cl, ports[1]), "DEL %s", key),
                     1);
    {
        int64_t end = th_now_ms() + 30000;
        while (atomic_load(&seen[idx[gone]].lost) == 0 && th_now_ms() < end)
            th_sleep_ms(20);
    }
    assert_int_equal(dlock_lock_lost_reason(l[gone], NULL), DLOCK_NOT_OWNER);
    for (i = 0, j = 0; i < n; i++)
        if (i != gone) {
            idx[j] = idx[i];
            base[j++] = atomic_load(&seen[idx[i]].renewed);
        }
    assert_int_equal(wait_renewed(idx, base, j, 3), 0);

    for (i = 0; i < n; i++) {
        int rc = dlock_lock_release(l[i]);
        if (i == gone)
            assert_int_equal(rc, DLOCK_LOST);
        else
            assert_int_equal(rc, DLOCK_OK);
    }
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_replica),
        cmocka_unit_test(test_healthy_masters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
