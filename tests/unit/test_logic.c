/*
 * test_logic.c - pure logic, no server: the status table, backoff and
 * drift math, the number formatters, random numbers, the embedded scripts and their SHA1s, and
 * the option checks of dlock_client_new (which connects lazily, so it
 * needs no server either).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/step.h"
#include "base/util.h"

#ifndef DLOCK_SOURCE_DIR
#error "DLOCK_SOURCE_DIR must name the source tree"
#endif

static void test_status_table(void **state)
{
    static const int codes[] = {
#define X(name, value, text) value,
        DLOCK_STATUS_LIST(X)
#undef X
    };
    size_t i, j;
    (void)state;
    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        assert_string_not_equal(dlock_strerror(codes[i]), "unknown status");
        assert_string_not_equal(dlock_status_name(codes[i]), "UNKNOWN");
        for (j = 0; j < i; j++) {
            assert_int_not_equal(codes[i], codes[j]);
            assert_string_not_equal(dlock_status_name(codes[i]),
                                    dlock_status_name(codes[j]));
        }
    }
    assert_int_equal(DLOCK_OK, 0);
    assert_string_equal(dlock_status_name(DLOCK_NO_QUORUM), "NO_QUORUM");
    assert_string_equal(dlock_strerror(-999), "unknown status");
    assert_string_equal(dlock_status_name(1), "UNKNOWN");
    assert_string_equal(dlock_version(), DLOCK_VERSION);
}

static void test_backoff(void **state)
{
    int round, k;
    (void)state;
    for (round = 0; round < 20; round++) {
        int64_t d = 1;
        int i;
        for (i = 0; i < round && d < 128; i++)
            d *= 2;
        if (d > 128)
            d = 128;
        for (k = 0; k < 200; k++) {
            int64_t v = dlock__backoff_ms(1, 128, round);
            assert_true(v >= d / 2);
            assert_true(v <= d);
        }
    }
    /* Jitter: at the cap the values are not all equal. */
    {
        int64_t first = dlock__backoff_ms(1, 128, 10), v;
        int differ = 0;
        for (k = 0; k < 100 && !differ; k++) {
            v = dlock__backoff_ms(1, 128, 10);
            differ = v != first;
        }
        assert_true(differ);
    }
    /* A huge round count does not overflow. */
    assert_true(dlock__backoff_ms(5, 5, 1000000) <= 5);
}

static void test_drift(void **state)
{
    (void)state;
    /* Redlock's 1% + 2 ms. */
    assert_int_equal(dlock__drift_ms(10000, 10000, 2), 102);
    assert_int_equal(dlock__drift_ms(30000, 10000, 2), 302);
    assert_int_equal(dlock__drift_ms(1, 10000, 2), 2);
    assert_int_equal(dlock__drift_ms(1000, 0, 0), 0);
    /* A year's lease at 99.9999% does not overflow int64. */
    {
        int64_t year = 365LL * 24 * 3600 * 1000;
        int64_t d = dlock__drift_ms(year, 999999, 0);
        assert_true(d > 0 && d < year);
    }
}

/* dlock__fmt_u64 / dlock__fmt_i64 write what snprintf would, at every
 * digit count and both ends of the range. */
static void test_fmt_numbers(void **state)
{
    static const uint64_t u[] = {0,
                                 1,
                                 9,
                                 10,
                                 99,
                                 100,
                                 12345,
                                 4294967295u,
                                 4294967296u,
                                 9999999999999999999u,
                                 10000000000000000000u,
                                 UINT64_MAX};
    static const int64_t s[] = {0, -1, 9, -10, INT64_MAX, INT64_MIN};
    char got[32], want[32];
    uint64_t v;
    size_t i, n;
    (void)state;
    for (i = 0; i < sizeof u / sizeof u[0]; i++) {
        n = dlock__fmt_u64(got, u[i]);
        got[n] = '\0';
        snprintf(want, sizeof want, "%llu", (unsigned long long)u[i]);
        assert_string_equal(got, want);
    }
    for (v = 1; v != 0 && v <= UINT64_MAX / 10; v *= 10) {
        n = dlock__fmt_u64(got, v - 1);
        got[n] = '\0';
        snprintf(want, sizeof want, "%llu", (unsigned long long)(v - 1));
        assert_string_equal(got, want);
    }
    for (i = 0; i < sizeof s / sizeof s[0]; i++) {
        n = dlock__fmt_i64(got, s[i]);
        snprintf(want, sizeof want, "%lld", (long long)s[i]);
        assert_string_equal(got, want);
        assert_int_equal(n, strlen(want));
    }
}

/* dlock__room: the same array while there is room, first elements at
 * the first growth, doubled at each next, the contents kept. */
static void test_room(void **state)
{
    int *a = NULL, *p, cap = 0, n;
    (void)state;
    for (n = 0; n < 100; n++) {
        p = dlock__room(a, &cap, n, sizeof *a, 4);
        assert_non_null(p);
        assert_true(n < cap);
        assert_true(cap == 4 || cap == 8 || cap == 16 || cap == 32 ||
                    cap == 64 || cap == 128);
        a = p;
        a[n] = n;
        if (n > 0 && n < 4)
            assert_ptr_equal(dlock__room(a, &cap, n, sizeof *a, 4), a);
    }
    for (n = 0; n < 100; n++)
        assert_int_equal(a[n], n);
    assert_int_equal(cap, 128);
    free(a);
}

static void test_random(void **state)
{
    unsigned char a[16] = {0}, b[16] = {0};
    int counts[4] = {0}, i;
    (void)state;
    assert_int_equal(dlock__random_bytes(a, sizeof a), 0);
    assert_int_equal(dlock__random_bytes(b, sizeof b), 0);
    assert_memory_not_equal(a, b, sizeof a);
    for (i = 0; i < 4000; i++) {
        uint64_t v = dlock__random_below(4);
        assert_true(v < 4);
        counts[v]++;
    }
    for (i = 0; i < 4; i++)
        assert_true(counts[i] > 700); /* expected 1000 each */
    assert_int_equal(dlock__random_below(1), 0);
    assert_int_equal(dlock__random_below(0), 0);
}

static void test_sleep_until(void **state)
{
    int64_t t0 = dlock__now_ms();
    (void)state;
    assert_int_equal(dlock__sleep_until(t0 + 30, -1), 0);
    assert_true(dlock__now_ms() >= t0 + 30);
    assert_int_equal(dlock__sleep_until(t0 - 5, -1), 0);
}

/* The text of src/lua/NAME (with its pieces put in, as
 * cmake/embed_lua.cmake does: a line "--@include PIECE" is replaced by the
 * text of src/lua/PIECE), malloc'ed. */
static char *script_text(const char *name, int depth)
{
    char path[512];
    FILE *f;
    long n;
    char *buf, *out, *p, *line;
    size_t cap, len = 0;
    assert_true(depth <= 4);
    snprintf(path, sizeof path, "%s/src/lua/%s", DLOCK_SOURCE_DIR, name);
    f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    cap = (size_t)n + 1;
    out = calloc(1, cap);
    assert_non_null(out);
    for (line = buf; *line != '\0'; line = p) {
        const char *tag = "--@include ";
        char *nl = strchr(line, '\n'), *piece = NULL, *at = strstr(line, tag);
        size_t keep;
        p = nl != NULL ? nl + 1 : line + strlen(line);
        keep = (size_t)(p - line);
        if (at != NULL && at < p && nl != NULL) {
            *nl = '\0';
            piece = script_text(at + strlen(tag), depth + 1);
            *nl = '\n';
            keep = (size_t)(at - line);
        }
        cap += piece != NULL ? strlen(piece) : 0;
        out = realloc(out, cap);
        assert_non_null(out);
        memcpy(out + len, line, keep);
        len += keep;
        if (piece != NULL) {
            memcpy(out + len, piece, strlen(piece));
            len += strlen(piece);
            free(piece);
        }
        out[len] = '\0';
    }
    free(buf);
    return out;
}

/* The embedded text is the file's text with its pieces, byte for byte. */
static void check_embedded(const char *name, const char *embedded)
{
    char file[128];
    char *text;
    snprintf(file, sizeof file, "%s.lua", name);
    text = script_text(file, 0);
    assert_string_equal(text, embedded);
    free(text);
}

static void test_scripts_embedded(void **state)
{
    char sha[41];
    (void)state;
    check_embedded("acquire", dlock__lua_acquire);
    check_embedded("release", dlock__lua_release);
    check_embedded("extend", dlock__lua_extend);
    check_embedded("fence_raise", dlock__lua_fence_raise);
    check_embedded("fenced_set", dlock__lua_fenced_set);
    check_embedded("fenced_get", dlock__lua_fenced_get);
    check_embedded("inspect", dlock__lua_inspect);
    check_embedded("fair_leave", dlock__lua_fair_leave);
    check_embedded("sem_release", dlock__lua_sem_release);
    /* SHA1("return 1"), as Redis's SCRIPT LOAD reports it. */
    dlock__sha1_hex("return 1", sha);
    assert_string_equal(sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
}

static int new_client(dlock_options *o, char *err, size_t len)
{
    dlock_client *c = NULL;
    int rc = dlock_client_new(&c, o, err, len);
    if (rc == DLOCK_OK) {
        assert_non_null(c);
        assert_int_equal(strlen(dlock_client_id(c)), 32);
        dlock_client_free(c);
    } else {
        assert_null(c);
        assert_true(strlen(err) > 0);
    }
    return rc;
}

static void test_options(void **state)
{
    const char *one[] = {"redis://127.0.0.1:1"};
    const char *five[] = {"redis://127.0.0.1:1", "redis://127.0.0.1:2",
                          "redis://127.0.0.1:3", "redis://127.0.0.1:4",
                          "redis://127.0.0.1:5"};
    const char *nullsrv[] = {NULL};
    dlock_options o;
    char err[256];
    (void)state;
    dlock_options_init(&o);
    assert_int_equal(o.version, DLOCK_OPTIONS_VERSION);
    assert_int_equal(o.wait_strategy, DLOCK_WAIT_FAIR);
    assert_int_equal(o.spin_min_ms, 1);
    assert_int_equal(o.spin_max_ms, 128);
    assert_string_equal(o.key_prefix, "dlock");
    o.servers = one;
    o.nservers = 1;
    /* No server runs there: creating a client does not connect. */
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_OK);
    o.servers = five;
    o.nservers = 5;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_OK);
    /* Fair (the default) works with Redlock too; every strategy does. */
    o.wait_strategy = DLOCK_WAIT_NOTIFY;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_OK);
    o.wait_strategy = (dlock_wait_strategy)7;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    assert_non_null(strstr(err, "wait_strategy"));
    dlock_options_init(&o);
    o.servers = nullsrv;
    o.nservers = 1;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    o.servers = one;
    o.key_prefix = "a{b";
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    o.key_prefix = "";
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.command_timeout_ms = 0;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.spin_min_ms = 10;
    o.spin_max_ms = 5;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.pool_size = 0;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.wait_strategy = (dlock_wait_strategy)42;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.tls_cert_file = "/x.pem";
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    dlock_options_init(&o);
    o.servers = one;
    o.nservers = 1;
    o.version = 99;
    assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
    /* The password never shows in a message about its URL. */
    {
        const char *bad[] = {"redis://user:hunter2@[::1"};
        dlock_options_init(&o);
        o.servers = bad;
        o.nservers = 1;
        assert_int_equal(new_client(&o, err, sizeof err), DLOCK_EINVAL);
        assert_null(strstr(err, "hunter2"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_drift),
        cmocka_unit_test(test_fmt_numbers),
        cmocka_unit_test(test_room),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_sleep_until),
        cmocka_unit_test(test_scripts_embedded),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
