/*
 * election.c - leader election (dlock_campaign, dlock_leader,
 * dlock_leader_wait, proclaim, resign) against real redis-servers: the
 * leader's value, epoch and since as others see them; a second contender
 * waits; proclaim changes the value only; an observer sees a resignation,
 * a new leader and a new value; a leader process killed with SIGKILL is
 * replaced within its lease (and the dead one's record stops counting the
 * moment its lease ends); leadership deleted behind the leader's back is
 * reported as lost; with three servers (Redlock) the leader survives one
 * server's death.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

static dlock_client *client(void)
{
    return fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
}

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static dlock_acquire_options opts(int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options ao;
    dlock_acquire_options_init(&ao);
    ao.wait_ms = wait_ms;
    ao.lease_ms = lease_ms;
    return ao;
}

static void test_campaign_and_leader(void **state)
{
    dlock_client *c1 = client(), *c2 = client();
    dlock_election *e = NULL, *e2 = NULL;
    dlock_acquire_options ao = opts(0, 5000);
    dlock_leader_info li;
    int64_t t0 = wall_ms();
    (void)state;

    assert_int_equal(dlock_leader(c2, "el:a", &li), DLOCK_OK);
    assert_int_equal(li.leading, 0);
    assert_int_equal(li.epoch, 0);

    assert_int_equal(dlock_campaign(&e, c1, "el:a", "host1:80", &ao), DLOCK_OK);
    assert_int_equal(dlock_election_status(e), DLOCK_OK);
    assert_true(dlock_election_epoch(e) > 0);
    assert_int_equal(dlock_election_epoch(e),
                     dlock_lock_token(dlock_election_lock(e)));

    assert_int_equal(dlock_leader(c2, "el:a", &li), DLOCK_OK);
    assert_int_equal(li.leading, 1);
    assert_int_equal(li.proclaimed, 1);
    assert_string_equal(li.value, "host1:80");
    assert_int_equal(li.epoch, dlock_election_epoch(e));
    assert_string_equal(li.owner, dlock_lock_owner(dlock_election_lock(e)));
    /* since is the server's clock: the same machine's, give or take */
    assert_true(li.since_ms >= t0 - 1000 && li.since_ms <= wall_ms() + 1000);
    assert_true(li.ttl_ms > 0 && li.ttl_ms <= 5000);

    /* A second contender does not lead. */
    assert_int_equal(dlock_campaign(&e2, c2, "el:a", "host2:80", &ao),
                     DLOCK_BUSY);
    assert_null(e2);

    /* Proclaim: a new value, the same epoch and since. */
    {
        dlock_leader_info l2;
        assert_int_equal(dlock_election_proclaim(e, "host1:81"), DLOCK_OK);
        assert_int_equal(dlock_leader(c2, "el:a", &l2), DLOCK_OK);
        assert_string_equal(l2.value, "host1:81");
        assert_int_equal(l2.epoch, li.epoch);
        assert_int_equal(l2.since_ms, li.since_ms);
    }

    /* Resign: nobody leads; the next leader's epoch is greater. */
    assert_int_equal(dlock_election_resign(e), DLOCK_OK);
    assert_int_equal(dlock_leader(c2, "el:a", &li), DLOCK_OK);
    assert_int_equal(li.leading, 0);
    assert_int_equal(dlock_campaign(&e2, c2, "el:a", NULL, &ao), DLOCK_OK);
    assert_int_equal(dlock_leader(c1, "el:a", &li), DLOCK_OK);
    assert_int_equal(li.leading, 1);
    assert_string_equal(li.value, "");
    assert_true(li.epoch == dlock_election_epoch(e2));
    assert_int_equal(dlock_election_resign(e2), DLOCK_OK);
    dlock_client_free(c1);
    dlock_client_free(c2);
}

static void test_bad_input(void **state)
{
    dlock_client *c = client();
    dlock_election *e = NULL;
    dlock_leader_info li;
    char *big = malloc(DLOCK_VALUE_MAX + 2);
    (void)state;

    memset(big, 'v', DLOCK_VALUE_MAX + 1);
    big[DLOCK_VALUE_MAX + 1] = '\0';
    assert_int_equal(dlock_campaign(&e, c, "el:b", big, NULL), DLOCK_EINVAL);
    assert_null(e);
    assert_int_equal(dlock_campaign(&e, c, "", "v", NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_campaign(NULL, c, "el:b", "v", NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_leader(c, "el:b", NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_leader(c, NULL, &li), DLOCK_EINVAL);
    assert_int_equal(dlock_election_resign(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_election_proclaim(NULL, "x"), DLOCK_EINVAL);
    assert_int_equal(dlock_campaign(&e, c, "el:b", "v", NULL), DLOCK_OK);
    assert_int_equal(dlock_election_proclaim(e, big), DLOCK_EINVAL);
    big[DLOCK_VALUE_MAX] = '\0'; /* exactly the maximum is fine */
    assert_int_equal(dlock_election_proclaim(e, big), DLOCK_OK);
    assert_int_equal(dlock_leader(c, "el:b", &li), DLOCK_OK);
    assert_int_equal(strlen(li.value), DLOCK_VALUE_MAX);
    assert_int_equal(dlock_election_resign(e), DLOCK_OK);
    free(big);
    dlock_client_free(c);
}

/* An observer thread: every change it sees, in order. */
#define OBS_MAX 16
typedef struct observer {
    dlock_client *c;
    const char *name;
    dlock_leader_info seen[OBS_MAX];
    atomic_int n;
    atomic_int stop;
    pthread_t t;
} observer;

static void *observe_main(void *arg)
{
    observer *o = arg;
    dlock_leader_info cur, next;

    if (dlock_leader(o->c, o->name, &cur) != DLOCK_OK)
        return NULL;
    while (!atomic_load(&o->stop) && atomic_load(&o->n) < OBS_MAX) {
        int rc = dlock_leader_wait(o->c, o->name, &cur, 200, &next);
        if (rc == DLOCK_OK) {
            o->seen[atomic_load(&o->n)] = next;
            atomic_fetch_add(&o->n, 1);
            cur = next;
        } else if (rc != DLOCK_TIMEDOUT) {
            break;
        }
    }
    return NULL;
}

/* Wait (bounded) until the observer has seen n changes. */
static void wait_seen(observer *o, int n)
{
    int64_t t0 = th_now_ms();
    while (atomic_load(&o->n) < n && th_now_ms() - t0 < 5000)
        th_sleep_ms(5);
    assert_true(atomic_load(&o->n) >= n);
}

static void test_observe(void **state)
{
    observer o;
    dlock_client *c1 = client(), *c2 = client();
    dlock_election *e1, *e2;
    dlock_acquire_options ao = opts(0, 30000);
    (void)state;

    memset(&o, 0, sizeof o);
    o.c = client();
    o.name = "el:o";
    assert_int_equal(pthread_create(&o.t, NULL, observe_main, &o), 0);
    th_sleep_ms(100); /* it looks at "nobody" first */

    assert_int_equal(dlock_campaign(&e1, c1, "el:o", "one", &ao), DLOCK_OK);
    wait_seen(&o, 1);
    assert_int_equal(o.seen[0].leading, 1);
    assert_string_equal(o.seen[0].value, "one");
    assert_int_equal(o.seen[0].epoch, dlock_election_epoch(e1));

    assert_int_equal(dlock_election_proclaim(e1, "uno"), DLOCK_OK);
    wait_seen(&o, 2);
    assert_string_equal(o.seen[1].value, "uno");

    assert_int_equal(dlock_election_resign(e1), DLOCK_OK);
    wait_seen(&o, 3);
    assert_int_equal(o.seen[2].leading, 0);

    assert_int_equal(dlock_campaign(&e2, c2, "el:o", "two", &ao), DLOCK_OK);
    wait_seen(&o, 4);
    assert_string_equal(o.seen[3].value, "two");
    assert_true(o.seen[3].epoch > o.seen[0].epoch);
    assert_int_equal(dlock_election_resign(e2), DLOCK_OK);
    wait_seen(&o, 5);
    atomic_store(&o.stop, 1);
    pthread_join(o.t, NULL);
    assert_int_equal(atomic_load(&o.n), 5);
    dlock_client_free(o.c);
    dlock_client_free(c1);
    dlock_client_free(c2);
}

/* A leader process killed with SIGKILL: its record stops counting when
 * its lease ends, a follower that waits takes over within about a lease,
 * and the epoch grows. */
/* A child that waits for a byte on go[0], then campaigns for NAME with
 * VALUE and a lease of LEASE ms, writes its epoch to done[1] and sleeps
 * until killed. Forked while this process has no threads of its own
 * (ThreadSanitizer does not follow a fork of a threaded process). */
static pid_t campaigner(const char *name, const char *value, int64_t lease,
                        int go[2], int done[2])
{
    pid_t pid;

    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *url = th_url(&srv);
        dlock_client *cc;
        dlock_election *ee = NULL;
        dlock_acquire_options a = opts(5000, lease);
        uint64_t ep;
        char x;
        close(go[1]);
        close(done[0]);
        if (read(go[0], &x, 1) != 1)
            _exit(2);
        cc = th_client(&url, 1, DLOCK_WAIT_NOTIFY, 0, 0);
        if (cc == NULL || dlock_campaign(&ee, cc, name, value, &a) != 0)
            _exit(3);
        ep = dlock_election_epoch(ee);
        if (write(done[1], &ep, sizeof ep) != sizeof ep)
            _exit(4);
        for (;;)
            pause();
    }
    close(go[0]);
    close(done[1]);
    return pid;
}

/* Start a campaigner forked earlier and return its epoch once it leads. */
static uint64_t campaigner_go(int go[2], int done[2])
{
    uint64_t ep = 0;
    assert_int_equal(write(go[1], "g", 1), 1);
    assert_int_equal(read(done[0], &ep, sizeof ep), sizeof ep);
    close(go[1]);
    close(done[0]);
    return ep;
}

/* A leader process killed with SIGKILL: its record stops counting when
 * its lease ends, a follower that waits takes over within about a lease,
 * and the epoch grows. */
static void test_leader_killed(void **state)
{
    int go1[2], done1[2], go2[2], done2[2];
    pid_t pid1, pid2;
    uint64_t epoch1;
    dlock_client *c;
    dlock_election *e = NULL;
    dlock_leader_info li;
    dlock_acquire_options ao = opts(10000, 1000);
    int64_t t0;
    int st;
    (void)state;

    pid1 = campaigner("el:k", "child", 1000, go1, done1);
    pid2 = campaigner("el:k", "ghost", 500, go2, done2);
    c = client();
    epoch1 = campaigner_go(go1, done1);
    th_sleep_ms(1500); /* renewed past its first lease */
    assert_int_equal(dlock_leader(c, "el:k", &li), DLOCK_OK);
    assert_int_equal(li.leading, 1);
    assert_string_equal(li.value, "child");

    kill(pid1, SIGKILL);
    waitpid(pid1, &st, 0);
    t0 = th_now_ms();
    assert_int_equal(dlock_campaign(&e, c, "el:k", "parent", &ao), DLOCK_OK);
    /* within the lease (1 s) and a bound for a loaded machine */
    assert_true(th_now_ms() - t0 < 1000 + 2000);
    assert_true(dlock_election_epoch(e) > epoch1);
    assert_int_equal(dlock_leader(c, "el:k", &li), DLOCK_OK);
    assert_string_equal(li.value, "parent");
    assert_int_equal(dlock_election_resign(e), DLOCK_OK);

    /* The dead leader's hash is kept, but not believed: */
    campaigner_go(go2, done2);
    kill(pid2, SIGKILL);
    waitpid(pid2, &st, 0);
    t0 = th_now_ms();
    do {
        assert_int_equal(dlock_leader(c, "el:k", &li), DLOCK_OK);
        if (li.leading)
            th_sleep_ms(20);
    } while (li.leading && th_now_ms() - t0 < 3000);
    assert_int_equal(li.leading, 0);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{el:k}:l"), 1);
    /* A plain lock on the name now: it holds, without a value; the old
     * hash (the ghost's) is not taken for it. */
    {
        dlock_lock *l = NULL;
        assert_int_equal(dlock_lock_acquire(&l, c, "el:k", 0, 5000), DLOCK_OK);
        assert_int_equal(dlock_leader(c, "el:k", &li), DLOCK_OK);
        assert_int_equal(li.leading, 1);
        assert_int_equal(li.proclaimed, 0);
        assert_string_equal(li.value, "");
        assert_string_equal(li.owner, dlock_lock_owner(l));
        assert_int_equal(li.epoch, dlock_lock_token(l));
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

static atomic_int lost;

static void on_lost(dlock_lock *lock, void *ud)
{
    (void)lock;
    (void)ud;
    atomic_fetch_add(&lost, 1);
}

static void test_lost(void **state)
{
    dlock_client *c = client();
    dlock_election *e = NULL;
    dlock_leader_info li;
    dlock_acquire_options ao = opts(0, 600);
    int64_t t0;
    (void)state;

    ao.on_lost = on_lost;
    atomic_store(&lost, 0);
    assert_int_equal(dlock_campaign(&e, c, "el:l", "v", &ao), DLOCK_OK);
    th_cmd_int(&srv, "DEL dlock:{el:l}");
    t0 = th_now_ms();
    while (atomic_load(&lost) == 0 && th_now_ms() - t0 < 5000)
        th_sleep_ms(10);
    assert_int_equal(atomic_load(&lost), 1);
    assert_int_equal(dlock_election_status(e), DLOCK_LOST);
    assert_int_equal(dlock_election_proclaim(e, "w"), DLOCK_LOST);
    assert_int_equal(dlock_leader(c, "el:l", &li), DLOCK_OK);
    assert_int_equal(li.leading, 0);
    assert_int_equal(dlock_election_resign(e), DLOCK_LOST);
    dlock_client_free(c);
}

/* Redlock: three servers; the leader keeps leading with one down, and
 * others see it on the majority. */
static void test_redlock(void **state)
{
    th_server s[3];
    const char *urls[3];
    dlock_client *c1, *c2;
    dlock_election *e = NULL;
    dlock_leader_info li;
    dlock_acquire_options ao = opts(0, 3000);
    (void)state;

    for (int i = 0; i < 3; i++) {
        assert_int_equal(th_server_start(&s[i], NULL), 0);
        urls[i] = th_url(&s[i]);
    }
    c1 = th_client(urls, 3, DLOCK_WAIT_NOTIFY, 300, 300);
    c2 = th_client(urls, 3, DLOCK_WAIT_NOTIFY, 300, 300);
    assert_non_null(c1);
    assert_non_null(c2);
    assert_int_equal(dlock_campaign(&e, c1, "el:r", "r1", &ao), DLOCK_OK);
    assert_int_equal(dlock_leader(c2, "el:r", &li), DLOCK_OK);
    assert_int_equal(li.leading, 1);
    assert_string_equal(li.value, "r1");
    assert_int_equal(li.epoch, dlock_election_epoch(e));
    th_server_kill9(&s[2]);
    assert_int_equal(dlock_election_proclaim(e, "r2"), DLOCK_OK);
    assert_int_equal(dlock_leader(c2, "el:r", &li), DLOCK_OK);
    assert_int_equal(li.leading, 1);
    assert_string_equal(li.value, "r2");
    th_server_kill9(&s[1]);
    assert_int_equal(dlock_leader(c2, "el:r", &li), DLOCK_NO_QUORUM);
    dlock_election_resign(e);
    dlock_client_free(c1);
    dlock_client_free(c2);
    for (int i = 0; i < 3; i++)
        th_server_stop(&s[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_campaign_and_leader),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_observe),
        cmocka_unit_test(test_leader_killed),
        cmocka_unit_test(test_lost),
        cmocka_unit_test(test_redlock),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
