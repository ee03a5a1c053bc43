/*
 * attempt_steps.c - the acquire attempt driven by hand through its three
 * verbs (hold/attempt.h: dlock__attempt_start / _pollfds / _process /
 * _free), as an event loop drives it, against real redis-servers: one
 * server and a Redlock of three. It uses the library's internals (the
 * private headers), so it is built with them (tests/CMakeLists.txt).
 *
 * Checked: a grant and a refusal on one server; a Redlock grant at a
 * majority with a node stopped; two attempts of two owners driven
 * together on one thread from one poll set; the attempt's end bound (no
 * wake-up time it asks for lies past h->attempt_end_ms, and with two of
 * three nodes stopped it ends, NO_QUORUM); its message is its own (the
 * thread's message stays untouched); an attempt cut short (freed before
 * it is done) gives back what it may have taken (a waiter of another
 * client gets the name long before the lease would have run out).
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"
#include "hold/attempt.h"
#include "hold/held.h"
#include "hold/kind.h"

#define FIXTURE_NS 3
#include "fixture_n.h"

/* The command timeout: a stopped node outlasts it. */
#define CMD_MS 400
/* Bounded waits (liveness, not timing). */
#define LIVE_MS 20000
/* A lease far longer than any liveness wait here. */
#define LONG_LEASE_MS 120000

/* One attempt under test and its record. */
typedef struct drive {
    dlock__held *h;
    dlock__attempt_state *a;
    int rc;       /* DLOCK__AGAIN until done */
    int past_end; /* a wake-up asked for past the attempt's end */
} drive;

/* A fresh hold record of NAME (a lock) on c. */
static dlock__held *hold_new(dlock_client *c, const char *name)
{
    char owner[DLOCK_OWNER_MAX];
    dlock__held *h;
    dlock__owner_id(c, owner, sizeof owner);
    h = dlock__held_new(c, name, owner);
    assert_non_null(h);
    h->k.kind = DLOCK__KIND_LOCK;
    return h;
}

/* Start d: an attempt (ask) of NAME with lease_ms on c. */
static void drive_start(drive *d, dlock_client *c, const char *name,
                        int64_t lease_ms)
{
    dlock__want w = {.kind = DLOCK__KIND_LOCK, .lease_ms = lease_ms};
    memset(d, 0, sizeof *d);
    d->h = hold_new(c, name);
    assert_int_equal(
        dlock__attempt_start(&d->a, NULL, c, d->h, &w, DLOCK__ASK_TRY, 0),
        DLOCK_OK);
    d->rc = DLOCK__AGAIN;
}

/* Drive ds[0..n) together from one poll set until every one is done:
 * each gets its descriptors' revents, the clock does the rest. */
static void drive_all(drive *ds, int n)
{
    struct pollfd pfd[8 * 4];
    int base[8], cnt[8], i, left = n;
    int64_t stop = th_now_ms() + LIVE_MS;
    assert_true(n <= 8);
    for (i = 0; i < n; i++) /* a start may have finished it */
        ds[i].rc = dlock__attempt_process(ds[i].a, NULL, 0);
    while (left > 0) {
        int64_t wake = -1, now;
        int m = 0, r;
        left = 0;
        for (i = 0; i < n; i++) {
            int64_t w;
            base[i] = m;
            cnt[i] = 0;
            if (ds[i].rc != DLOCK__AGAIN)
                continue;
            left++;
            cnt[i] = dlock__attempt_pollfds(ds[i].a, pfd + m, 8, &w);
            assert_true(cnt[i] <= 8);
            if (w > ds[i].h->attempt_end_ms)
                ds[i].past_end = 1;
            if (wake < 0 || w < wake)
                wake = w;
            m += cnt[i];
        }
        if (left == 0)
            break;
        assert_true(th_now_ms() < stop); /* a hang fails */
        now = th_now_ms();
        r = poll(pfd, (nfds_t)m,
                 wake <= now ? 0
                             : (int)(wake - now > 1000 ? 1000 : wake - now));
        for (i = 0; i < n; i++)
            if (ds[i].rc == DLOCK__AGAIN)
                ds[i].rc = dlock__attempt_process(ds[i].a, pfd + base[i],
                                                  r > 0 ? cnt[i] : 0);
    }
}

/* Free d's attempt and record (c: its client). */
static void drive_free(dlock_client *c, drive *d)
{
    dlock__attempt_free(d->a);
    dlock__held_drop_pins(c, d->h);
    dlock__held_free(d->h);
}

/* One server: a grant, then another owner's try is refused (BUSY, the
 * holder's lease left reported); neither leaves the thread a message. */
static void test_single(void **state)
{
    const char *url = th_url(&srv[0]);
    dlock_client *c = th_client(&url, 1, DLOCK_WAIT_NOTIFY, CMD_MS, 0);
    drive d[2];
    (void)state;
    assert_non_null(c);
    drive_start(&d[0], c, "st-one", 30000);
    drive_all(d, 1);
    assert_int_equal(d[0].rc, DLOCK_OK);
    assert_true(dlock__attempt_got(d[0].a)->token > 0);
    assert_int_equal(dlock__attempt_got(d[0].a)->nodes, 1);
    assert_true(dlock__attempt_got(d[0].a)->valid_until > th_now_ms());
    drive_start(&d[1], c, "st-one", 30000);
    drive_all(&d[1], 1);
    assert_int_equal(d[1].rc, DLOCK_BUSY);
    assert_true(dlock__attempt_got(d[1].a)->pttl > 0);
    assert_false(d[0].past_end || d[1].past_end);
    assert_string_equal(dlock_errmsg(c), "");
    drive_free(c, &d[0]);
    drive_free(c, &d[1]);
    dlock_client_free(c);
}

/* One server stopped: the attempt ends by its end with the timeout, its
 * message its own. */
static void test_single_stopped(void **state)
{
    const char *url = th_url(&srv[0]);
    dlock_client *c = th_client(&url, 1, DLOCK_WAIT_NOTIFY, CMD_MS, 0);
    drive d;
    (void)state;
    assert_non_null(c);
    /* A pooled connection first, so the stop meets a sent request. */
    drive_start(&d, c, "st-warm", 30000);
    drive_all(&d, 1);
    assert_int_equal(d.rc, DLOCK_OK);
    drive_free(c, &d);
    th_server_pause(&srv[0]);
    drive_start(&d, c, "st-stopped", 30000);
    drive_all(&d, 1);
    th_server_resume(&srv[0]);
    assert_int_equal(d.rc, DLOCK_ETIMEDOUT);
    assert_false(d.past_end);
    assert_true(strlen(dlock__attempt_errmsg(d.a)) > 0);
    assert_string_equal(dlock_errmsg(c), "");
    drive_free(c, &d);
    dlock_client_free(c);
}

/* Redlock: two owners' attempts on one name driven together on this
 * thread: one majority at most (a split vote, or one grant and one
 * refusal); then with one node stopped a grant at the majority; with
 * two stopped NO_QUORUM by the attempt's end. */
static void test_redlock(void **state)
{
    const char *urls[FIXTURE_NS];
    dlock_client *c;
    drive d[2];
    int ok;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, CMD_MS, 0);
    assert_non_null(c);

    drive_start(&d[0], c, "st-red", 30000);
    drive_start(&d[1], c, "st-red", 30000);
    drive_all(d, 2);
    ok = (d[0].rc == DLOCK_OK) + (d[1].rc == DLOCK_OK);
    assert_true(ok <= 1);
    assert_true(d[0].rc == DLOCK_OK || d[0].rc == DLOCK_BUSY);
    assert_true(d[1].rc == DLOCK_OK || d[1].rc == DLOCK_BUSY);
    assert_false(d[0].past_end || d[1].past_end);
    drive_free(c, &d[0]);
    drive_free(c, &d[1]);

    th_server_pause(&srv[2]);
    drive_start(&d[0], c, "st-red-one-down", 30000);
    drive_all(d, 1);
    assert_int_equal(d[0].rc, DLOCK_OK);
    assert_int_equal(dlock__attempt_got(d[0].a)->nodes, 3); /* A and B */
    assert_false(d[0].past_end);
    drive_free(c, &d[0]);

    th_server_pause(&srv[1]);
    drive_start(&d[0], c, "st-red-two-down", 30000);
    drive_all(d, 1);
    th_server_resume(&srv[1]);
    th_server_resume(&srv[2]);
    assert_int_equal(d[0].rc, DLOCK_NO_QUORUM);
    assert_false(d[0].past_end);
    assert_non_null(strstr(dlock__attempt_errmsg(d[0].a), "of 3"));
    assert_string_equal(dlock_errmsg(c), "");
    drive_free(c, &d[0]);
    dlock_client_free(c);
}

/* An attempt freed before it is done (its requests out on every node)
 * gives back what it may have taken: a waiter of another client gets the
 * name, though the lease asked for is far longer than its wait. */
static void test_cut_short(void **state)
{
    const char *urls[FIXTURE_NS];
    dlock_client *c, *c2;
    dlock_lock *l = NULL;
    drive d;
    (void)state;
    fixture_urls(urls);
    c = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, CMD_MS, 0);
    c2 = th_client(urls, FIXTURE_NS, DLOCK_WAIT_NOTIFY, CMD_MS, 0);
    assert_non_null(c);
    assert_non_null(c2);
    /* Pooled connections first, so the cut-short attempt's requests go
     * out at its start. */
    drive_start(&d, c, "st-cut-warm", 30000);
    drive_all(&d, 1);
    assert_int_equal(d.rc, DLOCK_OK);
    drive_free(c, &d);
    drive_start(&d, c, "st-cut", LONG_LEASE_MS);
    drive_free(c, &d); /* cut short at once: sent, not answered */
    assert_int_equal(dlock_lock_acquire(&l, c2, "st-cut", LIVE_MS, 30000),
                     DLOCK_OK);
    assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    dlock_client_free(c);
    dlock_client_free(c2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_single_stopped),
        cmocka_unit_test(test_redlock),
        cmocka_unit_test(test_cut_short),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
