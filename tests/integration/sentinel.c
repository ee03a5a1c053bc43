/*
 * sentinel.c - the Sentinel topology against a real deployment (a master,
 * 2 replicas, 3 sentinels: tests/harness/topology.h): discovery through
 * redis+sentinel://, the bad inputs and bad states (unknown master name,
 * sentinels all down, sentinels that disagree, a redis:// URL at a replica
 * or a sentinel),
 * wait_replicas with replicas up and SIGSTOPped, the lock-delay after a
 * grant the new master never saw, and mutual exclusion with monotonic
 * tokens across processes while SENTINEL FAILOVER and kill -9 of the
 * master move the master. Tests run in order on one deployment.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "th_pairfile.h"
#include "th_replication.h"
#include "topology.h"

static th_sentinel sent;
static char surl[512]; /* redis+sentinel://s1,s2,s3/dlock */
static char tmpdir[256];

/* A client for url with these durability settings (lock_delay_ms -2:
 * leave the default; WAIT timeout 500 ms). */
static dlock_client *client_with(const char *url, int wait_replicas,
                                 int64_t lock_delay_ms, char *err,
                                 size_t errlen, int *rc)
{
    return th_durable_client(url, wait_replicas, 500, lock_delay_ms, err,
                             errlen, rc);
}

static dlock_client *sclient(int wait_replicas, int64_t lock_delay_ms)
{
    char err[256];
    int rc;
    dlock_client *c =
        client_with(surl, wait_replicas, lock_delay_ms, err, sizeof err, &rc);
    if (c == NULL)
        print_error("client: %s\n", err);
    assert_non_null(c);
    return c;
}

/* The data node that is master now. */
static th_server *master_node(void)
{
    int p = th_sentinel_master_port(&sent);
    assert_true(p > 0);
    return th_sentinel_node(&sent, p);
}

/* Does the current master hold a key for lock NAME? */
static int master_has_lock(const char *name)
{
    return (int)th_cmd_int(master_node(), "EXISTS dlock:{%s}", name);
}

static int setup(void **state)
{
    (void)state;
    if (th_sentinel_start(&sent) != 0)
        return -1;
    th_sentinel_url(&sent, surl, sizeof surl);
    return th_tempdir(tmpdir, sizeof tmpdir, "sentinel");
}

static int teardown(void **state)
{
    char cmd[300];
    (void)state;
    th_sentinel_stop(&sent);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return 0;
}

/* The master is found through the sentinels; the lock lands on it. */
static void test_discover(void **state)
{
    dlock_client *c = sclient(0, -2);
    dlock_lock *l = NULL;
    dlock_info info;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&l, c, "s-disc", 0, 10000), DLOCK_OK);
    assert_int_equal(master_has_lock("s-disc"), 1);
    assert_int_equal(dlock_lock_inspect(c, "s-disc", &info), DLOCK_OK);
    assert_true(info.held);
    assert_string_equal(info.owner, dlock_lock_owner(l));
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(master_has_lock("s-disc"), 0);
    dlock_client_free(c);
}

/* Bad inputs and bad states: each a clear status and message, in bounded
 * time, and no lock anywhere. */
static void test_bad_states(void **state)
{
    char url[600], err[256], replica_url[128];
    dlock_client *c;
    dlock_lock *l = NULL;
    const char *two[2];
    dlock_options o;
    int rc, dead, mp, rp = -1, k;
    int64_t t0;
    (void)state;

    /* Malformed URL, and a sentinel URL beside another server. */
    c = client_with("redis+sentinel://h:0/x", 0, -2, err, sizeof err, &rc);
    assert_null(c);
    assert_int_equal(rc, DLOCK_EINVAL);
    assert_non_null(strstr(err, "bad port"));
    dlock_options_init(&o);
    two[0] = surl;
    two[1] = "redis://127.0.0.1:1";
    o.servers = two;
    o.nservers = 2;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_EINVAL);
    assert_non_null(strstr(err, "only server"));

    /* An unknown master name. */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/nosuchmaster",
             sent.sentinels[0].port);
    c = client_with(url, 0, -2, err, sizeof err, &rc);
    assert_non_null(c);
    t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(&l, c, "s-bad", 2000, 5000),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "no sentinel knows a master"));
    assert_true(th_now_ms() - t0 < 10000);
    dlock_client_free(c);

    /* Every sentinel down: a port nobody listens on, twice. */
    dead = th_fake_server_start("close");
    assert_true(dead > 0);
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/%s",
             dead, dead, TH_SENTINEL_NAME);
    c = client_with(url, 0, -2, err, sizeof err, &rc);
    assert_non_null(c);
    t0 = th_now_ms();
    rc = dlock_lock_acquire(&l, c, "s-bad", 0, 5000);
    assert_int_equal(rc, DLOCK_EIO);
    assert_non_null(strstr(dlock_errmsg(c), "no sentinel answered"));
    assert_true(th_now_ms() - t0 < 10000);
    dlock_client_free(c);
    th_fake_server_stop(dead);

    /* redis:// at a replica: refused, even with replica-read-only off,
     * and no key written there. */
    mp = th_sentinel_master_port(&sent);
    for (k = 0; k < TH_SENTINEL_DATA; k++)
        if (sent.data[k].port != mp && sent.data[k].pid > 0)
            rp = k;
    assert_true(rp >= 0);
    redisReply *r =
        th_cmd(&sent.data[rp], "CONFIG SET replica-read-only %s", "no");
    assert_non_null(r);
    freeReplyObject(r);
    snprintf(replica_url, sizeof replica_url, "redis://127.0.0.1:%d",
             sent.data[rp].port);
    c = client_with(replica_url, 0, -2, err, sizeof err, &rc);
    assert_non_null(c);
    rc = dlock_lock_acquire(&l, c, "s-replica", 0, 5000);
    assert_int_equal(rc, DLOCK_EREFUSED);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(c), "is a replica"));
    assert_int_equal(
        th_cmd_int(&sent.data[rp], "EXISTS dlock:{%s}", "s-replica"), 0);
    dlock_client_free(c);
    r = th_cmd(&sent.data[rp], "CONFIG SET replica-read-only %s", "yes");
    freeReplyObject(r);

    /* redis:// at a sentinel. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", sent.sentinels[1].port);
    c = client_with(url, 0, -2, err, sizeof err, &rc);
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, c, "s-bad", 0, 5000),
                     DLOCK_ESERVER);
    assert_non_null(strstr(dlock_errmsg(c), "redis+sentinel://"));
    dlock_client_free(c);
}

/* A rogue sentinel: monitors another master (rogue_data) under the same
 * name. Started as harness.c does for topology.c's sentinels: the
 * redis-server binary run through a symlink named redis-sentinel. */
static th_server rogue_data, rogue;

static int start_rogue(void)
{
    char link[512], conf[256], *saved = NULL;
    const char *old = getenv("DLOCK_REDIS_SERVER");
    th_server_opts o;
    int rc;
    if (th_server_start(&rogue_data, NULL) != 0)
        return -1;
    snprintf(link, sizeof link, "%s/redis-sentinel", tmpdir);
    unlink(link);
    if (symlink(old != NULL && old[0] == '/' ? old : "/usr/bin/redis-server",
                link) != 0)
        return -1;
    snprintf(conf, sizeof conf,
             "sentinel monitor %s 127.0.0.1 %d 1\n"
             "sentinel down-after-milliseconds %s 1500\n",
             TH_SENTINEL_NAME, rogue_data.port, TH_SENTINEL_NAME);
    memset(&o, 0, sizeof o);
    o.extra_conf = conf;
    if (old != NULL)
        saved = strdup(old);
    setenv("DLOCK_REDIS_SERVER", link, 1);
    rc = th_server_start(&rogue, &o);
    if (saved != NULL) {
        setenv("DLOCK_REDIS_SERVER", saved, 1);
        free(saved);
    } else {
        unsetenv("DLOCK_REDIS_SERVER");
    }
    return rc;
}

/* Sentinels that disagree: one rogue against one of ours is no majority
 * (ESERVER, "disagree", nothing locked anywhere); one rogue against our
 * three is outvoted, even when asked first. */
static void test_disagree(void **state)
{
    char url[600], err[256];
    dlock_client *c;
    dlock_lock *l = NULL;
    int rc;
    (void)state;
    assert_int_equal(start_rogue(), 0);
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/%s",
             rogue.port, sent.sentinels[0].port, TH_SENTINEL_NAME);
    c = client_with(url, 0, -2, err, sizeof err, &rc);
    assert_non_null(c);
    rc = dlock_lock_acquire(&l, c, "s-rogue", 0, 5000);
    if (rc != DLOCK_ESERVER)
        print_error("got %s: %s\n", dlock_status_name(rc), dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_ESERVER);
    assert_non_null(strstr(dlock_errmsg(c), "disagree"));
    assert_int_equal(th_cmd_int(&rogue_data, "EXISTS dlock:{%s}", "s-rogue"),
                     0);
    assert_int_equal(master_has_lock("s-rogue"), 0);
    dlock_client_free(c);

    snprintf(url, sizeof url,
             "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,"
             "127.0.0.1:%d/%s",
             rogue.port, sent.sentinels[0].port, sent.sentinels[1].port,
             sent.sentinels[2].port, TH_SENTINEL_NAME);
    c = client_with(url, 0, -2, err, sizeof err, &rc);
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&l, c, "s-rogue", 0, 5000), DLOCK_OK);
    assert_int_equal(master_has_lock("s-rogue"), 1);
    assert_int_equal(th_cmd_int(&rogue_data, "EXISTS dlock:{%s}", "s-rogue"),
                     0);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    th_server_stop(&rogue);
    th_server_stop(&rogue_data);
}

/* wait_replicas: granted with the replicas up; with them stopped, the
 * distinct status and no lock left on the master. */
static void test_wait_replicas(void **state)
{
    dlock_client *c = sclient(2, -2);
    dlock_lock *l = NULL;
    int mp = th_sentinel_master_port(&sent), k;
    int64_t t0;
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    k = dlock_lock_acquire(&l, c, "s-wait", 0, 10000);
    if (k != DLOCK_OK)
        print_error("acquire: %s\n", dlock_errmsg(c));
    assert_int_equal(k, DLOCK_OK);
    k = dlock_lock_extend(l, 10000);
    if (k != DLOCK_OK)
        print_error("extend: %s\n", dlock_errmsg(c));
    assert_int_equal(k, DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);

    th_sentinel_pause_replicas(&sent, mp);
    t0 = th_now_ms();
    assert_int_equal(dlock_lock_acquire(&l, c, "s-wait", 0, 10000),
                     DLOCK_NOT_REPLICATED);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(c), "given back"));
    assert_int_equal(master_has_lock("s-wait"), 0);
    /* A waiting acquire says the same, not TIMEDOUT. */
    assert_int_equal(dlock_lock_acquire(&l, c, "s-wait", 300, 10000),
                     DLOCK_NOT_REPLICATED);
    assert_int_equal(master_has_lock("s-wait"), 0);
    print_message("NOT_REPLICATED after %lld ms\n",
                  (long long)(th_now_ms() - t0));
    th_sentinel_resume_replicas(&sent, mp);
    dlock_client_free(c);
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
}

/* ---- mutual exclusion across processes through failovers --------------- */

/* The shared resource: a file "COUNT TOKEN" that only a holder may
 * read-modify-write (th_pairfile.h), and the stop file, in tmpdir. */
static void resource_path(char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "%s/%s", tmpdir, what);
}

/* A child: take the lock again and again until the stop file appears;
 * under the lock, check that the token is above the last one written and
 * increment the count slowly. Writes its own count to done.PID; exits 1
 * on a token that went backwards. */
static void child_main(int wait_replicas, int idx)
{
    char res[320], stop[320], done[320];
    dlock_client *c = NULL;
    long long mine = 0, backwards = 0;
    struct stat st;
    int64_t end = th_now_ms() + 120000;
    char err[256];
    int rc;

    resource_path(res, sizeof res, "resource");
    resource_path(stop, sizeof stop, "stop");
    snprintf(done, sizeof done, "%s/done.%d", tmpdir, idx);
    c = client_with(surl, wait_replicas, -2, err, sizeof err, &rc);
    if (c == NULL)
        _exit(2);
    while (stat(stop, &st) != 0 && th_now_ms() < end) {
        dlock_lock *l = NULL;
        long long n;
        unsigned long long last;
        rc = dlock_lock_acquire(&l, c, "s-mutex", 10000, 5000);
        if (rc != DLOCK_OK) {
            th_sleep_ms(20);
            continue;
        }
        if (th_pair_read(res, &n, &last) == 0) {
            if (dlock_lock_token(l) <= last)
                backwards++;
            usleep(300);
            th_pair_write(res, n + 1, dlock_lock_token(l));
            mine++;
        }
        dlock_lock_release(l);
    }
    {
        FILE *f = fopen(done, "w");
        if (f != NULL) {
            fprintf(f, "%lld %lld\n", mine, backwards);
            fclose(f);
        }
    }
    dlock_client_free(c);
    _exit(backwards ? 1 : 0);
}

#define CHILDREN 3

/* Wait until the shared count reaches at least target (bounded). */
static long long wait_count(long long target, int64_t timeout_ms)
{
    char res[320];
    resource_path(res, sizeof res, "resource");
    return th_pair_wait(res, target, timeout_ms);
}

/* Run the children while disrupt() moves the master; then check: work
 * went on after the move, no update was lost (the count is the sum of
 * what every child did), no token went backwards. */
static void mutex_across(int wait_replicas, int (*disrupt)(th_sentinel *),
                         const char *what)
{
    char res[320], stop[320], done[320];
    pid_t pids[CHILDREN];
    long long before, after, total = 0, n;
    unsigned long long t;
    int i, st, newport;
    int64_t t0;

    resource_path(res, sizeof res, "resource");
    resource_path(stop, sizeof stop, "stop");
    unlink(stop);
    th_pair_write(res, 0, 0);
    for (i = 0; i < CHILDREN; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            child_main(wait_replicas, i);
    }
    before = wait_count(30, 60000);
    assert_true(before >= 30);
    t0 = th_now_ms();
    newport = disrupt(&sent);
    assert_true(newport > 0);
    print_message("%s: new master %d after %lld ms\n", what, newport,
                  (long long)(th_now_ms() - t0));
    /* Both replicas back under the new master (the old master demoted
     * now rather than by the sentinels some 8-10 s later): until then a
     * grant with wait_replicas 2 is given back NOT_REPLICATED. */
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
    th_pair_read(res, &before, &t);
    after = wait_count(before + 30, 40000);
    print_message("%s: %lld critical sections before the move, %lld in the "
                  "%lld ms after\n",
                  what, before, after - before, (long long)(th_now_ms() - t0));
    assert_true(after >= before + 30);
    close(open(stop, O_CREAT | O_WRONLY, 0600));
    for (i = 0; i < CHILDREN; i++) {
        long long mine = 0, back = 0;
        FILE *f;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        snprintf(done, sizeof done, "%s/done.%d", tmpdir, i);
        f = fopen(done, "r");
        assert_non_null(f);
        assert_int_equal(fscanf(f, "%lld %lld", &mine, &back), 2);
        fclose(f);
        if (back != 0)
            print_error("child %d saw %lld tokens go backwards\n", i, back);
        assert_int_equal(back, 0);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        total += mine;
    }
    th_pair_read(res, &n, &t);
    if (n != total)
        print_error("%s: %lld updates counted, %lld made: mutual exclusion "
                    "broken\n",
                    what, n, total);
    assert_int_equal(n, total);
}

/* SENTINEL FAILOVER while holders and waiters run. Every grant waits
 * for both replicas: whichever the sentinels promote has it (with
 * wait_replicas 1 a token was seen going backwards once: the sentinels
 * promoted the replica that had not acknowledged). */
static void test_mutex_failover(void **state)
{
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    mutex_across(2, th_sentinel_failover, "SENTINEL FAILOVER");
}

/* kill -9 the master, wait for the new one, and start the old one again
 * (empty: no persistence) so that the new master has two replicas once
 * the sentinels have made it one. */
static int kill_and_restart(th_sentinel *t)
{
    int i, port = th_sentinel_kill_master(t);
    for (i = 0; i < TH_SENTINEL_DATA; i++)
        if (t->data[i].pid <= 0 && th_server_restart(&t->data[i]) != 0)
            return -1;
    return port;
}

/* kill -9 of the master while holders and waiters run. */
static void test_mutex_kill(void **state)
{
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, TH_TOPO_WAIT_MS), 0);
    mutex_across(2, kill_and_restart, "kill -9 master");
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
}

/* The lock-delay: a grant the replicas never saw (SIGSTOPped, their links
 * full), the master killed, a replica promoted without it. The client that
 * saw the old master refuses new grants on the new one for the longest
 * lease it took (10 s); afterwards it grants. */
static void test_lock_delay(void **state)
{
    dlock_client *c = sclient(0, 3000);
    dlock_lock *l = NULL, *l2 = NULL;
    th_server *m;
    int mp, rc;
    int64_t t0;
    (void)state;
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
    mp = th_sentinel_master_port(&sent);
    m = th_sentinel_node(&sent, mp);
    th_sentinel_pause_replicas(&sent, mp);
    /* The replicas' links full: the grant waits in the master's output
     * buffer and dies with it. */
    assert_int_equal(th_ballast(m, "ballast"), 0);
    /* A lease longer than the failover (about 4 s): if the grant had
     * reached the promoted replica, the key would still be there. 10 s:
     * the lock-delay below waits it out. */
    assert_int_equal(dlock_lock_acquire(&l, c, "s-delay", 0, 10000), DLOCK_OK);
    t0 = th_now_ms();
    th_server_kill9(m);
    th_sentinel_resume_replicas(&sent, mp);
    assert_true(th_sentinel_wait_master(&sent, mp, TH_TOPO_WAIT_MS) > 0);
    /* The new master never saw the grant. */
    assert_int_equal(master_has_lock("s-delay"), 0);
    print_message("lock-delay: promoted %lld ms after the grant (lease "
                  "10000 ms)\n",
                  (long long)(th_now_ms() - t0));
    /* The old hold is gone with the old master. */
    assert_int_not_equal(dlock_lock_release(l), DLOCK_OK);
    t0 = th_now_ms();
    /* The client finds the new master (its pooled connection is dead)
     * and refuses: a try gets LOCK_DELAY, without a lock left. */
    rc = th_try_until_delay(&l2, c, "s-delay", 8000, 10000);
    if (rc != DLOCK_LOCK_DELAY)
        print_error("expected LOCK_DELAY, got %s: %s\n", dlock_status_name(rc),
                    dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_LOCK_DELAY);
    assert_non_null(strstr(dlock_errmsg(c), "lock-delay"));
    assert_int_equal(master_has_lock("s-delay"), 0);
    /* A waiting acquire waits the delay out, then gets the lock. */
    assert_int_equal(dlock_lock_acquire(&l2, c, "s-delay", 40000, 8000),
                     DLOCK_OK);
    print_message("lock-delay: granted %lld ms after the first refusal\n",
                  (long long)(th_now_ms() - t0));
    assert_int_equal(dlock_lock_release(l2), DLOCK_OK);
    {
        /* The check says it saw the master change. */
        char buf[4096];
        assert_true(dlock_client_check(c, buf, sizeof buf) > 0);
        assert_non_null(strstr(buf, "failover or restart seen"));
        assert_true(dlock_client_topology(c, buf, sizeof buf) > 0);
        assert_non_null(strstr(buf, "role master"));
    }
    dlock_client_free(c);
    assert_int_equal(th_server_restart(m), 0);
    assert_int_equal(th_sentinel_settle(&sent, 60000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discover),
        cmocka_unit_test(test_bad_states),
        cmocka_unit_test(test_disagree),
        cmocka_unit_test(test_wait_replicas),
        cmocka_unit_test(test_mutex_failover),
        cmocka_unit_test(test_mutex_kill),
        cmocka_unit_test(test_lock_delay),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
