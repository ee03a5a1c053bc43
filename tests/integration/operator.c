/*
 * operator.c - issue 21's operator view through dlock.h, against a real
 * redis-server: holder info (recorded only by clients that ask, never
 * shown for an earlier hold, a label and pid of the caller's choosing as
 * if from another host), dlock_lock_check with the current, an older and
 * an unknown token, dlock_list over many keys and patterns (sorted, the
 * callback can stop it), and the metrics: events on the threads where
 * they happen (busy, waited, acquired, renewed and lost on the watchdog
 * thread, released) and histograms that agree with the counters.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "fixture.h"

/* A client for srv; with a label, it records holder info. */
static dlock_client *client(const char *label, int64_t pid,
                            dlock_event_cb on_event, void *ud)
{
    const char *url = th_url(&srv);
    dlock_options o;
    dlock_client *c = NULL;
    char err[256];
    dlock_options_init(&o);
    o.servers = &url;
    o.nservers = 1;
    o.tls_ca_file = th_ca_file();
    o.holder_info = label != NULL;
    o.holder_label = label;
    o.holder_pid = pid;
    o.on_event = on_event;
    o.on_event_userdata = ud;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    return c;
}

/* ---- holder info ------------------------------------------------------- */

static void test_holder_info(void **state)
{
    dlock_client *a = client("backup on db-7", 4242, NULL, NULL);
    dlock_client *b = client(NULL, 0, NULL, NULL);
    dlock_lock *l = NULL, *m = NULL;
    dlock_info in;
    char host[256];
    (void)state;

    gethostname(host, sizeof host);
    assert_int_equal(dlock_lock_acquire(&l, a, "op:h1", 0, 30000), DLOCK_OK);
    usleep(20000);
    /* Another client (without holder info itself) sees a's info. */
    assert_int_equal(dlock_lock_inspect(b, "op:h1", &in), DLOCK_OK);
    assert_true(in.held);
    assert_int_equal(in.has_holder, 1);
    assert_string_equal(in.holder_host, host);
    assert_int_equal(in.holder_pid, 4242);
    assert_string_equal(in.holder_label, "backup on db-7");
    assert_string_equal(in.holder_version, DLOCK_VERSION);
    assert_true(in.held_ms >= 10 && in.held_ms < 60000);
    assert_int_equal(th_cmd_int(&srv, "PTTL dlock:{op:h1}:i") > 0, 1);

    /* A client without holder info records nothing: no key, no info. */
    assert_int_equal(dlock_lock_acquire(&m, b, "op:h2", 0, 30000), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{op:h2}:i"), 0);
    assert_int_equal(dlock_lock_inspect(a, "op:h2", &in), DLOCK_OK);
    assert_true(in.held);
    assert_int_equal(in.has_holder, 0);
    assert_int_equal(in.held_ms, -1);
    assert_int_equal(dlock_lock_release(m), DLOCK_OK);

    /* Released: the info is left to expire but never shown for the next
     * holder, who records none. */
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{op:h1}:i"), 1);
    assert_int_equal(dlock_lock_acquire(&m, b, "op:h1", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_inspect(a, "op:h1", &in), DLOCK_OK);
    assert_true(in.held);
    assert_int_equal(in.has_holder, 0);
    assert_int_equal(dlock_lock_release(m), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A label longer than DLOCK_LABEL_MAX - 1 is refused, and said so. */
static void test_holder_label_too_long(void **state)
{
    const char *url = th_url(&srv);
    char label[DLOCK_LABEL_MAX + 1], err[256] = "";
    dlock_options o;
    dlock_client *c = NULL;
    (void)state;
    memset(label, 'x', DLOCK_LABEL_MAX);
    label[DLOCK_LABEL_MAX] = '\0';
    dlock_options_init(&o);
    o.servers = &url;
    o.nservers = 1;
    o.holder_info = 1;
    o.holder_label = label;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "holder_label"));
}

/* ---- check ------------------------------------------------------------- */

static void test_check(void **state)
{
    dlock_client *a = client(NULL, 0, NULL, NULL);
    dlock_lock *l = NULL;
    uint64_t t, t2;
    (void)state;

    assert_int_equal(dlock_lock_check(a, "op:c", 1), DLOCK_NOT_OWNER);
    assert_int_equal(dlock_lock_acquire(&l, a, "op:c", 0, 30000), DLOCK_OK);
    t = dlock_lock_token(l);
    assert_int_equal(dlock_lock_check(a, "op:c", t), DLOCK_OK);
    assert_int_equal(dlock_lock_check(a, "op:c", t - 1), DLOCK_STALE);
    assert_int_equal(dlock_lock_check(a, "op:c", t + 1), DLOCK_NOT_OWNER);
    assert_int_equal(dlock_lock_check(a, "op:c", 0), DLOCK_EINVAL);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    assert_int_equal(dlock_lock_check(a, "op:c", t), DLOCK_NOT_OWNER);
    assert_int_equal(dlock_lock_acquire(&l, a, "op:c", 0, 30000), DLOCK_OK);
    t2 = dlock_lock_token(l);
    assert_true(t2 > t);
    assert_int_equal(dlock_lock_check(a, "op:c", t), DLOCK_STALE);
    assert_int_equal(dlock_lock_check(a, "op:c", t2), DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(a);
}

/* ---- list -------------------------------------------------------------- */

typedef struct seen {
    int n, stop_at;
    char names[64][32];
    int labelled;
} seen;

static int on_entry(const dlock_list_entry *e, void *ud)
{
    seen *s = ud;
    assert_string_equal(e->kind, "lock");
    assert_true(e->info.held);
    if (s->n < 64)
        snprintf(s->names[s->n], sizeof s->names[0], "%s", e->name);
    s->labelled +=
        e->info.has_holder && strcmp(e->info.holder_label, "lister") == 0;
    s->n++;
    return s->stop_at > 0 && s->n == s->stop_at;
}

static void test_list(void **state)
{
    dlock_client *a = client("lister", 0, NULL, NULL);
    dlock_lock *l[40];
    seen s;
    char name[32];
    int i;
    (void)state;

    for (i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "op:l:%02d", 39 - i);
        assert_int_equal(dlock_lock_acquire(&l[i], a, name, 0, 30000),
                         DLOCK_OK);
    }
    memset(&s, 0, sizeof s);
    assert_int_equal(dlock_list(a, "op:l:*", on_entry, &s), 40);
    assert_int_equal(s.n, 40);
    assert_int_equal(s.labelled, 40);
    for (i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "op:l:%02d", i);
        assert_string_equal(s.names[i], name);
    }
    memset(&s, 0, sizeof s);
    assert_int_equal(dlock_list(a, "op:l:1?", on_entry, &s), 10);
    memset(&s, 0, sizeof s);
    s.stop_at = 5;
    assert_int_equal(dlock_list(a, NULL, on_entry, &s), 5);
    memset(&s, 0, sizeof s);
    assert_int_equal(dlock_list(a, "", on_entry, &s), DLOCK_EINVAL);
    assert_int_equal(dlock_list(a, "x", NULL, NULL), DLOCK_EINVAL);
    for (i = 0; i < 40; i++)
        assert_int_equal(dlock_lock_release(l[i]), DLOCK_OK);
    memset(&s, 0, sizeof s);
    assert_int_equal(dlock_list(a, "op:l:*", on_entry, &s), 0);
    dlock_client_free(a);
}

/* ---- events and metrics -------------------------------------------------- */

typedef struct evlog {
    pthread_mutex_t mu;
    int n;
    dlock_event_type type[256];
    int status[256];
    int64_t dur[256];
    int other_thread[256];
    pthread_t main;
} evlog;

static void on_event(const dlock_event *ev, void *ud)
{
    evlog *g = ud;
    pthread_mutex_lock(&g->mu);
    if (g->n < 256 && strcmp(ev->name, "op:e") == 0) {
        g->type[g->n] = ev->type;
        g->status[g->n] = ev->status;
        g->dur[g->n] = ev->duration_us;
        g->other_thread[g->n] = !pthread_equal(pthread_self(), g->main);
        g->n++;
    }
    pthread_mutex_unlock(&g->mu);
}

/* Index of the first event of TYPE from index FROM on, or -1. */
static int find_ev(evlog *g, dlock_event_type type, int from)
{
    int i, r = -1;
    pthread_mutex_lock(&g->mu);
    for (i = from; i < g->n && r < 0; i++)
        if (g->type[i] == type)
            r = i;
    pthread_mutex_unlock(&g->mu);
    return r;
}

/* Wait (bounded) for an event of TYPE from FROM on. */
static int wait_ev(evlog *g, dlock_event_type type, int from)
{
    int64_t end = th_now_ms() + 10000;
    int i;
    while ((i = find_ev(g, type, from)) < 0 && th_now_ms() < end)
        th_sleep_ms(10);
    return i;
}

static void test_events_and_metrics(void **state)
{
    evlog g;
    dlock_client *a, *b = client(NULL, 0, NULL, NULL);
    dlock_acquire_options ao;
    dlock_lock *l = NULL, *held = NULL;
    dlock_metrics m;
    int i, k;
    (void)state;

    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.mu, NULL);
    g.main = pthread_self();
    a = client(NULL, 0, on_event, &g);
    assert_string_equal(dlock_event_name(DLOCK_EVENT_RENEWED), "renewed");
    assert_string_equal(dlock_event_name(99), "unknown");

    /* Busy, then a wait that gives up. */
    assert_int_equal(dlock_lock_acquire(&held, b, "op:e", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_acquire(&l, a, "op:e", 0, 30000), DLOCK_BUSY);
    assert_int_equal(dlock_lock_acquire(&l, a, "op:e", 200, 30000),
                     DLOCK_TIMEDOUT);
    assert_int_equal(dlock_lock_release(held), DLOCK_OK);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.type[0], DLOCK_EVENT_BUSY);
    assert_int_equal(g.type[1], DLOCK_EVENT_WAITED);
    assert_int_equal(g.status[1], DLOCK_TIMEDOUT);
    /* The wait ends when the millisecond clock reaches the deadline, so
     * up to 1 ms before 200 ms of microseconds have passed. */
    assert_true(g.dur[1] >= 199000);
    assert_false(g.other_thread[0] || g.other_thread[1]);

    /* Acquired with the watchdog: renewals on the watchdog's thread, then
     * the key is deleted behind its back: lost, on that thread too. */
    dlock_acquire_options_init(&ao);
    ao.lease_ms = 300;
    ao.watchdog = 1;
    assert_int_equal(dlock_lock_acquire_ex(&l, a, "op:e", &ao), DLOCK_OK);
    assert_int_equal(g.type[2], DLOCK_EVENT_ACQUIRED);
    assert_false(g.other_thread[2]);
    i = wait_ev(&g, DLOCK_EVENT_RENEWED, 3);
    assert_true(i >= 3);
    assert_true(g.other_thread[i]);
    assert_int_equal(g.status[i], DLOCK_OK);
    th_cmd_int(&srv, "DEL dlock:{op:e}");
    k = wait_ev(&g, DLOCK_EVENT_LOST, i);
    assert_true(k > i);
    assert_true(g.other_thread[k]);
    assert_int_equal(g.status[k], DLOCK_LOST);
    assert_int_equal(dlock_lock_release(l), DLOCK_LOST);

    /* A plain hold of ~100 ms: released, with its duration. */
    assert_int_equal(dlock_lock_acquire(&l, a, "op:e", 0, 30000), DLOCK_OK);
    th_sleep_ms(100);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    k = find_ev(&g, DLOCK_EVENT_RELEASED, 0);
    assert_true(k > 0);
    assert_int_equal(g.status[k], DLOCK_OK);
    assert_true(g.dur[k] >= 100000);
    assert_false(g.other_thread[k]);

    /* The histograms agree with the counters. */
    dlock_client_metrics(a, &m);
    assert_int_equal(m.stats.acquisitions, 2);
    assert_int_equal(m.acquire_wait.count, 2);
    assert_int_equal(m.hold.count, 1);
    assert_true(m.hold.sum_us >= 100000);
    assert_true(m.renewal.count >= m.stats.renewals);
    assert_true(m.stats.renewals >= 1);
    for (i = 0, k = 0; i < DLOCK_HIST_BUCKETS; i++)
        k += (int)m.hold.bucket[i];
    assert_int_equal(k, 1);
    assert_int_equal(m.hold.bucket[DLOCK_HIST_BUCKETS - 1], 0);
    dlock_client_metrics(NULL, &m);
    assert_int_equal(m.acquire_wait.count, 0);

    dlock_client_free(a);
    dlock_client_free(b);
    pthread_mutex_destroy(&g.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holder_info),
        cmocka_unit_test(test_holder_label_too_long),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_events_and_metrics),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
