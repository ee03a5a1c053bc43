/*
 * fenced.c - fenced set / get / read through a loop
 * (include/dlock_loop.h), on the loop's command connection with
 * dlock_fenced_set / dlock_fenced_get / dlock_fenced_read's rules: the
 * set and the read are scripts (fenced_set.lua, fenced_read.lua: a
 * compare and a write), the get is a plain HMGET of the hash's "value"
 * and "fence" (what fenced_get.lua does, without a script's cost on the
 * server: one read needs no atomicity beyond the command's).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop_impl.h"

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

/* Copy the reply element v (a string, or nil: no value) into op's value.
 * DLOCK_OK or DLOCK_ENOMEM. */
static int take_value(dlock_op *op, const redisReply *v)
{
    if (v->type != REDIS_REPLY_STRING)
        return DLOCK_OK;
    op->got = malloc(v->len + 1);
    if (op->got == NULL)
        return DLOCK_ENOMEM;
    memcpy(op->got, v->str, v->len);
    op->got[v->len] = '\0';
    op->gotlen = v->len;
    op->has_got = 1;
    return DLOCK_OK;
}

/* HMGET key value fence: {value or nil, fence or nil}. */
static void fget_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                       const char *err, int sent)
{
    dlock_op *op = ctx;
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
    op->fence = r->element[1]->type == REDIS_REPLY_STRING
                    ? strtoull(r->element[1]->str, NULL, 10)
                    : 0;
    if (take_value(op, r->element[0]) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    else
        dloop__complete(op, DLOCK_OK, "%s", "");
}

/* fenced_read.lua: {1, value or nil, token} read (the fence raised to
 * the token), {0, nil, fence} refused. */
static void fread_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent)
{
    dlock_op *op = ctx;
    (void)l;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "fenced read: %s", err);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        dloop__complete(op, DLOCK_EPROTO, "fenced read: a malformed reply");
        return;
    }
    op->fence = (uint64_t)dlock__elem_int(r, 2);
    if (r->element[0]->integer != 1)
        dloop__complete(op, DLOCK_STALE,
                        "fenced read: token %" PRIu64 " is older than %" PRIu64,
                        op->token, op->fence);
    else if (take_value(op, r->element[1]) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    else
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
    const char *argv[4] = {"HMGET", key, "value", "fence"};
    size_t lens[4] = {5, 0, 5, 5};
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
    lens[1] = strlen(key);
    op->state = ST_OUT;
    rc = dloop__send_plain(l, 4, argv, lens, fget_reply, op, &op->req);
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
    return DLOCK_OK;
}

int dlock_loop_fenced_read(dlock_op **out, dlock_loop *l, const char *key,
                           uint64_t token, dlock_op_cb cb, void *userdata)
{
    char tok[24];
    const char *arg = tok;
    size_t al, kl;
    dlock_op *op;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    rc = check_key(l, key, cb, "dlock_loop_fenced_read");
    if (rc == DLOCK_OK && (token == 0 || token > (1ULL << 53)))
        rc = dlock__set_error(l->c, DLOCK_EINVAL,
                              "dlock_loop_fenced_read: token must be 1 to "
                              "2^53 (got %" PRIu64 ")",
                              token);
    if (rc != DLOCK_OK)
        return rc;
    op = dloop__op_new(l, OP_FREAD, cb, userdata);
    if (op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = op;
    op->token = token;
    kl = strlen(key);
    al = dlock__fmt_u64(tok, token);
    op->state = ST_OUT;
    rc = dloop__send(l, DLOCK__S_FENCED_READ, 1, &key, &kl, 1, &arg, &al,
                     fread_reply, op, &op->req);
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
    return DLOCK_OK;
}
