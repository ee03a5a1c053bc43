/*
 * redlock_giveback.c - a give-back acts only on the grant of its own
 * attempt (issue 29, item 0), for a read-write lock's readers over
 * Redlock (three throwaway redis-servers): the permits' and readers'
 * attempts (shared.c) give back as a lock's do.
 *
 * A writer holds the name on nodes A, B and C. A is stopped (SIGSTOP) and
 * a reader waits: its attempts find B and C busy and get no answer from A,
 * so each gives back what it may have taken on A, which does not answer
 * that either (the watchdog retries it). A resumes, the writer releases,
 * and the reader's next attempt is granted on every node. Every give-back
 * A executed (MONITOR) is then sent to A again, exactly as it was (a
 * give-back delivered late, as a watchdog retry can be): the reader must
 * still hold A. Before the fix every give-back named the reader's id and
 * left a tombstone on A, so the reader held only B and C: one failure
 * from losing the majority it was granted. (A give-back that a node
 * answered is done and never sent again: an attempt after it may keep
 * the id, and replaying it would prove nothing.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "dlock.h"
#include "harness.h"
#include "th_monitor.h"

#define NODES 3
/* The reader's command timeout: A's stop outlasts it. */
#define CMD_MS 300
/* Bounded waits (liveness, not timing). */
#define LIVE_MS 20000

static th_server srv[NODES];
static const char *urls[NODES];

static int setup(void **state)
{
    int i;
    (void)state;
    for (i = 0; i < NODES; i++) {
        if (th_server_start(&srv[i], NULL) != 0)
            return -1;
        urls[i] = srv[i].url;
    }
    return 0;
}

static int teardown(void **state)
{
    int i;
    (void)state;
    for (i = 0; i < NODES; i++)
        th_server_stop(&srv[i]);
    return 0;
}

typedef struct job {
    dlock_client *c;
    dlock_lock *l;
    int rc;
} job;

static void *read_job(void *arg)
{
    job *j = arg;
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = LIVE_MS;
    o.lease_ms = 30000;
    j->rc = dlock_rw_acquire_shared(&j->l, j->c, "rg", 0, &o);
    return NULL;
}

/* The reader's lease end on node s (its score in the readers' zset; <= 0
 * when it is not a live reader there). */
static long long reader_score(const th_server *s, const char *owner)
{
    redisReply *r = th_cmd(s, "ZSCORE dlock:{rg}:r %s", owner);
    long long v = 0;
    assert_non_null(r);
    if (r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    freeReplyObject(r);
    return v;
}

static void test_reader_late_giveback(void **state)
{
    dlock_client *w = th_client(urls, NODES, DLOCK_WAIT_SPIN, 1000, 1000);
    dlock_client *rd = th_client(urls, NODES, DLOCK_WAIT_NOTIFY, CMD_MS, 1000);
    dlock_lock *wl = NULL;
    redisContext *mon;
    th_run gb[64];
    job j = {.c = rd};
    pthread_t t;
    int64_t end;
    int i, n = 0;
    (void)state;
    assert_non_null(w);
    assert_non_null(rd);

    /* The reader knows every node (and its scripts) before the stop. */
    {
        dlock_lock *warm = NULL;
        assert_int_equal(dlock_rw_acquire_shared(&warm, rd, "rg-warm", 0, NULL),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_release(warm), DLOCK_OK);
    }
    /* The writer on every node (an acquire returns at a majority: wait
     * for all three). */
    assert_int_equal(dlock_lock_acquire(&wl, w, "rg", 0, 30000), DLOCK_OK);
    end = th_now_ms() + LIVE_MS;
    for (i = 0; i < NODES; i++)
        while (th_cmd_int(&srv[i], "EXISTS dlock:{rg}") != 1 &&
               th_now_ms() < end)
            th_sleep_ms(20);
    for (i = 0; i < NODES; i++)
        assert_int_equal(th_cmd_int(&srv[i], "EXISTS dlock:{rg}"), 1);

    mon = th_monitor_open(&srv[0]);
    assert_non_null(mon);
    th_server_pause(&srv[0]);
    assert_int_equal(pthread_create(&t, NULL, read_job, &j), 0);
    th_sleep_ms(1000);
    th_server_resume(&srv[0]);
    th_sleep_ms(300);
    assert_int_equal(dlock_lock_release(wl), DLOCK_OK);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (j.rc != DLOCK_OK)
        print_error("reader: %s\n", dlock_errmsg(rd));
    assert_int_equal(j.rc, DLOCK_OK);
    /* Give the reader's grant on A time to land (its acquire returns at
     * a majority), and the watchdog its retries. */
    end = th_now_ms() + LIVE_MS;
    while (reader_score(&srv[0], dlock_lock_owner(j.l)) <= 0 &&
           th_now_ms() < end)
        th_sleep_ms(20);
    th_sleep_ms(500);
    assert_int_equal(th_monitor_runs(mon, &srv[0], "rw_release.lua: a reader",
                                     "dlock:{rg}", gb, 64, &n, NULL),
                     0);
    redisFree(mon);
    if (n == 0)
        print_error("no give-back seen on A\n");
    assert_true(n > 0);
    if (reader_score(&srv[0], dlock_lock_owner(j.l)) <= 0)
        print_error("the reader is not on A before the replay\n");
    for (i = 0; i < n; i++) {
        if (strcmp(gb[i].argv[7], dlock_lock_owner(j.l)) == 0)
            print_error("a give-back names the reader's owner id %s\n",
                        gb[i].argv[7]);
        assert_int_equal(th_run_replay(&srv[0], &gb[i]), 0);
    }
    if (reader_score(&srv[0], dlock_lock_owner(j.l)) <= 0)
        print_error("the reader is not on A after the replay\n");
    assert_true(reader_score(&srv[0], dlock_lock_owner(j.l)) > 0);
    for (i = 0; i < n; i++) {
        assert_string_not_equal(gb[i].argv[7], dlock_lock_owner(j.l));
        th_run_free(&gb[i]);
    }
    assert_int_equal(dlock_lock_release(j.l), DLOCK_OK);
    dlock_client_free(rd);
    dlock_client_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_late_giveback),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
