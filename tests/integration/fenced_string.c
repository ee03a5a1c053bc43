/*
 * fenced_string.c - the string layout's fenced value against a real
 * redis-server (issue 30: one SET and one GET a fenced write and read,
 * as the gateway's floor does, where the hash layout writes a hash): one
 * string "<fence> <value>" ("<fence>" alone: a fence and no value),
 * written and read alike by the blocking calls (dlock_fenced_set / get /
 * read, dlock_lock_fenced_set_release) and a loop's
 * (dlock_loop_fenced_*); a stale token refused in that form; a key of the
 * other form (a hash-layout client's hash, a string not of this form)
 * refused with DLOCK_EINVAL and a message, never overwritten; the hash
 * layout unchanged.
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

/* A binary value: spaces, a NUL, a newline, a leading digit. */
static const char BIN[] = "7 a\0b\nc ";
#define BINLEN (sizeof BIN - 1)

static dlock_client *string_client(void)
{
    dlock_client *c = th_client_string(th_url(&srv), 0);
    assert_non_null(c);
    return c;
}

static dlock_client *hash_client(void)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_NOTIFY, 0, 0);
    return c;
}

/* KEY's raw string on the server ("(nil)" for none, "(hash)" for a
 * hash), with its length in *len. */
static char *raw(const char *key, size_t *len)
{
    redisReply *r = th_cmd(&srv, "TYPE %s", key);
    char *out;
    assert_non_null(r);
    if (strcmp(r->str, "string") != 0) {
        out = strdup(strcmp(r->str, "hash") == 0 ? "(hash)" : "(nil)");
        *len = strlen(out);
        freeReplyObject(r);
        return out;
    }
    freeReplyObject(r);
    r = th_cmd(&srv, "GET %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    out = malloc(r->len + 1);
    assert_non_null(out);
    memcpy(out, r->str, r->len + 1);
    *len = r->len;
    freeReplyObject(r);
    return out;
}

/* Assert that KEY holds exactly the string "<fence> " + V (VL bytes), or
 * "<fence>" when V is NULL. */
static void assert_raw(const char *key, uint64_t fence, const char *v,
                       size_t vl)
{
    char want[256];
    size_t n, len;
    char *got = raw(key, &len);
    n = (size_t)snprintf(want, sizeof want, "%llu", (unsigned long long)fence);
    if (v != NULL) {
        want[n++] = ' ';
        memcpy(want + n, v, vl);
        n += vl;
    }
    assert_int_equal(len, n);
    assert_memory_equal(got, want, n);
    free(got);
}

typedef th_vseen vseen;
#define vnote th_vnote

static void run1(dlock_loop *l, const int *flag)
{
    assert_int_equal(th_loop_run(&l, 1, flag), 0);
}

/* Loop ops: set, get, read (token 0: get) of KEY: the status. */
static int lset(dlock_loop *l, const char *key, uint64_t tok, const char *v,
                size_t vl, vseen *x)
{
    memset(x, 0, sizeof *x);
    assert_int_equal(dlock_loop_fenced_set(NULL, l, key, tok, v, vl, vnote, x),
                     DLOCK_OK);
    run1(l, &x->s.done);
    return x->s.status;
}

static int lget(dlock_loop *l, const char *key, uint64_t tok, vseen *x)
{
    memset(x, 0, sizeof *x);
    if (tok == 0)
        assert_int_equal(dlock_loop_fenced_get(NULL, l, key, vnote, x),
                         DLOCK_OK);
    else
        assert_int_equal(dlock_loop_fenced_read(NULL, l, key, tok, vnote, x),
                         DLOCK_OK);
    run1(l, &x->s.done);
    return x->s.status;
}

/* Blocking get of KEY: the status; the value compared with V (VL bytes;
 * V NULL: none) and the fence with FENCE when DLOCK_OK. */
static int bget(dlock_client *c, const char *key, const char *v, size_t vl,
                uint64_t fence)
{
    char *got = NULL;
    size_t len = 0;
    uint64_t f = 0;
    int rc = dlock_fenced_get(c, key, &got, &len, &f);
    if (rc == DLOCK_OK) {
        assert_int_equal(f, fence);
        if (v == NULL) {
            assert_null(got);
        } else {
            assert_non_null(got);
            assert_int_equal(len, vl);
            assert_memory_equal(got, v, vl);
        }
    } else {
        assert_null(got);
    }
    free(got);
    return rc;
}

/* One string a value, written and read alike by the blocking calls and
 * a loop's; binary-safe; an empty value is a value (not none). */
static void test_round_trip(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    char *v = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    vseen x;
    (void)state;
    assert_non_null(l);
    /* Blocking write, loop read. */
    assert_int_equal(dlock_fenced_set(c, "fs:a", 5, BIN, BINLEN), DLOCK_OK);
    assert_raw("fs:a", 5, BIN, BINLEN);
    assert_int_equal(lget(l, "fs:a", 0, &x), DLOCK_OK);
    assert_true(x.has);
    assert_int_equal(x.vl, BINLEN);
    assert_memory_equal(x.v, BIN, BINLEN);
    assert_int_equal(x.fence, 5);
    /* Loop write, blocking read. */
    assert_int_equal(lset(l, "fs:a", 6, "six", 3, &x), DLOCK_OK);
    assert_raw("fs:a", 6, "six", 3);
    assert_int_equal(bget(c, "fs:a", "six", 3, 6), DLOCK_OK);
    /* An empty value is a value. */
    assert_int_equal(dlock_fenced_set(c, "fs:a", 7, "", 0), DLOCK_OK);
    assert_raw("fs:a", 7, "", 0);
    assert_int_equal(bget(c, "fs:a", "", 0, 7), DLOCK_OK);
    assert_int_equal(lget(l, "fs:a", 0, &x), DLOCK_OK);
    assert_true(x.has);
    assert_int_equal(x.vl, 0);
    /* None: no value, fence 0. */
    assert_int_equal(bget(c, "fs:none", NULL, 0, 0), DLOCK_OK);
    assert_int_equal(lget(l, "fs:none", 0, &x), DLOCK_OK);
    assert_false(x.has);
    assert_int_equal(x.fence, 0);
    /* A read raises the fence in the string, the value kept; on a key
     * with none, a fence alone ("<fence>"), read back as no value. */
    assert_int_equal(dlock_fenced_read(c, "fs:a", 9, &v, &len, &fence),
                     DLOCK_OK);
    assert_int_equal(fence, 9);
    assert_int_equal(len, 0);
    free(v);
    assert_raw("fs:a", 9, "", 0);
    assert_int_equal(lget(l, "fs:b", 4, &x), DLOCK_OK);
    assert_false(x.has);
    assert_raw("fs:b", 4, NULL, 0);
    assert_int_equal(bget(c, "fs:b", NULL, 0, 4), DLOCK_OK);
    assert_int_equal(lset(l, "fs:b", 4, BIN, BINLEN, &x), DLOCK_OK);
    assert_int_equal(dlock_fenced_read(c, "fs:b", 11, &v, &len, &fence),
                     DLOCK_OK);
    assert_int_equal(len, BINLEN);
    assert_memory_equal(v, BIN, BINLEN);
    free(v);
    assert_raw("fs:b", 11, BIN, BINLEN);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The store-and-release writes the same string, blocking and loop. */
static void test_set_release_form(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_lock *lk = NULL;
    dlock_hold *h = NULL;
    uint64_t tok;
    vseen x;
    (void)state;
    assert_int_equal(dlock_lock_acquire(&lk, c, "fs:lk", 0, 30000), DLOCK_OK);
    tok = dlock_lock_token(lk);
    assert_true(tok > 0);
    assert_int_equal(dlock_lock_fenced_set_release(lk, "fs:sr", BIN, BINLEN),
                     DLOCK_OK);
    assert_raw("fs:sr", tok, BIN, BINLEN);
    assert_int_equal(lget(l, "fs:sr", 0, &x), DLOCK_OK);
    assert_int_equal(x.fence, tok);
    assert_int_equal(x.vl, BINLEN);
    assert_int_equal(th_loop_lock(l, "fs:lk", NULL, &h), DLOCK_OK);
    memset(&x, 0, sizeof x);
    assert_int_equal(dlock_loop_fenced_set_release(NULL, l, h, "fs:sr", "loop",
                                                   4, vnote, &x),
                     DLOCK_OK);
    run1(l, &x.s.done);
    assert_int_equal(x.s.status, DLOCK_OK);
    assert_true(x.fence > tok);
    assert_raw("fs:sr", x.fence, "loop", 4);
    assert_int_equal(bget(c, "fs:sr", "loop", 4, x.fence), DLOCK_OK);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* The store-and-release's general path (a fence hash: fence retention;
 * the common case has its own path in s_set_release.lua): the same
 * string, the same refusals. */
static void test_set_release_retention(void **state)
{
    dlock_client *c = th_client_string(th_url(&srv), 60000);
    dlock_lock *lk = NULL;
    uint64_t tok;
    (void)state;
    assert_non_null(c);
    assert_int_equal(dlock_lock_acquire(&lk, c, "fs:rl", 0, 30000), DLOCK_OK);
    tok = dlock_lock_token(lk);
    assert_int_equal(dlock_lock_fenced_set_release(lk, "fs:rv", BIN, BINLEN),
                     DLOCK_OK);
    assert_raw("fs:rv", tok, BIN, BINLEN);
    assert_int_equal(bget(c, "fs:rv", BIN, BINLEN, tok), DLOCK_OK);
    th_cmd_int(&srv, "SET fs:rv %s", "9000000000000000 newer");
    assert_int_equal(dlock_lock_acquire(&lk, c, "fs:rl", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(lk, "fs:rv", "old", 3),
                     DLOCK_STALE);
    assert_raw("fs:rv", 9000000000000000ULL, "newer", 5);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fs:rl}"), 0);
    th_cmd_int(&srv, "HSET fs:rh value h fence 5");
    assert_int_equal(dlock_lock_acquire(&lk, c, "fs:rl", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(lk, "fs:rh", "s", 1),
                     DLOCK_EINVAL);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fs:rl}"), 0);
    assert_int_equal(th_cmd_int(&srv, "HLEN fs:rh"), 2);
    dlock_client_free(c);
}

/* A token older than the string's fence is refused everywhere (set,
 * read, store-and-release), nothing changed. */
static void test_stale_refused(void **state)
{
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_lock *lk = NULL;
    char *v = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    vseen x;
    (void)state;
    assert_int_equal(dlock_fenced_set(c, "fs:st", 100, "new", 3), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(c, "fs:st", 99, "old", 3), DLOCK_STALE);
    assert_int_equal(lset(l, "fs:st", 99, "old", 3, &x), DLOCK_STALE);
    assert_int_equal(dlock_fenced_read(c, "fs:st", 99, &v, &len, &fence),
                     DLOCK_STALE);
    assert_null(v);
    assert_int_equal(fence, 100);
    assert_int_equal(lget(l, "fs:st", 98, &x), DLOCK_STALE);
    assert_int_equal(x.fence, 100);
    assert_raw("fs:st", 100, "new", 3);
    /* A read with 200 fences out a write with 150. */
    assert_int_equal(lget(l, "fs:st", 200, &x), DLOCK_OK);
    assert_int_equal(lset(l, "fs:st", 150, "late", 4, &x), DLOCK_STALE);
    assert_int_equal(dlock_fenced_set(c, "fs:st", 150, "late", 4), DLOCK_STALE);
    assert_raw("fs:st", 200, "new", 3);
    /* The store-and-release of a hold whose token is older: refused,
     * released. Far above any token of the server's clock. */
    th_cmd_int(&srv, "SET fs:st2 %s", "9000000000000000 newer");
    assert_int_equal(dlock_lock_acquire(&lk, c, "fs:lk2", 0, 30000), DLOCK_OK);
    assert_int_equal(dlock_lock_fenced_set_release(lk, "fs:st2", "old", 3),
                     DLOCK_STALE);
    assert_raw("fs:st2", 9000000000000000ULL, "newer", 5);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fs:lk2}"), 0);
    dlock_loop_free(l);
    dlock_client_free(c);
}

/* A key of the other form: a hash-layout client's hash read or written by
 * a string-layout client, or a string not of the form: DLOCK_EINVAL with
 * a message naming the layouts, nothing overwritten (the store-and-
 * release still releases); the hash layout keeps its hash. */
static void test_other_form(void **state)
{
    dlock_client *hc = hash_client();
    dlock_client *c = string_client();
    dlock_loop *l = th_loop_new(c);
    dlock_lock *lk = NULL;
    dlock_hold *h = NULL;
    char *v = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    const char *keys[3] = {"fs:hash", "fs:plain", "fs:zero"};
    int i;
    vseen x;
    (void)state;
    assert_int_equal(dlock_fenced_set(hc, "fs:hash", 5, "h", 1), DLOCK_OK);
    {
        size_t n;
        char *t = raw("fs:hash", &n);
        assert_string_equal(t, "(hash)");
        free(t);
    }
    th_cmd_int(&srv, "SET fs:plain %s", "hello world");
    th_cmd_int(&srv, "SET fs:zero %s", "05 x");
    for (i = 0; i < 3; i++) {
        const char *k = keys[i];
        assert_int_equal(bget(c, k, NULL, 0, 0), DLOCK_EINVAL);
        assert_non_null(strstr(dlock_errmsg(c), "layout"));
        assert_int_equal(dlock_fenced_set(c, k, 6, "s", 1), DLOCK_EINVAL);
        assert_non_null(strstr(dlock_errmsg(c), "layout"));
        assert_int_equal(dlock_fenced_read(c, k, 6, &v, &len, &fence),
                         DLOCK_EINVAL);
        assert_null(v);
        assert_int_equal(lget(l, k, 0, &x), DLOCK_EINVAL);
        assert_non_null(strstr(x.s.err, "layout"));
        assert_int_equal(lget(l, k, 6, &x), DLOCK_EINVAL);
        assert_int_equal(lset(l, k, 6, "s", 1, &x), DLOCK_EINVAL);
        assert_int_equal(dlock_lock_acquire(&lk, c, "fs:lk3", 0, 30000),
                         DLOCK_OK);
        assert_int_equal(dlock_lock_fenced_set_release(lk, k, "s", 1),
                         DLOCK_EINVAL);
        assert_non_null(strstr(dlock_errmsg(c), "released"));
        assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fs:lk3}"), 0);
        assert_int_equal(th_loop_lock(l, "fs:lk3", NULL, &h), DLOCK_OK);
        memset(&x, 0, sizeof x);
        assert_int_equal(
            dlock_loop_fenced_set_release(NULL, l, h, k, "s", 1, vnote, &x),
            DLOCK_OK);
        run1(l, &x.s.done);
        assert_int_equal(x.s.status, DLOCK_EINVAL);
        assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{fs:lk3}"), 0);
    }
    /* Untouched: the hash's value and fence, the plain string. */
    assert_int_equal(bget(hc, "fs:hash", "h", 1, 5), DLOCK_OK);
    {
        size_t n;
        char *t = raw("fs:plain", &n);
        assert_string_equal(t, "hello world");
        free(t);
    }
    dlock_loop_free(l);
    dlock_client_free(c);
    dlock_client_free(hc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_set_release_form),
        cmocka_unit_test(test_set_release_retention),
        cmocka_unit_test(test_stale_refused),
        cmocka_unit_test(test_other_form),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
