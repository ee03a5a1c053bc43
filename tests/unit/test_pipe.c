/*
 * test_pipe.c - unit test of a pipe's bookkeeping (src/io/pipe.c) that
 * needs no connection: the FIFO's places (an entry is found at its place
 * until read; a place read or emptied holds nobody), the orphan test of
 * the quiet rule, the one NOSCRIPT rule over the entries' places, a
 * packed request. What goes over a socket (WAIT shared, replies handed
 * out, a failure told) is tested against real servers: it.loop_lanes,
 * it.loop_lock, it.loop_replicated.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/pipe.h"

static const dlock__pipe_ops no_ops = {NULL, NULL, NULL, NULL};

/* A blank pipe with n entries pushed (who: &who[i]), their places in
 * pos[]. */
static void fill(dlock__pipe *p, int *who, int n, int *pos)
{
    int i;
    dlock__pipe_init(p, NULL, &no_ops, NULL);
    for (i = 0; i < n; i++)
        assert_int_equal(
            dlock__pipe_push(
                p, (dlock__pentry){.who = &who[i], .a = i, .due = 100 + i},
                &pos[i]),
            DLOCK_OK);
}

/* Read the oldest entry as dlock__pipe_collect does (its seq is the one
 * the NOSCRIPT rule judges). */
static dlock__pentry take(dlock__pipe *p)
{
    dlock__pentry e = p->q[p->qhead++];
    p->taking = e.seq;
    return e;
}

static void test_places(void **state)
{
    dlock__pipe p;
    int who[40], pos[40], i;
    (void)state;
    fill(&p, who, 40, pos);
    assert_false(dlock__pipe_idle(&p));
    for (i = 0; i < 40; i++) {
        dlock__pentry *e = dlock__pipe_at(&p, pos[i]);
        assert_non_null(e);
        assert_ptr_equal(e->who, &who[i]);
        assert_int_equal(e->seq, (uint64_t)i + 1);
    }
    (void)take(&p);
    assert_null(dlock__pipe_at(&p, pos[0])); /* read: nobody's */
    while (p.qhead < p.qlen)
        (void)take(&p);
    assert_true(dlock__pipe_idle(&p));
    /* Emptied: the places start again, the order numbers do not. */
    assert_int_equal(
        dlock__pipe_push(&p, (dlock__pentry){.who = &who[0]}, &pos[0]),
        DLOCK_OK);
    assert_int_equal(pos[0], 0);
    assert_int_equal(dlock__pipe_at(&p, 0)->seq, 41);
    dlock__pipe_close(&p);
}

static void test_orphan(void **state)
{
    dlock__pipe p;
    int who[2], pos[2];
    (void)state;
    fill(&p, who, 2, pos);
    assert_false(dlock__pipe_orphan_due(&p, 1000)); /* owned */
    dlock__pipe_at(&p, pos[0])->who = NULL;         /* dropped */
    assert_false(dlock__pipe_orphan_due(&p, 99));   /* not due yet */
    assert_true(dlock__pipe_orphan_due(&p, 100));
    (void)take(&p);
    assert_false(dlock__pipe_orphan_due(&p, 1000)); /* the next: owned */
    dlock__pipe_close(&p);
    dlock__pipe_init(&p, NULL, &no_ops, NULL);
    assert_false(dlock__pipe_orphan_due(&p, 1000)); /* empty */
}

/* Five requests of script 3 out by SHA, the cache flushed: the first
 * NOSCRIPT goes with the source, the four behind it by SHA behind that
 * source; one of those answered NOSCRIPT again (flushed once more) goes
 * with the source; a request written after a source and answered
 * NOSCRIPT (flushed after it) goes with the source. Another script has
 * its own rule. */
static void test_noscript_rule(void **state)
{
    dlock__pipe p;
    int who[5], pos[5], i;
    uint64_t src;
    (void)state;
    fill(&p, who, 5, pos);
    assert_false(dlock__pipe_has_source(&p, 3));
    (void)take(&p);
    assert_int_equal(dlock__pipe_noscript(&p, 3, 0), 0); /* the source */
    assert_true(dlock__pipe_has_source(&p, 3));
    src = p.nseq + 1;
    assert_int_equal(
        dlock__pipe_push(&p, (dlock__pentry){.who = &who[0]}, NULL),
        DLOCK_OK); /* its resend, with the source */
    assert_int_equal(p.q[p.qlen - 1].seq, src);
    for (i = 1; i < 5; i++) {
        (void)take(&p);
        assert_int_equal(dlock__pipe_noscript(&p, 3, 0), 1); /* by SHA */
        assert_int_equal(dlock__pipe_noscript(&p, 7, 0), i == 1 ? 0 : 1);
    }
    /* Written after the source, answered NOSCRIPT: flushed after it. */
    assert_int_equal(
        dlock__pipe_push(&p, (dlock__pentry){.who = &who[1]}, NULL), DLOCK_OK);
    while (p.qhead < p.qlen)
        (void)take(&p);
    assert_true(p.taking > src);
    assert_int_equal(dlock__pipe_noscript(&p, 3, 0), 0);
    /* A resend by SHA answered NOSCRIPT again: with its source, even
     * with a source written after it. */
    p.taking = 1;
    assert_int_equal(dlock__pipe_noscript(&p, 3, 1), 0);
    dlock__pipe_close(&p);
    assert_false(dlock__pipe_has_source(&p, 3)); /* a new connection */
}

/* A packed request: argc, then each argument's length and bytes, the
 * source's pointer first (EVAL form when resent). */
static void test_pack(void **state)
{
    const char *argv[4] = {"EVALSHA", "abc", "1", "key"};
    size_t lens[4] = {7, 3, 1, 3};
    const char *src = "return 1", *got;
    char *r = dlock__pipe_pack(src, 4, argv, lens), *w;
    size_t len;
    int argc, i;
    (void)state;
    assert_non_null(r);
    memcpy(&got, r, sizeof got);
    assert_ptr_equal(got, src);
    memcpy(&argc, r + sizeof got, sizeof argc);
    assert_int_equal(argc, 4);
    for (w = r + sizeof got + sizeof argc, i = 0; i < 4; i++) {
        memcpy(&len, w, sizeof len);
        assert_int_equal(len, lens[i]);
        assert_memory_equal(w + sizeof len, argv[i], len);
        w += sizeof len + len;
    }
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_places),
        cmocka_unit_test(test_orphan),
        cmocka_unit_test(test_noscript_rule),
        cmocka_unit_test(test_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
