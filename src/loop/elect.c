/*
 * elect.c - leader election through a loop (include/dlock_loop.h), with
 * dlock_campaign's model: campaigning is acquiring the lock NAME, the
 * epoch is the hold's token, the leader writes its value into
 * "<prefix>:{NAME}:l" (elect_proclaim.lua, which announces it on the
 * lock's channel); who leads is read by elect_leader.lua.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/held.h"
#include "loop/loop_impl.h"

/* "<key>:l" of hold h's name, into buf (DLOCK_KEY_MAX + 64 bytes). */
static size_t leader_key(const dlock__keys *k, char *buf)
{
    memcpy(buf, k->key, k->keylen);
    memcpy(buf + k->keylen, ":l", 3);
    return k->keylen + 2;
}

static void proclaim_reply(dlock_loop *l, void *ctx, int rc,
                           const redisReply *r, const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock_hold *h = op->hold;
    (void)sent;
    op->req = NULL;
    if (rc == DLOCK_OK && r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        dloop__complete(op, DLOCK_OK, "%s", "");
        return;
    }
    if (rc == DLOCK_OK)
        rc = DLOCK_NOT_OWNER;
    if (op->type == OP_LOCK) {
        /* A campaign that won but could not proclaim gives the lock back:
         * the caller gets no hold. */
        if (l->engine) {
            dloop__mn_giveback(l, h);
        } else {
            h->gone = 1;
            h->renew = 0;
            dloop__giveback(l, h, h->token);
        }
        op->hold = NULL;
        dloop__hold_unref(h);
    }
    dloop__complete(op, rc, "proclaim: %s",
                    rc == DLOCK_NOT_OWNER ? "the lock is no longer ours" : err);
}

/* Send elect_proclaim.lua for hold h with value (len bytes) for op. */
int dloop__proclaim(dlock_op *op, dlock_hold *h, const char *value, size_t len)
{
    char lkey[DLOCK_KEY_MAX + 64], ep[24], keep[24];
    const char *keys[2] = {h->k.key, lkey};
    size_t kl[2] = {h->k.keylen, 0};
    /* A cluster's waiters listen on sharded channels: SPUBLISH. */
    int sharded = op->loop->c->ns.cluster != NULL;
    const char *args[6] = {h->owner, ep,        value != NULL ? value : "",
                           keep,     h->k.chan, sharded ? "1" : "0"};
    size_t al[6] = {strlen(h->owner), 0, len, 0, h->k.chanlen, 1};
    kl[1] = leader_key(&h->k, lkey);
    al[1] = dlock__fmt_u64(ep, h->token);
    al[3] = dlock__fmt_i64(keep, DLOCK__FENCE_RETENTION_MS);
    op->state = ST_OUT;
    return dloop__op_send(op, DLOCK__S_ELECT_PROCLAIM, 2, keys, kl, 6, args, al,
                          proclaim_reply);
}

int dlock_loop_campaign(dlock_op **out, dlock_loop *l, const char *name,
                        const char *value, const dlock_loop_acquire *opts,
                        dlock_op_cb cb, void *userdata)
{
    dlock_op *op = NULL;
    size_t len = value != NULL ? strlen(value) : 0;
    char *copy;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (dlock__layout_refuse(l->c, "elections") != DLOCK_OK)
        return DLOCK_EINVAL;
    if (len > DLOCK_VALUE_MAX)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "dlock_loop_campaign: the value is longer "
                                "than %d bytes",
                                DLOCK_VALUE_MAX);
    copy = malloc(len + 1); /* first: nothing to undo if it fails */
    if (copy == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    memcpy(copy, value != NULL ? value : "", len + 1);
    rc = dlock_loop_lock(&op, l, name, opts, cb, userdata);
    if (rc != DLOCK_OK) {
        free(copy);
        return rc;
    }
    op->proclaim = dloop__proclaim;
    op->key = copy; /* freed with the op */
    op->keylen = len;
    if (out != NULL)
        *out = op;
    return DLOCK_OK;
}

int dlock_loop_proclaim(dlock_op **out, dlock_loop *l, dlock_hold *h,
                        const char *value, dlock_op_cb cb, void *userdata)
{
    size_t len = value != NULL ? strlen(value) : 0;
    dlock_op *op;
    int rc;
    if (out != NULL)
        *out = NULL;
    rc = dloop__hold_op(&op, out, l, h, OP_PROCLAIM,
                        h != NULL && h->k.kind == DLOCK__KIND_LOCK &&
                            len <= DLOCK_VALUE_MAX,
                        cb, userdata, "dlock_loop_proclaim");
    if (rc != DLOCK_OK)
        return rc;
    if (dloop__proclaim(op, h, value, len) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}

/* 1 when a and b name the same leadership (who, epoch, value). */
static int same_leader(const dlock_leader_info *a, const dlock_leader_info *b)
{
    return a->leading == b->leading && a->epoch == b->epoch &&
           a->proclaimed == b->proclaimed && strcmp(a->owner, b->owner) == 0 &&
           strcmp(a->value, b->value) == 0;
}

/* elect_leader.lua's answer into op->leader (a wait: until it is not
 * op->known). */
static void leader_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                         const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock_leader_info *li = op->leader;
    long long kind;
    memset(li, 0, sizeof *li);
    (void)l;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "leader: %s", err);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        dloop__complete(op, DLOCK_EPROTO, "leader: a malformed reply");
        return;
    }
    kind = dlock__elem_int(r, 0);
    li->ttl_ms = -1;
    if ((kind == 1 && r->elements >= 6) || (kind == 2 && r->elements >= 4)) {
        const redisReply *o = r->element[1];
        li->leading = 1;
        li->proclaimed = kind == 1;
        snprintf(li->owner, sizeof li->owner, "%.*s",
                 o->type == REDIS_REPLY_STRING ? (int)o->len : 0,
                 o->type == REDIS_REPLY_STRING ? o->str : "");
        li->epoch = (uint64_t)dlock__elem_int(r, 2);
        if (kind == 1) {
            const redisReply *v = r->element[3];
            snprintf(li->value, sizeof li->value, "%.*s",
                     v->type == REDIS_REPLY_STRING ? (int)v->len : 0,
                     v->type == REDIS_REPLY_STRING ? v->str : "");
            li->since_ms = dlock__elem_int(r, 4);
        }
        li->ttl_ms = dlock__elem_int(r, kind == 1 ? 5 : 3);
    }
    if (op->watch && same_leader(li, op->known)) {
        /* No change yet: until a message, or the lease would end. */
        dloop__mn_sleep(op, dlock__now_ms() +
                                (li->ttl_ms > 0 ? li->ttl_ms + 1 : 1000));
        return;
    }
    dloop__complete(op, DLOCK_OK, "%s", "");
}

int dlock_loop_leader(dlock_op **out, dlock_loop *l, const char *name,
                      dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    dlock__keys *k;
    char lkey[DLOCK_KEY_MAX + 64];
    const char *keys[3];
    size_t kl[3], n = name != NULL ? strlen(name) : 0;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (n == 0 || n > DLOCK_NAME_MAX || cb == NULL)
        return dlock__set_error(l->c, DLOCK_EINVAL, "dlock_loop_leader: %s",
                                cb == NULL ? "no callback"
                                           : "the name must be 1 to 512 "
                                             "bytes");
    k = malloc(sizeof *k + dlock__keys_size(l->c, name));
    op = k != NULL ? dloop__op_new(l, OP_LEADER, cb, userdata) : NULL;
    if (op == NULL) {
        free(k);
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    }
    dlock__keys_fill(k, (char *)(k + 1), l->c, name);
    if (out != NULL)
        *out = op;
    keys[0] = k->key, kl[0] = k->keylen;
    keys[1] = lkey, kl[1] = leader_key(k, lkey);
    keys[2] = k->fkey, kl[2] = k->fkeylen;
    op->state = ST_OUT;
    rc = dloop__op_send(op, DLOCK__S_ELECT_LEADER, 3, keys, kl, 0, NULL, NULL,
                        leader_reply);
    free(k); /* the request copied the keys */
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
    return DLOCK_OK;
}

/* A leader wait's next look: elect_leader.lua on its hold's keys. */
static void leader_ask(dlock_op *op)
{
    dlock_hold *h = op->hold;
    char lkey[DLOCK_KEY_MAX + 64];
    const char *keys[3] = {h->k.key, lkey, h->k.fkey};
    size_t kl[3] = {h->k.keylen, 0, h->k.fkeylen};
    kl[1] = leader_key(&h->k, lkey);
    op->state = ST_OUT;
    op->wake_at = -1;
    if (dloop__op_send(op, DLOCK__S_ELECT_LEADER, 3, keys, kl, 0, NULL, NULL,
                       leader_reply) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
}

int dlock_loop_leader_wait(dlock_op **out, dlock_loop *l, const char *name,
                           const dlock_leader_info *known, int64_t wait_ms,
                           dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    size_t n = name != NULL ? strlen(name) : 0;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (n == 0 || n > DLOCK_NAME_MAX || cb == NULL || known == NULL)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "dlock_loop_leader_wait: %s",
                                cb == NULL      ? "no callback"
                                : known == NULL ? "known is NULL"
                                                : "the name must be 1 to "
                                                  "512 bytes");
    op = dloop__op_new(l, OP_LEADER, cb, userdata);
    if (op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    /* A hold that only carries the name's keys (no name table, never
     * held): the op's, freed with it. */
    op->hold = dloop__hold_new(l, name, DLOCK__KIND_READ);
    if (op->hold == NULL) {
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return DLOCK_OK;
    }
    if (out != NULL)
        *out = op;
    op->watch = wait_ms != 0; /* 0: answer as dlock_loop_leader */
    *op->known = *known;
    op->again = leader_ask;
    op->deadline = wait_ms == 0  ? 0
                   : wait_ms < 0 ? -1
                                 : dlock__now_ms() + wait_ms;
    if (wait_ms == 0 ||
        !(l->engine ? dloop__mn_watch(op) : dloop__wait_subscribe(op)))
        leader_ask(op);
    return DLOCK_OK;
}

int dlock_op_leader(const dlock_op *op, dlock_leader_info *out)
{
    if (op == NULL || out == NULL || op->type != OP_LEADER)
        return DLOCK_EINVAL;
    *out = *op->leader;
    return DLOCK_OK;
}
