/*
 * fake_reply.h - hiredis replies built by hand for the unit tests of the
 * acquire decision (test_acquire.c, test_hold.c): a few integer arrays
 * per test. Static definitions in a header, included once per test.
 */
#ifndef DLOCK_TEST_FAKE_REPLY_H
#define DLOCK_TEST_FAKE_REPLY_H

#include <hiredis/hiredis.h>
#include <string.h>

typedef struct fake {
    redisReply arr;
    redisReply el[3];
    redisReply *ptrs[3];
} fake;

/* An array reply of n integers. */
static redisReply *ints(fake *f, int n, long long a, long long b, long long c)
{
    long long v[3] = {a, b, c};
    int i;
    memset(f, 0, sizeof *f);
    f->arr.type = REDIS_REPLY_ARRAY;
    f->arr.elements = (size_t)n;
    f->arr.element = f->ptrs;
    for (i = 0; i < n; i++) {
        f->el[i].type = REDIS_REPLY_INTEGER;
        f->el[i].integer = v[i];
        f->ptrs[i] = &f->el[i];
    }
    return &f->arr;
}

#endif /* DLOCK_TEST_FAKE_REPLY_H */
