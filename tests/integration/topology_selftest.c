/*
 * topology_selftest.c - tests of the Sentinel and Cluster fixtures
 * (tests/harness/topology.[ch]), not of the library: with raw hiredis
 * commands, the deployments start as described, sentinel failovers
 * (forced and after kill -9) move the master, and the cluster covers every
 * slot, serves keys from their owner, swaps roles on CLUSTER FAILOVER and
 * answers ASK while a slot is half moved and MOVED once it is moved. Also
 * compares the library's slot function (src/slot.c) with the server's
 * CLUSTER KEYSLOT. Tests within a group run in order on one deployment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "topology.h"
#include "../../src/base/slot.h"

/* Assert that r is a string reply equal to want; frees r. */
static void expect_str(redisReply *r, const char *want)
{
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)
        print_error("expected \"%s\", got type %d (%s)\n", want, r->type,
                    r->type == REDIS_REPLY_ERROR ? r->str : "");
    assert_true(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
}

/* Assert that r is an error reply starting with prefix; frees r. */
static void expect_err(redisReply *r, const char *prefix)
{
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR)
        print_error("expected error %s..., got type %d\n", prefix, r->type);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    if (strncmp(r->str, prefix, strlen(prefix)) != 0)
        print_error("expected error %s..., got %s\n", prefix, r->str);
    assert_true(strncmp(r->str, prefix, strlen(prefix)) == 0);
    freeReplyObject(r);
}

/* ---- Sentinel ----------------------------------------------------------- */

static th_sentinel sent;

/* Milliseconds on CLOCK_MONOTONIC (start-up times are reported, never
 * asserted). */
static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int sentinel_setup(void **state)
{
    int64_t t0 = mono_ms();
    int rc = th_sentinel_start(&sent);

    (void)state;
    print_message("sentinel deployment up in %lld ms\n",
                  (long long)(mono_ms() - t0));
    return rc;
}

static int sentinel_teardown(void **state)
{
    (void)state;
    th_sentinel_stop(&sent);
    return 0;
}

/* After start: data[0] is the master every sentinel reports, the other
 * two replicate from it, every sentinel has a quorum, writes replicate. */
static void test_sentinel_started(void **state)
{
    int mp;

    (void)state;
    assert_int_equal(th_sentinel_master_port(&sent), sent.data[0].port);
    assert_int_equal(th_role(&sent.data[0], NULL), 1);
    for (int i = 1; i < TH_SENTINEL_DATA; i++) {
        assert_int_equal(th_role(&sent.data[i], &mp), 0);
        assert_int_equal(mp, sent.data[0].port);
    }
    for (int i = 0; i < TH_SENTINEL_COUNT; i++) {
        redisReply *r = th_cmd(&sent.sentinels[i], "SENTINEL CKQUORUM %s",
                               TH_SENTINEL_NAME);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        assert_true(strncmp(r->str, "OK", 2) == 0);
        freeReplyObject(r);
        r = th_cmd(&sent.sentinels[i], "ROLE");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_string_equal(r->element[0]->str, "sentinel");
        freeReplyObject(r);
    }
    expect_str(th_cmd(&sent.data[0], "SET %s %s", "topo:k", "v1"), "OK");
    assert_int_equal(th_cmd_int(&sent.data[0], "WAIT 2 10000"), 2);
    expect_str(th_cmd(&sent.data[1], "GET %s", "topo:k"), "v1");
}

/* SENTINEL FAILOVER: every sentinel reports another master, which answers
 * ROLE master and accepts writes; the deployment then settles with the old
 * master as a replica of the new one. */
static void test_sentinel_failover(void **state)
{
    int old = th_sentinel_master_port(&sent), now, mp;
    th_server *m, *o;

    (void)state;
    now = th_sentinel_failover(&sent);
    assert_true(now > 0);
    assert_int_not_equal(now, old);
    for (int i = 0; i < TH_SENTINEL_COUNT; i++) {
        redisReply *r =
            th_cmd(&sent.sentinels[i], "SENTINEL GET-MASTER-ADDR-BY-NAME %s",
                   TH_SENTINEL_NAME);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(atoi(r->element[1]->str), now);
        freeReplyObject(r);
    }
    m = th_sentinel_node(&sent, now);
    assert_non_null(m);
    assert_int_equal(th_role(m, NULL), 1);
    expect_str(th_cmd(m, "GET %s", "topo:k"), "v1");
    expect_str(th_cmd(m, "SET %s %s", "topo:k", "v2"), "OK");

    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    o = th_sentinel_node(&sent, old);
    assert_non_null(o);
    assert_int_equal(th_role(o, &mp), 0);
    assert_int_equal(mp, now);
}

/* kill -9 of the master: the sentinels promote a replica; the killed
 * node, restarted, is made a replica of the new master. */
static void test_sentinel_kill_master(void **state)
{
    int old = th_sentinel_master_port(&sent), now, mp;
    th_server *o;

    (void)state;
    assert_true(old > 0);
    o = th_sentinel_node(&sent, old);
    assert_non_null(o);
    now = th_sentinel_kill_master(&sent);
    assert_true(now > 0);
    assert_int_not_equal(now, old);
    assert_int_equal(o->pid, 0);
    assert_int_equal(th_role(th_sentinel_node(&sent, now), NULL), 1);

    assert_int_equal(th_server_restart(o), 0);
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    assert_int_equal(th_role(o, &mp), 0);
    assert_int_equal(mp, now);
}

/* ---- Cluster ------------------------------------------------------------ */

static th_cluster clu;

static int cluster_setup(void **state)
{
    int64_t t0 = mono_ms();
    int rc = th_cluster_start(&clu);

    (void)state;
    print_message("cluster up in %lld ms\n", (long long)(mono_ms() - t0));
    return rc;
}

static int cluster_teardown(void **state)
{
    (void)state;
    th_cluster_stop(&clu);
    return 0;
}

/* Three masters, three replicas (one each), all 16384 slots assigned and
 * ok on every node, every slot owned by a master. */
static void test_cluster_started(void **state)
{
    int masters = 0, replicas = 0;

    (void)state;
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        char v[32];
        int mp, role = th_role(&clu.nodes[i], &mp);
        assert_true(role >= 0);
        if (role == 1) {
            masters++;
            assert_true(th_cluster_replica_port(&clu, clu.nodes[i].port) > 0);
        } else {
            replicas++;
            assert_non_null(th_cluster_node(&clu, mp));
        }
        assert_int_equal(th_info_field(&clu.nodes[i], "CLUSTER INFO",
                                       "cluster_state", v, sizeof v),
                         0);
        assert_string_equal(v, "ok");
        assert_int_equal(th_info_field(&clu.nodes[i], "CLUSTER INFO",
                                       "cluster_slots_ok", v, sizeof v),
                         0);
        assert_string_equal(v, "16384");
        /* Bus on port + 10000, as the fixture promises. */
        assert_true(clu.nodes[i].port <= 55535);
    }
    assert_int_equal(masters, 3);
    assert_int_equal(replicas, 3);
    for (int slot = 0; slot < TH_CLUSTER_SLOTS; slot += 1021) {
        th_server *s = th_cluster_node(&clu, th_cluster_slot_port(&clu, slot));
        assert_non_null(s);
        assert_int_equal(th_role(s, NULL), 1);
    }
    assert_true(th_cluster_slot_port(&clu, 16383) > 0);
}

/* src/slot.c agrees with the server's CLUSTER KEYSLOT on the spec's
 * examples and a few hundred random keys (braces and binary bytes
 * included). */
static void test_cluster_keyslot_matches_library(void **state)
{
    static const char *fixed[] = {
        "123456789",
        "foo",
        "{user1000}.following",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{}",
        "{",
        "}{",
        "a{b}",
        "{a}{b}",
        "",
    };
    static const char alphabet[] = "ab{}xyz0\x80\xff";
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();

    (void)state;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        size_t len = strlen(fixed[i]);
        assert_int_equal(th_cluster_keyslot(&clu, fixed[i], len),
                         dlock__key_slot(fixed[i], len));
    }
    print_message("keyslot seed %u\n", seed);
    srand(seed);
    for (int i = 0; i < 400; i++) {
        char key[40];
        size_t len = (size_t)(rand() % (int)sizeof key);
        for (size_t k = 0; k < len; k++)
            key[k] = (i % 2) ? alphabet[rand() % (int)(sizeof alphabet - 1)]
                             : (char)(rand() & 0xff);
        int server = th_cluster_keyslot(&clu, key, len);
        assert_true(server >= 0);
        if (server != dlock__key_slot(key, len))
            print_error("key %d (len %zu) differs\n", i, len);
        assert_int_equal(server, dlock__key_slot(key, len));
    }
}

/* A key written on its owner reads back there; another master answers
 * MOVED with the owner's address. */
static void test_cluster_key_roundtrip(void **state)
{
    const char *key = "topo:roundtrip";
    int port = th_cluster_key_port(&clu, key, strlen(key));
    th_server *owner = th_cluster_node(&clu, port), *other = NULL;
    char moved[64];

    (void)state;
    assert_non_null(owner);
    expect_str(th_cmd(owner, "SET %s %s", key, "hello"), "OK");
    expect_str(th_cmd(owner, "GET %s", key), "hello");
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (&clu.nodes[i] != owner && th_role(&clu.nodes[i], NULL) == 1)
            other = &clu.nodes[i];
    assert_non_null(other);
    snprintf(moved, sizeof moved, "MOVED %d 127.0.0.1:%d",
             th_cluster_keyslot(&clu, key, strlen(key)), port);
    expect_err(th_cmd(other, "GET %s", key), moved);
}

/* CLUSTER FAILOVER on a replica: it becomes master of the slots, the old
 * master its replica, the data is there. */
static void test_cluster_failover(void **state)
{
    const char *key = "topo:roundtrip";
    int old = th_cluster_key_port(&clu, key, strlen(key)), rep, mp;

    (void)state;
    assert_true(old > 0);
    rep = th_cluster_replica_port(&clu, old);
    assert_true(rep > 0);
    assert_int_equal(th_cluster_failover(&clu, rep), 0);
    assert_int_equal(th_role(th_cluster_node(&clu, rep), NULL), 1);
    assert_int_equal(th_role(th_cluster_node(&clu, old), &mp), 0);
    assert_int_equal(mp, rep);
    assert_int_equal(th_cluster_key_port(&clu, key, strlen(key)), rep);
    expect_str(th_cmd(th_cluster_node(&clu, rep), "GET %s", key), "hello");
}

/* A slot half moved: the source serves the keys it still has and answers
 * ASK for moved ones; the target serves moved keys after ASKING only.
 * Once finished, the source answers MOVED and the target owns the slot. */
static void test_cluster_migration(void **state)
{
    const char *k1 = "{topo:mig}a", *k2 = "{topo:mig}b";
    int slot = th_cluster_keyslot(&clu, k1, strlen(k1));
    int from = th_cluster_slot_port(&clu, slot), to = -1, moved_first;
    th_server *src = th_cluster_node(&clu, from), *dst;
    th_migration m;
    redisContext *ctx;
    redisReply *r;
    char ask[64], moved[64];
    struct timeval tv = {5, 0};

    (void)state;
    assert_non_null(src);
    for (int i = 0; i < TH_CLUSTER_NODES && to < 0; i++)
        if (clu.nodes[i].port != from && th_role(&clu.nodes[i], NULL) == 1)
            to = clu.nodes[i].port;
    dst = th_cluster_node(&clu, to);
    assert_non_null(dst);
    expect_str(th_cmd(src, "SET %s %s", k1, "one"), "OK");
    expect_str(th_cmd(src, "SET %s %s", k2, "two"), "OK");

    assert_int_equal(th_cluster_migrate_begin(&clu, slot, to, &m), 0);
    assert_int_equal(m.from_port, from);
    assert_int_equal(th_cluster_migrate_keys(&clu, &m, 1), 1);
    /* Which of the two moved is the server's choice. */
    r = th_cmd(src, "EXISTS %s", k1);
    assert_non_null(r);
    moved_first = r->integer == 0;
    freeReplyObject(r);
    const char *gone = moved_first ? k1 : k2, *kept = moved_first ? k2 : k1;
    snprintf(ask, sizeof ask, "ASK %d 127.0.0.1:%d", slot, to);
    expect_err(th_cmd(src, "GET %s", gone), ask);
    expect_str(th_cmd(src, "GET %s", kept), moved_first ? "two" : "one");
    /* The target: MOVED (back to the source) without ASKING... */
    snprintf(moved, sizeof moved, "MOVED %d 127.0.0.1:%d", slot, from);
    expect_err(th_cmd(dst, "GET %s", gone), moved);
    /* ...the value with ASKING first, on the same connection. */
    ctx = redisConnectWithTimeout("127.0.0.1", to, tv);
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    expect_str(redisCommand(ctx, "ASKING"), "OK");
    expect_str(redisCommand(ctx, "GET %s", gone), moved_first ? "one" : "two");
    redisFree(ctx);
    assert_int_equal(th_cluster_slot_port(&clu, slot), from);

    assert_int_equal(th_cluster_migrate_finish(&clu, &m), 0);
    assert_int_equal(th_cluster_slot_port(&clu, slot), to);
    snprintf(moved, sizeof moved, "MOVED %d 127.0.0.1:%d", slot, to);
    expect_err(th_cmd(src, "GET %s", k1), moved);
    expect_err(th_cmd(src, "GET %s", k2), moved);
    expect_str(th_cmd(dst, "GET %s", k1), "one");
    expect_str(th_cmd(dst, "GET %s", k2), "two");

    /* And back again in one call. */
    assert_int_equal(th_cluster_migrate_slot(&clu, slot, from), 0);
    assert_int_equal(th_cluster_slot_port(&clu, slot), from);
    expect_str(th_cmd(src, "GET %s", k2), "two");
}

int main(void)
{
    const struct CMUnitTest sentinel_tests[] = {
        cmocka_unit_test(test_sentinel_started),
        cmocka_unit_test(test_sentinel_failover),
        cmocka_unit_test(test_sentinel_kill_master),
    };
    const struct CMUnitTest cluster_tests[] = {
        cmocka_unit_test(test_cluster_started),
        cmocka_unit_test(test_cluster_keyslot_matches_library),
        cmocka_unit_test(test_cluster_key_roundtrip),
        cmocka_unit_test(test_cluster_failover),
        cmocka_unit_test(test_cluster_migration),
    };
    int failed = 0;

    failed += cmocka_run_group_tests_name("sentinel", sentinel_tests,
                                          sentinel_setup, sentinel_teardown);
    failed += cmocka_run_group_tests_name("cluster", cluster_tests,
                                          cluster_setup, cluster_teardown);
    return failed;
}
