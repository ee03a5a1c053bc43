/*
 * loop_lean.c - what the event loop's de-duplication cycle costs Redis
 * on one server with the string layout (issue 30: Redis CPU per gateway
 * request), against a real redis-server: a lazy-token acquire is a plain
 * SET NX PX (no script), a fenced get a plain GET (the value one string
 * "<fence> <value>"), and the store of the
 * result with the release one script (dlock_loop_fenced_set_release),
 * counted with INFO commandstats (counts, not times). And the combined
 * op's outcomes: stored + released, the lease lost (nothing stored), a
 * newer fence (STALE, released), waiters woken as by a release, and the
 * refusals (hash layout, bad arguments).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "dlock_loop.h"
#include "harness.h"
#include "fixture.h"
#include "th_loop.h"

typedef th_seen seen;
#define note th_note

static void run1(dlock_loop *l, const int *flag)
{
    assert_int_equal(th_loop_run(&l, 1, flag), 0);
}

/* A string-layout client without fence retention and its loop. */
static dlock_client *string_client(void)
{
    dlock_client *c = th_client_string(th_url(&srv), 0);
    assert_non_null(c);
    return c;
}

static dlock_loop_acquire lazy_opts(dlock_client *c, int64_t wait_ms)
{
    dlock_loop_acquire o;
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = wait_ms;
    o.lease_ms = 30000;
    o.lazy_token = 1;
    return o;
}

/* Acquire NAME on l with o: the hold (the test fails otherwise). */
static dlock_hold *take(dlock_loop *l, const char *name,
                        const dlock_loop_acquire *o)
{
    seen s = {0};
    assert_int_equal(dlock_loop_lock(NULL, l, name, o, note, &s), DLOCK_OK);
    run1(l, &s.done);
    assert_int_equal(s.status, DLOCK_OK);
    return s.hold;
}

/* What a set-and-release's callback saw, with the fence it gives. */
typedef struct setrel_seen {
    seen s;
    uint64_t fence;
} setrel_seen;

static void setrel_note(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    setrel_seen *x = ud;
    const char *v = dlock_op_value(op, NULL, &x->fence);
    assert_null(v);
    note(op, status, hold, &x->s);
}

/* Store V under KEY and release H on l: the status (*fence the fence). */
static int setrel(dlock_loop *l, dlock_hold *h, const char *key, const char *v,
                  uint64_t *fence)
{
    setrel_seen x;
    memset(&x, 0, sizeof x);
    assert_int_equal(dlock_loop_fenced_set_release(NULL, l, h, key, v,
                                                   strlen(v), setrel_note, &x),
                     DLOCK_OK);
    run1(l, &x.s.done);
    if (fence != NULL)
        *fence = x.fence;
    return x.s.status;
}

static void get_note(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    char *out = ud;
    const char *v = dlock_op_value(op, NULL, NULL);
    (void)hold;
    snprintf(out, 64, "%s", status != DLOCK_OK ? "ERR" : v ? v : "(nil)");
}

/* The value a fenced get of KEY on l reads ("(nil)": none). */
static void get(dlock_loop *l, const char *key, char out[64])
{
    out[0] = '\0';
    assert_int_equal(dlock_loop_fenced_get(NULL, l, key, get_note, out),
                     DLOCK_OK);
    while (out[0] == '\0')
        th_loop_run_for(&l, 1, 5);
}

/* The gateway's cycle: a lazy try (a plain SET: value "<owner> 1 0",
 * token 0), a fenced get (GET), the store and release (one script):
 * one script in all, the token issued by the store. */
static void test_cycle_one_script(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    char want[128], got[64];
    long long before, after;
    uint64_t fence = 0;
    dlock_hold *h;
    redisReply *r;
    (void)state;
    assert_non_null(l);
    /* First cycle loads the script; the second is counted. */
    h = take(l, "lean:a", &o);
    assert_int_equal(setrel(l, h, "lean:res0", "x", NULL), DLOCK_OK);
    before = th_scripts_run(&srv);
    h = take(l, "lean:a", &o);
    assert_int_equal(dlock_hold_token(h), 0); /* not issued yet */
    snprintf(want, sizeof want, "%s 1 0", dlock_hold_owner(h));
    r = th_cmd(&srv, "GET dlock:{lean:a}");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
    assert_int_equal(th_scripts_run(&srv) - before, 0); /* the acquire: none */
    get(l, "lean:res", got);
    assert_string_equal(got, "(nil)");
    assert_int_equal(th_scripts_run(&srv) - before, 0); /* the get: none */
    assert_int_equal(setrel(l, h, "lean:res", "body", &fence), DLOCK_OK);
    after = th_scripts_run(&srv);
    printf("scripts per cycle: %lld\n", after - before);
    assert_int_equal(after - before, 1);
    assert_true(fence > 0); /* the token issued by the store */
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lean:a}"), 0);
    r = th_cmd(&srv, "GET lean:res"); /* one string: "<fence> <value>" */
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(want, sizeof want, "%llu body", (unsigned long long)fence);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
    get(l, "lean:res", got);
    assert_string_equal(got, "body");
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The store of a first result (the gateway's common case: the value's key
 * does not exist yet) costs the server, inside its one script, the lock's
 * GET, TIME for the lazy token, one SETNX of "<token> <value>" and the
 * lock's DEL: no read of the value's key, no status reply to convert
 * (issue 30: Redis CPU per request). Counts, not times. */
static void test_store_fresh_commands(void **state)
{
    static const char *const cmd[] = {"get", "set", "setnx", "time", "del"};
    static const long long want[] = {1, 0, 1, 1, 1};
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    long long before[5];
    char got[64];
    uint64_t fence = 0;
    dlock_hold *h;
    size_t i;
    (void)state;
    assert_non_null(l);
    h = take(l, "lean:f", &o); /* loads the script */
    assert_int_equal(setrel(l, h, "lean:f0", "x", NULL), DLOCK_OK);
    h = take(l, "lean:f", &o);
    for (i = 0; i < 5; i++)
        before[i] = th_calls(&srv, cmd[i]);
    assert_int_equal(setrel(l, h, "lean:f1", "body", &fence), DLOCK_OK);
    for (i = 0; i < 5; i++) {
        printf("%s: %lld\n", cmd[i], th_calls(&srv, cmd[i]) - before[i]);
        assert_int_equal(th_calls(&srv, cmd[i]) - before[i], want[i]);
    }
    assert_true(fence > 0);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lean:f}"), 0);
    get(l, "lean:f1", got);
    assert_string_equal(got, "body");
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Without lazy_token the hold's token is known at the grant (the
 * script's), and the store uses it. */
static void test_token_at_grant(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    uint64_t tok, fence = 0;
    dlock_hold *h;
    (void)state;
    o.lazy_token = 0;
    h = take(l, "lean:t", &o);
    tok = dlock_hold_token(h);
    assert_true(tok > 0);
    assert_int_equal(setrel(l, h, "lean:tres", "v", &fence), DLOCK_OK);
    assert_int_equal(fence, tok);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Run dlock_loop_token for h on l: its status. */
static int token_of(dlock_loop *l, dlock_hold *h)
{
    seen s = {0};
    assert_int_equal(dlock_loop_token(NULL, l, h, note, &s), DLOCK_OK);
    assert_int_equal(s.done, 0); /* never from inside the call */
    run1(l, &s.done);
    return s.status;
}

/* dlock_loop_token issues a lazy hold's token (written into the lock's
 * value), which the store then uses; a hold that is gone gets none. */
static void test_token_op(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    uint64_t tok, fence = 0;
    char want[160];
    dlock_hold *h;
    redisReply *r;
    (void)state;
    h = take(l, "lean:tok", &o);
    assert_int_equal(dlock_hold_token(h), 0);
    assert_int_equal(token_of(l, h), DLOCK_OK);
    tok = dlock_hold_token(h);
    assert_true(tok > 0);
    snprintf(want, sizeof want, "%s 1 %llu", dlock_hold_owner(h),
             (unsigned long long)tok);
    r = th_cmd(&srv, "GET dlock:{lean:tok}");
    assert_non_null(r);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
    assert_int_equal(token_of(l, h), DLOCK_OK); /* known: the same */
    assert_int_equal(dlock_hold_token(h), tok);
    assert_int_equal(setrel(l, h, "lean:tokres", "v", &fence), DLOCK_OK);
    assert_int_equal(fence, tok);
    /* Gone before it asked: no token. */
    h = take(l, "lean:tok2", &o);
    th_cmd_int(&srv, "DEL dlock:{lean:tok2}");
    assert_int_equal(token_of(l, h), DLOCK_NOT_OWNER);
    assert_int_equal(dlock_hold_token(h), 0);
    assert_int_equal(setrel(l, h, "lean:tokres2", "v", NULL), DLOCK_NOT_OWNER);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A struct of version 1 (before lazy_token) is accepted, and whatever
 * lies where lazy_token now is is not read: the token comes with the
 * grant. */
static void test_version1_struct(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    dlock_hold *h;
    (void)state;
    o.version = 1;
    h = take(l, "lean:v1", &o);
    assert_true(dlock_hold_token(h) > 0);
    assert_int_equal(setrel(l, h, "lean:v1res", "v", NULL), DLOCK_OK);
    o.version = 3;
    assert_int_equal(dlock_loop_lock(NULL, l, "lean:v1", &o, note, NULL),
                     DLOCK_EINVAL);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The lease lost (another owner has the name now): nothing stored,
 * the other owner's lock untouched. */
static void test_lost_not_stored(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    dlock_hold *h;
    redisReply *r;
    (void)state;
    h = take(l, "lean:lost", &o);
    th_cmd_int(&srv, "SET dlock:{lean:lost} %s PX 30000", "someone:0:1 1 5");
    assert_int_equal(setrel(l, h, "lean:lostres", "late", NULL),
                     DLOCK_NOT_OWNER);
    assert_int_equal(th_cmd_int(&srv, "EXISTS lean:lostres"), 0);
    r = th_cmd(&srv, "GET dlock:{lean:lost}");
    assert_non_null(r);
    assert_string_equal(r->str, "someone:0:1 1 5");
    freeReplyObject(r);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A newer token already stored: STALE with that fence, nothing written,
 * the hold released all the same. */
static void test_newer_fence_stale(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    uint64_t fence = 0;
    dlock_hold *h;
    redisReply *r;
    (void)state;
    h = take(l, "lean:st", &o);
    /* Far above any token of the server's clock (us since 1970). */
    th_cmd_int(&srv, "SET lean:stres %s", "9000000000000000 newer");
    assert_int_equal(setrel(l, h, "lean:stres", "old", &fence), DLOCK_STALE);
    assert_int_equal(fence, 9000000000000000ULL);
    r = th_cmd(&srv, "GET lean:stres");
    assert_non_null(r);
    assert_string_equal(r->str, "9000000000000000 newer");
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lean:st}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Waiters are woken as by a release: a notify waiter (its busy try went
 * to the script, which marked the hold) gets the lock and finds the
 * result at once; a fair waiter is handed the lock. */
static void test_waiters_woken(void **state)
{
    int strategies[2] = {DLOCK_WAIT_NOTIFY, DLOCK_WAIT_FAIR};
    int i;
    (void)state;
    for (i = 0; i < 2; i++) {
        dlock_client *c = string_client();
        dlock_loop *ls[2] = {th_loop_new(c), th_loop_new(c)};
        dlock_loop_acquire o = lazy_opts(c, 0);
        dlock_loop_acquire w = lazy_opts(c, 20000);
        seen b = {0};
        char got[64];
        dlock_hold *h;
        w.strategy = strategies[i];
        h = take(ls[0], "lean:w", &o);
        assert_int_equal(dlock_loop_lock(NULL, ls[1], "lean:w", &w, note, &b),
                         DLOCK_OK);
        th_loop_run_for(ls, 2, 200);
        assert_int_equal(b.done, 0); /* waiting: the lease is 30 s */
        assert_int_equal(setrel(ls[0], h, "lean:wres", "done", NULL), DLOCK_OK);
        assert_int_equal(th_loop_run(ls, 2, &b.done), 0);
        assert_int_equal(b.status, DLOCK_OK);
        get(ls[1], "lean:wres", got);
        assert_string_equal(got, "done");
        assert_int_equal(setrel(ls[1], b.hold, "lean:wres", "again", NULL),
                         DLOCK_OK);
        th_cmd_int(&srv, "DEL lean:wres");
        dlock_loop_free(ls[0]);
        dlock_loop_free(ls[1]);
        dlock_client_free(c);
    }
}

/* A plain try that finds the name taken is BUSY (the script asked
 * again: it says so), and the holder's value untouched but for the
 * mark. */
static void test_busy_try(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *ls[2] = {th_loop_new(c), th_loop_new(c)};
    dlock_loop_acquire o = lazy_opts(c, 0);
    seen b = {0};
    dlock_hold *h;
    (void)state;
    h = take(ls[0], "lean:b", &o);
    assert_int_equal(dlock_loop_lock(NULL, ls[1], "lean:b", &o, note, &b),
                     DLOCK_OK);
    run1(ls[1], &b.done);
    assert_int_equal(b.status, DLOCK_BUSY);
    assert_int_equal(setrel(ls[0], h, "lean:bres", "v", NULL), DLOCK_OK);
    dlock_loop_free(ls[0]);
    dlock_loop_free(ls[1]);
    dlock_client_free(c);
}

/* A plain try cancelled while its SET NX PX is out: the grant its
 * answer brings (OK, not a script's array) is given back. */
static void test_cancel_plain_try(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_loop_acquire o = lazy_opts(c, 0);
    seen a = {0};
    dlock_op *op = NULL;
    (void)state;
    o.lease_ms = 60000;
    assert_int_equal(dlock_loop_lock(&op, l, "lean:cf", &o, note, &a),
                     DLOCK_OK);
    dlock_loop_process(l); /* the request goes out */
    dlock_op_cancel(op);
    assert_int_equal(a.status, DLOCK_CANCELED);
    th_loop_run_for(&l, 1, 200);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{lean:cf}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* Refusals: the hash layout, a bad key, no callback; nothing started,
 * the hold still usable. */
static void test_refused(void **state)
{
    dlock_client *c = fixture_client(0, 0, 0); /* the hash layout */
    dlock_loop *l = th_loop_new(c);
    dlock_hold *h = NULL;
    seen s = {0};
    (void)state;
    assert_int_equal(th_loop_lock(l, "lean:h", NULL, &h), DLOCK_OK);
    assert_int_equal(dlock_loop_fenced_set_release(NULL, l, h, "lean:hres", "v",
                                                   1, note, &s),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "string layout"));
    assert_int_equal(th_loop_release(l, h), DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);

    c = string_client();
    l = th_loop_new(c);
    h = NULL;
    assert_int_equal(th_loop_lock(l, "lean:h2", NULL, &h), DLOCK_OK);
    assert_int_equal(
        dlock_loop_fenced_set_release(NULL, l, h, "", "v", 1, note, &s),
        DLOCK_EINVAL);
    assert_int_equal(
        dlock_loop_fenced_set_release(NULL, l, h, "k", NULL, 1, note, &s),
        DLOCK_EINVAL);
    assert_int_equal(
        dlock_loop_fenced_set_release(NULL, l, h, "k", "v", 1, NULL, &s),
        DLOCK_EINVAL);
    assert_int_equal(
        dlock_loop_fenced_set_release(NULL, l, NULL, "k", "v", 1, note, &s),
        DLOCK_EINVAL);
    /* A lazy hold's token before it is issued (0) is no token to fence
     * with: refused as dlock_fenced_set refuses it. */
    assert_int_equal(dlock_loop_fenced_set(NULL, l, "k", 0, "v", 1, note, &s),
                     DLOCK_EINVAL);
    assert_non_null(strstr(dlock_errmsg(c), "dlock_loop_token"));
    assert_int_equal(
        dlock_loop_fenced_set(NULL, l, "k", (1ULL << 53) + 1, "v", 1, note, &s),
        DLOCK_EINVAL);
    assert_int_equal(s.done, 0);
    assert_int_equal(th_cmd_int(&srv, "EXISTS k"), 0);
    assert_int_equal(th_loop_release(l, h), DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cycle_one_script),
        cmocka_unit_test(test_store_fresh_commands),
        cmocka_unit_test(test_token_at_grant),
        cmocka_unit_test(test_version1_struct),
        cmocka_unit_test(test_token_op),
        cmocka_unit_test(test_lost_not_stored),
        cmocka_unit_test(test_newer_fence_stale),
        cmocka_unit_test(test_waiters_woken),
        cmocka_unit_test(test_busy_try),
        cmocka_unit_test(test_cancel_plain_try),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
