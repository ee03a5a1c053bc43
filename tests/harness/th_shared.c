/*
 * th_shared.c - taking and counting permits and readers in the
 * replication tests (see th_shared.h for each one's contract).
 */
#include "th_shared.h"

#include <stdio.h>
#include <stdlib.h>

int th_shared_take(dlock_lock **l, dlock_client *c, const char *name, int rw,
                   int64_t limit, int64_t wait_ms, int64_t lease_ms)
{
    dlock_acquire_options o;
    dlock_acquire_options_init(&o);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    *l = NULL;
    return rw ? dlock_rw_acquire_shared(l, c, name, 0, &o)
              : dlock_sem_acquire(l, c, name, limit, &o);
}

int th_permit1_acquire(dlock_lock **l, dlock_client *c, const char *name,
                       int64_t wait_ms, int64_t lease_ms)
{
    return th_shared_take(l, c, name, 0, 1, wait_ms, lease_ms);
}

int th_reader_acquire(dlock_lock **l, dlock_client *c, const char *name,
                      int64_t wait_ms, int64_t lease_ms)
{
    return th_shared_take(l, c, name, 1, 0, wait_ms, lease_ms);
}

/* The plain lock in th_acquire_fn's shape (a write lock as the blocker of
 * readers, too). */
static int lock_acquire(dlock_lock **l, dlock_client *c, const char *name,
                        int64_t wait_ms, int64_t lease_ms)
{
    *l = NULL;
    return dlock_lock_acquire(l, c, name, wait_ms, lease_ms);
}

const th_kind th_kinds[TH_NKINDS] = {
    {"lock", lock_acquire, lock_acquire, 1, -1},
    {"permit", th_permit1_acquire, th_permit1_acquire, 0, 0},
    {"reader", th_reader_acquire, lock_acquire, 1, 1},
};

long long th_shared_held(const th_server *s, const char *name, int rw)
{
    redisContext *ctx = redisConnect("127.0.0.1", s->port);
    redisReply *r;
    long long now, n = -1;
    if (ctx == NULL || ctx->err) {
        fprintf(stderr, "th_shared_held: connect to %d: %s\n", s->port,
                ctx != NULL ? ctx->errstr : "out of memory");
        if (ctx != NULL)
            redisFree(ctx);
        return -1;
    }
    r = redisCommand(ctx, "READONLY"); /* an error outside a Cluster */
    if (r != NULL)
        freeReplyObject(r);
    r = redisCommand(ctx, "TIME");
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        fprintf(stderr, "th_shared_held: TIME on %d: no answer\n", s->port);
        if (r != NULL)
            freeReplyObject(r);
        redisFree(ctx);
        return -1;
    }
    now = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    r = redisCommand(ctx,
                     rw ? "ZCOUNT dlock:{%s}:r %lld +inf"
                        : "ZCOUNT dlock:{%s} %lld +inf",
                     name, now);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        n = r->integer;
    else
        fprintf(stderr, "th_shared_held: ZCOUNT on %d: %s\n", s->port,
                r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
                                                          : "no answer");
    if (r != NULL)
        freeReplyObject(r);
    redisFree(ctx);
    return n;
}
