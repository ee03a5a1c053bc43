/*
 * fenced.c - fenced set / get through a loop (include/dlock_loop.h):
 * fenced_set.lua and fenced_get.lua on the loop's command connection,
 * with dlock_fenced_set / dlock_fenced_get's rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/loop_impl.h"

static void fset_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                       const char *err, int sent)
{
    dlock_op *op = ctx;
    (void)l;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "fenced set: %s", err);
    else if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        dloop__complete(op, DLOCK_EPROTO, "fenced set: a malformed reply");
    else if (dlock__elem_int(r, 0) == 1)
        dloop__complete(op, DLOCK_OK, "%s", "");
    else
        dloop__complete(op, DLOCK_STALE,
                        "fenced set: token %llu is older than %lld",
                        (unsigned long long)op->token, dlock__elem_int(r, 1));
}

static void fget_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                       const char *err, int sent)
{
    dlock_op *op = ctx;
    const redisReply *v;
    (void)l;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "fenced get: %s", err);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        dloop__complete(op, DLOCK_EPROTO, "fenced get: a malformed reply");
        return;
    }
    v = r->element[0];
    op->fence = r->element[1]->type == REDIS_REPLY_STRING
                    ? strtoull(r->element[1]->str, NULL, 10)
                    : 0;
    if (v->type == REDIS_REPLY_STRING) {
        op->got = malloc(v->len + 1);
        if (op->got == NULL) {
            dloop__complete(op, DLOCK_ENOMEM, "out of memory");
            return;
        }
        memcpy(op->got, v->str, v->len);
        op->got[v->len] = '\0';
        op->gotlen = v->len;
        op->has_got = 1;
    }
    dloop__complete(op, DLOCK_OK, "%s", "");
}

/* Check a fenced key; DLOCK_OK or DLOCK_EINVAL with the message set. */
static int check_key(dlock_loop *l, const char *key, dlock_op_cb cb,
                     const char *what)
{
    size_t n = key != NULL ? strlen(key) : 0;
    if (n == 0 || n > DLOCK_KEY_MAX || cb == NULL)
        return dlock__set_error(l->c, DLOCK_EINVAL, "%s: %s", what,
                                cb == NULL ? "no callback"
                                           : "the key must be 1 to 4096 "
                                             "bytes");
    return DLOCK_OK;
}

int dlock_loop_fenced_set(dlock_op **out, dlock_loop *l, const char *key,
                          uint64_t token, const void *value, size_t len,
                          dlock_op_cb cb, void *userdata)
{
    char tok[24];
    const char *args[2];
    size_t al[2], kl;
    dlock_op *op;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    rc = check_key(l, key, cb, "dlock_loop_fenced_set");
    if (rc == DLOCK_OK && value == NULL && len > 0)
        rc = dlock__set_error(l->c, DLOCK_EINVAL,
                              "dlock_loop_fenced_set: value is NULL");
    if (rc != DLOCK_OK)
        return rc;
    op = dloop__op_new(l, OP_FSET, cb, userdata);
    if (op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = op;
    op->token = token;
    kl = strlen(key);
    args[0] = tok, al[0] = dlock__fmt_u64(tok, token);
    args[1] = value != NULL ? value : "", al[1] = len;
    op->state = ST_OUT;
    rc = dloop__send(l, DLOCK__S_FENCED_SET, 1, &key, &kl, 2, args, al,
                     fset_reply, op, &op->req);
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
    return DLOCK_OK;
}

int dlock_loop_fenced_get(dlock_op **out, dlock_loop *l, const char *key,
                          dlock_op_cb cb, void *userdata)
{
    size_t kl;
    dlock_op *op;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    rc = check_key(l, key, cb, "dlock_loop_fenced_get");
    if (rc != DLOCK_OK)
        return rc;
    op = dloop__op_new(l, OP_FGET, cb, userdata);
    if (op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = op;
    kl = strlen(key);
    op->state = ST_OUT;
    rc = dloop__send(l, DLOCK__S_FENCED_GET, 1, &key, &kl, 0, NULL, NULL,
                     fget_reply, op, &op->req);
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
    return DLOCK_OK;
}
