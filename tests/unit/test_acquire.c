/*
 * test_acquire.c - the decision of an acquire attempt, without servers:
 * the tally of the nodes' answers, the verdict (grants, lost replies,
 * quorum, validity, our earlier hold expired) and the nodes an attempt
 * that failed must give back (src/hold/verdict.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hold/verdict.h"
#include "fake_reply.h"

/* Node results: a reply, or a failure that was (not) sent. */
static void answered(dlock__result *r, redisReply *rep)
{
    memset(r, 0, sizeof *r);
    r->status = DLOCK_OK;
    r->reply = rep;
    r->sent = 1;
}

static void failed(dlock__result *r, int status, int sent)
{
    memset(r, 0, sizeof *r);
    r->status = status;
    r->sent = sent;
}

static void test_single_grant(void **state)
{
    fake f;
    dlock__result res[1];
    dlock__tally t;
    (void)state;
    answered(&res[0], ints(&f, 3, 1, 42, 1));
    dlock__acquire_tally(&t, res, 1);
    assert_int_equal(t.granted, 1);
    assert_int_equal(t.gmask, 1);
    assert_int_equal(t.tmax, 42);
    assert_int_equal(t.depth, 1);
    assert_false(t.tokens_differ);
    assert_int_equal(t.pttl, -1);
    assert_int_equal(dlock__acquire_verdict(&t, 1, 0, 100), DLOCK__V_GRANTED);
    /* The answer came after the lease was used up: not a success. */
    assert_int_equal(dlock__acquire_verdict(&t, 1, 0, 0), DLOCK__V_TOO_LATE);
    assert_int_equal(dlock__acquire_undo_mask(&t, DLOCK__V_TOO_LATE, 1, 0), 1);
}

/* A plain SET NX PX's OK (the string layout's fresh acquire) is a grant
 * of depth 1 with its token not issued yet; the same OK answering a
 * script (a peer that is not Redis) is of the wrong shape. */
static void test_plain_grant(void **state)
{
    redisReply ok;
    dlock__result res[1];
    dlock__tally t;
    (void)state;
    memset(&ok, 0, sizeof ok);
    ok.type = REDIS_REPLY_STATUS;
    ok.str = "OK";
    ok.len = 2;
    answered(&res[0], &ok);
    dlock__acquire_tally_as(&t, res, 1, 1);
    assert_int_equal(t.granted, 1);
    assert_int_equal(t.tmax, 0);
    assert_int_equal(t.depth, 1);
    assert_int_equal(dlock__acquire_verdict(&t, 1, 0, 100), DLOCK__V_GRANTED);
    dlock__acquire_tally(&t, res, 1);
    assert_int_equal(t.granted, 0);
    assert_int_equal(t.bad, 1);
    assert_int_equal(dlock__acquire_verdict(&t, 1, 0, 100), DLOCK__V_FAILED);
}

static void test_single_busy(void **state)
{
    fake f;
    dlock__result res[1];
    dlock__tally t;
    dlock__verdict v;
    (void)state;
    answered(&res[0], ints(&f, 2, 0, 1500, 0));
    dlock__acquire_tally(&t, res, 1);
    assert_int_equal(t.busy, 1);
    assert_int_equal(t.pttl, 1500);
    v = dlock__acquire_verdict(&t, 1, 0, 100);
    assert_int_equal(v, DLOCK__V_BUSY);
    /* One server that said busy took nothing. */
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 1, 0), 0);
}

static void test_single_lost_reply(void **state)
{
    dlock__result res[1];
    dlock__tally t;
    dlock__verdict v;
    (void)state;
    /* Sent, no answer: it may have been applied, so it is given back. */
    failed(&res[0], DLOCK_ETIMEDOUT, 1);
    dlock__acquire_tally(&t, res, 1);
    v = dlock__acquire_verdict(&t, 1, 0, 100);
    assert_int_equal(v, DLOCK__V_FAILED);
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 1, 0), 1);
    /* Never sent (refused connect): nothing to give back. */
    failed(&res[0], DLOCK_EIO, 0);
    dlock__acquire_tally(&t, res, 1);
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 1, 0), 0);
    /* A reentrant attempt that got nothing must not release the level
     * we already hold. */
    failed(&res[0], DLOCK_ETIMEDOUT, 1);
    dlock__acquire_tally(&t, res, 1);
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 1, 1), 0);
}

static void test_reentry_expired(void **state)
{
    fake f;
    dlock__result res[1];
    dlock__tally t;
    dlock__verdict v;
    (void)state;
    answered(&res[0], ints(&f, 2, -1, 0, 0));
    dlock__acquire_tally(&t, res, 1);
    assert_int_equal(t.gone, 1);
    v = dlock__acquire_verdict(&t, 1, 2, 100);
    assert_int_equal(v, DLOCK__V_NOT_OWNER);
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 1, 2), 0);
}

static void test_redlock_quorum(void **state)
{
    fake f[5];
    dlock__result res[5];
    dlock__tally t;
    dlock__verdict v;
    (void)state;
    answered(&res[0], ints(&f[0], 3, 1, 10, 1));
    answered(&res[1], ints(&f[1], 3, 1, 12, 1));
    answered(&res[2], ints(&f[2], 3, 1, 11, 1));
    answered(&res[3], ints(&f[3], 2, 0, 800, 0));
    failed(&res[4], DLOCK_ETIMEDOUT, 1);
    dlock__acquire_tally(&t, res, 5);
    assert_int_equal(t.granted, 3);
    assert_int_equal(t.gmask, 0x7);
    assert_int_equal(t.tmax, 12);
    assert_true(t.tokens_differ); /* the fencing step must raise them */
    assert_int_equal(t.unknown, 0x10);
    assert_int_equal(dlock__acquire_verdict(&t, 3, 0, 50), DLOCK__V_GRANTED);
    /* Too late with a busy node: the order of the checks makes it BUSY
     * (the caller waits and retries), not NO_QUORUM. */
    v = dlock__acquire_verdict(&t, 3, 0, -1);
    assert_int_equal(v, DLOCK__V_BUSY);
    /* Either way every grant and the unanswered node are given back. */
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 5, 0), 0x17);
    answered(&res[3], ints(&f[3], 3, 1, 12, 1));
    dlock__acquire_tally(&t, res, 5);
    v = dlock__acquire_verdict(&t, 3, 0, -1);
    assert_int_equal(v, DLOCK__V_TOO_LATE);
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 5, 0), 0x1f);
}

static void test_redlock_split_and_short(void **state)
{
    fake f[5];
    dlock__result res[5];
    dlock__tally t;
    dlock__verdict v;
    (void)state;
    /* Two grants, one busy, two lost: with the lost ones the lock might
     * be ours, but busy + grants reach a quorum: another owner holds it
     * on enough nodes for nobody to win now. */
    answered(&res[0], ints(&f[0], 3, 1, 5, 1));
    answered(&res[1], ints(&f[1], 3, 1, 5, 1));
    answered(&res[2], ints(&f[2], 2, 0, 300, 0));
    failed(&res[3], DLOCK_ETIMEDOUT, 1);
    failed(&res[4], DLOCK_EIO, 0);
    dlock__acquire_tally(&t, res, 5);
    assert_false(t.tokens_differ);
    v = dlock__acquire_verdict(&t, 3, 0, 100);
    assert_int_equal(v, DLOCK__V_BUSY);
    /* With several nodes a busy verdict still gives back the partial
     * grants and the node that may have applied it (not the refused). */
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 5, 0), 0xb);
    /* Two grants and three failures: too few answers. */
    failed(&res[2], DLOCK_EIO, 1);
    dlock__acquire_tally(&t, res, 5);
    v = dlock__acquire_verdict(&t, 3, 0, 100);
    assert_int_equal(v, DLOCK__V_FAILED);
    assert_int_equal(dlock__acquire_undo_mask(&t, v, 5, 0), 0xf);
}

static void test_malformed_reply(void **state)
{
    fake f[3];
    dlock__result res[3];
    dlock__tally t;
    (void)state;
    answered(&res[0], ints(&f[0], 3, 1, 9, 1));
    answered(&res[1], ints(&f[1], 1, 7, 0, 0)); /* {7}: not ours */
    answered(&res[2], ints(&f[2], 2, 1, 9, 0)); /* grant without depth */
    dlock__acquire_tally(&t, res, 3);
    assert_int_equal(t.granted, 1);
    assert_int_equal(t.bad, 0x6);
    /* A wrong-shaped reply may still mean the script ran: undo there. */
    assert_int_equal(t.unknown, 0x6);
    assert_int_equal(dlock__acquire_verdict(&t, 2, 0, 100), DLOCK__V_FAILED);
    assert_int_equal(dlock__acquire_undo_mask(&t, DLOCK__V_FAILED, 3, 0), 0x7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_grant),
        cmocka_unit_test(test_plain_grant),
        cmocka_unit_test(test_single_busy),
        cmocka_unit_test(test_single_lost_reply),
        cmocka_unit_test(test_reentry_expired),
        cmocka_unit_test(test_redlock_quorum),
        cmocka_unit_test(test_redlock_split_and_short),
        cmocka_unit_test(test_malformed_reply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
