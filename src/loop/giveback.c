/*
 * giveback.c - the give-back of what a failed or cancelled acquire on
 * the loop's own connection may hold (ops.c's op_abort and answers whose
 * op went away): release.lua, fair_leave.lua, the writer's mark, a
 * permit's leave; requests nobody waits for.
 */
#include <string.h>

#include "hold/kind.h"
#include "hold/held.h"
#include "loop/loop_impl.h"

/* The answer to an acquire whose op went away: give back what it got. */
void dloop__gb_acquire_reply(dlock_loop *l, void *ctx, int rc,
                             const redisReply *r, const char *err, int sent)
{
    dlock_hold *h = ctx;
    (void)err;
    if (rc != DLOCK_OK) {
        if (sent)
            dloop__giveback_release(l, h, 1, 0);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
               dlock__elem_int(r, 0) == 1) {
        dloop__giveback_release(l, h, (int)dlock__elem_int(r, 2),
                                (uint64_t)dlock__elem_int(r, 1));
    } else if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0) {
        /* A plain SET NX PX's grant (lazy token, kind.h): depth 1, its
         * token not issued (a release of another's name changes
         * nothing). */
        dloop__giveback_release(l, h, 1, 0);
    }
    dloop__hold_unref(h);
}

/* fair_leave.lua's answer: {1, token} the lock was handed to us: pass it
 * on. */
void dloop__gb_leave_reply(dlock_loop *l, void *ctx, int rc,
                           const redisReply *r, const char *err, int sent)
{
    dlock_hold *h = ctx;
    (void)err;
    (void)sent;
    if (rc == DLOCK_OK && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        dlock__elem_int(r, 0) == 1)
        dloop__giveback_release(l, h, 1, (uint64_t)dlock__elem_int(r, 1));
    dloop__hold_unref(h);
}

static void gb_done(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                    const char *err, int sent)
{
    (void)l;
    (void)rc;
    (void)r;
    (void)err;
    (void)sent;
    dloop__hold_unref(ctx);
}

/* See loop_impl.h. */
int dloop__send_release(dlock_loop *l, dlock_hold *h, int depth, uint64_t token,
                        lreq_fn fn, void *ctx, lreq **out)
{
    dlock__cmdbuf b;
    char relid[64];
    dlock__release r;
    memset(&r, 0, sizeof r);
    r.owner = h->owner;
    r.depth = depth;
    r.token = token;
    r.relid = relid;
    r.relidlen = dlock__request_id(l->c, relid);
    dlock__kind_of(h->k.kind)->release_cmd(&b, l->c, &h->k, &r);
    return dloop__send_cmd(l, &b.cmd, fn, ctx, out);
}

void dloop__giveback_release(dlock_loop *l, dlock_hold *h, int depth,
                             uint64_t token)
{
    h->refs++;
    if (dloop__send_release(l, h, depth < 1 ? 1 : depth, token, gb_done, h,
                            NULL) != DLOCK_OK)
        h->refs--;
}

void dloop__giveback(dlock_loop *l, dlock_hold *h, uint64_t token)
{
    dloop__giveback_release(l, h, 1, token);
}

void dloop__giveback_leave(dlock_loop *l, dlock_hold *h)
{
    const char *keys[4] = {h->k.key, h->k.fkey, h->k.qkey, h->k.qtkey};
    size_t kl[4] = {h->k.keylen, h->k.fkeylen, h->k.qkeylen, h->k.qtkeylen};
    const char *args[1] = {h->owner};
    size_t al[1] = {strlen(h->owner)};
    h->refs++;
    if (dloop__send(l, DLOCK__S_FAIR_LEAVE, 4, keys, kl, 1, args, al,
                    dloop__gb_leave_reply, h, NULL) != DLOCK_OK)
        h->refs--;
}

/* A waiting writer gives up: rw_leave.lua takes its mark (which keeps
 * new readers out) with it; harmless where it set none. */
void dloop__writer_leave(dlock_loop *l, dlock_hold *h)
{
    char id[64];
    const char *args[4] = {h->owner, h->k.chan, id, "0"};
    size_t al[4] = {strlen(h->owner), h->k.chanlen, 0, 1};
    al[2] = dlock__request_id(l->c, id);
    h->refs++;
    if (dloop__send(l, DLOCK__S_RW_LEAVE, 1, (const char **)&h->k.key,
                    &h->k.keylen, 4, args, al, gb_done, h, NULL) != DLOCK_OK)
        h->refs--;
}

/* A permit's give-back: sem_release.lua leaving the queue too. */
void dloop__sem_leave(dlock_loop *l, dlock_hold *h)
{
    const char *keys[4] = {h->k.key, h->k.fkey, h->k.qkey, h->k.qtkey};
    size_t kl[4] = {h->k.keylen, h->k.fkeylen, h->k.qkeylen, h->k.qtkeylen};
    char ho[24], ret[24];
    const char *args[6] = {h->owner, h->k.chan, ho, "1", ret, "1"};
    size_t al[6] = {strlen(h->owner), h->k.chanlen, 0, 1, 0, 1};
    al[2] = dlock__fmt_i64(ho, DLOCK__FAIR_HANDOFF_MS);
    al[4] = dlock__fmt_i64(ret, DLOCK__FENCE_RETENTION_MS);
    h->refs++;
    if (dloop__send(l, DLOCK__S_SEM_RELEASE, 4, keys, kl, 6, args, al, gb_done,
                    h, NULL) != DLOCK_OK)
        h->refs--;
}

/* The answer to a permit's attempt whose op went away: leave (which
 * also gives back a permit granted or handed), unless it was refused
 * before it could have run. */
void dloop__gb_sem_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                         const char *err, int sent)
{
    dlock_hold *h = ctx;
    (void)r;
    (void)err;
    if (rc == DLOCK_OK || sent)
        dloop__sem_leave(l, h);
    dloop__hold_unref(h);
}
