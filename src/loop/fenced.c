/*
 * fenced.c - fenced set / get / read through a loop
 * (include/dlock_loop.h), on the loop's command connection with
 * dlock_fenced_set / dlock_fenced_get / dlock_fenced_read's rules and
 * format, by the client's layout: the set and the read are scripts
 * (fenced_set.lua, fenced_read.lua; with the string layout
 * s_fenced_set.lua, s_fenced_read.lua: a compare and a write), the get
 * is a plain HMGET of the hash's "value" and "fence" (what fenced_get.lua
 * does, without a script's cost on the server: one read needs no
 * atomicity beyond the command's), with the string layout a plain GET of
 * the one string "<fence> <value>" (s_fenced_get.lua's).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/release.h"
#include "loop/loop_impl.h"

/* wait_replicas: WAIT answered for a fenced set's or read's write (the
 * value written, the fence raised): too few replicas fail it (a read's
 * value is still given). */
static void fenced_acked(dlock_op *op, int rc, const char *msg)
{
    if (rc == DLOCK_OK)
        dloop__complete(op, DLOCK_OK, "%s", "");
    else
        dloop__complete(op, rc, "%s: %s",
                        op->type == OP_FREAD ? "fenced read" : "fenced set",
                        msg);
}

/* The write of a fenced op succeeded: done, or WAIT first. */
static void fenced_written(dlock_op *op)
{
    if (!dloop__durable(op->loop))
        dloop__complete(op, DLOCK_OK, "%s", "");
    else
        dloop__op_acks(op, fenced_acked);
}

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
    else if (dlock__elem_int(r, 0) == -2)
        dloop__complete(op, DLOCK_EINVAL, "fenced set: %s",
                        DLOCK__FENCED_OTHER);
    else if (dlock__elem_int(r, 0) == 1)
        fenced_written(op);
    else
        dloop__complete(op, DLOCK_STALE,
                        "fenced set: token %llu is older than %lld",
                        (unsigned long long)op->token, dlock__elem_int(r, 1));
}

/* Copy LEN bytes at V into op's value. DLOCK_OK or DLOCK_ENOMEM. */
static int take_bytes(dlock_op *op, const char *v, size_t len)
{
    op->got = malloc(len + 1);
    if (op->got == NULL)
        return DLOCK_ENOMEM;
    memcpy(op->got, v, len);
    op->got[len] = '\0';
    op->gotlen = len;
    op->has_got = 1;
    return DLOCK_OK;
}

/* A string-layout get's answer (GET: "<fence> <value>", "<fence>" or
 * nil) into op. */
static void string_get_reply(dlock_op *op, int rc, const redisReply *r,
                             const char *err)
{
    const char *v = NULL;
    size_t vl = 0;
    if (rc != DLOCK_OK && err != NULL && strstr(err, "WRONGTYPE") != NULL)
        dloop__complete(op, DLOCK_EINVAL, "fenced get: %s",
                        DLOCK__FENCED_OTHER);
    else if (rc != DLOCK_OK)
        dloop__complete(op, rc, "fenced get: %s", err);
    else if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING)
        dloop__complete(op, DLOCK_EPROTO, "fenced get: a malformed reply");
    else if (r->type == REDIS_REPLY_STRING &&
             !dlock__fenced_split(r->str, r->len, &op->fence, &v, &vl))
        dloop__complete(op, DLOCK_EINVAL, "fenced get: %s",
                        DLOCK__FENCED_OTHER);
    else if (v != NULL && take_bytes(op, v, vl) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    else
        dloop__complete(op, DLOCK_OK, "%s", "");
}

/* A get's answer (HMGET key value fence: {value or nil, fence or nil};
 * the string layout's: string_get_reply) or a read's (fenced_read.lua,
 * s_fenced_read.lua: {1, value or nil, token} read, the fence raised to
 * the token; {0, nil, fence} refused; {-2, nil, 0} not a string-layout
 * fenced value) into op. */
static void value_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent)
{
    dlock_op *op = ctx;
    int rd = op->type == OP_FREAD;
    const char *what = rd ? "fenced read" : "fenced get";
    (void)l;
    (void)sent;
    op->req = NULL;
    if (!rd && dlock__string_layout(op->loop->c)) {
        string_get_reply(op, rc, r, err);
        return;
    }
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "%s: %s", what, err);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != (rd ? 3u : 2u) ||
        (rd && r->element[0]->type != REDIS_REPLY_INTEGER)) {
        dloop__complete(op, DLOCK_EPROTO, "%s: a malformed reply", what);
        return;
    }
    if (!rd)
        op->fence = r->element[1]->type == REDIS_REPLY_STRING
                        ? strtoull(r->element[1]->str, NULL, 10)
                        : 0;
    else
        op->fence = (uint64_t)dlock__elem_int(r, 2);
    if (rd && r->element[0]->integer == -2)
        dloop__complete(op, DLOCK_EINVAL, "fenced read: %s",
                        DLOCK__FENCED_OTHER);
    else if (rd && r->element[0]->integer != 1)
        dloop__complete(op, DLOCK_STALE,
                        "fenced read: token %" PRIu64 " is older than %" PRIu64,
                        op->token, op->fence);
    else if (r->element[rd ? 1 : 0]->type == REDIS_REPLY_STRING &&
             take_bytes(op, r->element[rd ? 1 : 0]->str,
                        r->element[rd ? 1 : 0]->len) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    else if (rd)
        fenced_written(op);
    else
        dloop__complete(op, DLOCK_OK, "%s", "");
}

/* Start a fenced op of type on KEY for the call named what, after the
 * checks every fenced op shares (a key of 1 to DLOCK_KEY_MAX bytes, a
 * callback; ok: the call's own argument check, its message bad). *op
 * (and *out) the op, waiting for its request; DLOCK_OK, or DLOCK_EINVAL /
 * DLOCK_ENOMEM with the message in dlock_errmsg(l's client). */
static int fenced_op(dlock_op **op, dlock_op **out, dlock_loop *l, int type,
                     const char *key, int ok, const char *bad, dlock_op_cb cb,
                     void *userdata, const char *what)
{
    size_t n = key != NULL ? strlen(key) : 0;
    *op = NULL;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (n == 0 || n > DLOCK_KEY_MAX || cb == NULL || !ok)
        return dlock__set_error(l->c, DLOCK_EINVAL, "%s: %s", what,
                                cb == NULL ? "no callback"
                                : !ok      ? bad
                                           : "the key must be 1 to 4096 "
                                             "bytes");
    *op = dloop__op_new(l, type, cb, userdata);
    if (*op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = *op;
    (*op)->state = ST_OUT;
    return DLOCK_OK;
}

/* Send fenced script for op: KEY, TOKEN and nargs more arguments. */
static void send_script(dlock_op *op, int script, const char *key,
                        uint64_t token, int nargs, const char **args,
                        size_t *al, lreq_fn fn)
{
    char tok[24];
    size_t kl = strlen(key);
    op->token = token;
    args[0] = tok, al[0] = dlock__fmt_u64(tok, token);
    if (dloop__op_send(op, script, 1, &key, &kl, nargs, args, al, fn) !=
        DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
}

int dlock_loop_fenced_set(dlock_op **out, dlock_loop *l, const char *key,
                          uint64_t token, const void *value, size_t len,
                          dlock_op_cb cb, void *userdata)
{
    const char *args[2];
    size_t al[2];
    dlock_op *op;
    int ok = token > 0 && token <= (1ULL << 53);
    int rc =
        fenced_op(&op, out, l, OP_FSET, key, ok && (value != NULL || len == 0),
                  !ok ? "the token must be 1 to 2^53 (a lazy hold's "
                        "token is 0 until issued: dlock_loop_token)"
                      : "value is NULL",
                  cb, userdata, "dlock_loop_fenced_set");
    if (rc != DLOCK_OK)
        return rc;
    args[1] = value != NULL ? value : "", al[1] = len;
    send_script(op,
                dlock__string_layout(l->c) ? DLOCK__S_S_FENCED_SET
                                           : DLOCK__S_FENCED_SET,
                key, token, 2, args, al, fset_reply);
    return DLOCK_OK;
}

int dlock_loop_fenced_get(dlock_op **out, dlock_loop *l, const char *key,
                          dlock_op_cb cb, void *userdata)
{
    const char *argv[4] = {"HMGET", key, "value", "fence"};
    size_t lens[4] = {5, 0, 5, 5};
    dlock_op *op;
    int str, rc = fenced_op(&op, out, l, OP_FGET, key, 1, "", cb, userdata,
                            "dlock_loop_fenced_get");
    if (rc != DLOCK_OK)
        return rc;
    lens[1] = strlen(key);
    str = dlock__string_layout(l->c);
    if (str) /* the string layout: GET of the one string */
        argv[0] = "GET", lens[0] = 3;
    if (l->engine) { /* the engine sends scripts: fenced_get.lua, the same
                      * HMGET (s_fenced_get.lua, the same GET) */
        if (dloop__mn_send(
                op, str ? DLOCK__S_S_FENCED_GET : DLOCK__S_FENCED_GET, 1,
                argv + 1, lens + 1, 0, NULL, NULL, value_reply) != DLOCK_OK)
            dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    } else if (dloop__send_plain(l, str ? 2 : 4, argv, lens, value_reply, op,
                                 &op->req) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}

int dlock_loop_fenced_read(dlock_op **out, dlock_loop *l, const char *key,
                           uint64_t token, dlock_op_cb cb, void *userdata)
{
    const char *args[1];
    size_t al[1];
    dlock_op *op;
    int rc = fenced_op(
        &op, out, l, OP_FREAD, key, token > 0 && token <= (1ULL << 53),
        "the token must be 1 to 2^53", cb, userdata, "dlock_loop_fenced_read");
    if (rc != DLOCK_OK)
        return rc;
    send_script(op,
                dlock__string_layout(l->c) ? DLOCK__S_S_FENCED_READ
                                           : DLOCK__S_FENCED_READ,
                key, token, 1, args, al, value_reply);
    return DLOCK_OK;
}

/* s_set_release.lua's answer {stored, t, r} for op (an OP_RELEASE with
 * setrel): stored 1 (t the token written), 0 (t the newer fence), -1 not
 * the owner (nothing written, nothing released). An error: nothing is
 * known, the hold is given back by a release whose answer is ignored. */
static void setrel_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                         const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock_hold *h = op->hold;
    long long t = 0;
    int v = DLOCK_OK;
    (void)sent;
    op->req = NULL;
    if (rc == DLOCK_OK &&
        (v = dlock__set_release_verdict(r, &t)) == DLOCK_EPROTO) {
        rc = DLOCK_EPROTO;
        err = "a malformed reply";
    }
    if (rc != DLOCK_OK) {
        dloop__giveback(l, h, h->token);
        dloop__complete(op, rc, "fenced set and release: %s", err);
        return;
    }
    op->fence = (uint64_t)t;
    if (v == DLOCK_NOT_OWNER)
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "fenced set and release: %s: not the owner (the "
                        "lease expired or another owner has it): nothing "
                        "stored",
                        h->k.name);
    else if (v == DLOCK_EINVAL)
        dloop__complete(op, DLOCK_EINVAL,
                        "fenced set and release: %s: not stored; released",
                        DLOCK__FENCED_OTHER);
    else if (v == DLOCK_STALE)
        dloop__complete(op, DLOCK_STALE,
                        "fenced set and release: the hold's token is older "
                        "than %" PRIu64 ": not stored; released",
                        op->fence);
    else {
        op->token = op->fence;
        if (h->token == 0)
            h->token = op->fence; /* issued now (the release event's) */
        fenced_written(op);
    }
}

int dlock_loop_fenced_set_release(dlock_op **out, dlock_loop *l, dlock_hold *h,
                                  const char *key, const void *value,
                                  size_t len, dlock_op_cb cb, void *userdata)
{
    const char *what = "dlock_loop_fenced_set_release";
    size_t kl = key != NULL ? strlen(key) : 0;
    char want[DLOCK__SETREL_WANT];
    dlock__cmdbuf b;
    dlock_op *op;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (kl == 0 || kl > DLOCK_KEY_MAX)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "%s: the key must be 1 to 4096 bytes", what);
    if (l->engine || !dlock__string_layout(l->c) ||
        (h != NULL && h->k.kind != DLOCK__KIND_LOCK))
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "%s: needs an exclusive lock's hold on a "
                                "loop over one server with the string "
                                "layout (else: dlock_loop_fenced_set, then "
                                "dlock_loop_release)",
                                what);
    rc = dloop__hold_op(&op, out, l, h, OP_RELEASE, value != NULL || len == 0,
                        cb, userdata, what);
    if (rc != DLOCK_OK)
        return rc;
    op->setrel = 1;
    h->gone = 1;
    h->renew = 0; /* op->hold's reference: freed after the callback */
    if (h->wd != NULL)
        dloop__wd_drop(h);
    if (h->status != DLOCK_OK) {
        dloop__complete(op, DLOCK_LOST,
                        "%s: the lease had been lost: nothing stored",
                        h->k.name);
        return DLOCK_OK;
    }
    op->state = ST_OUT;
    dlock__set_release_cmd(&b, l->c, &h->k, h->owner, h->token, want, key, kl,
                           value, len);
    if (dloop__send_cmd(l, &b.cmd, setrel_reply, op, &op->req) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}

/* s_stamp.lua's answer for op (OP_TOKEN): {1, token} (issued now if it
 * was not) or {0}: the hold is not the owner's on the server. */
static void token_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock_hold *h = op->hold;
    (void)l;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "token: %s", err);
        return;
    }
    rc = dlock__stamp_verdict(r, &op->token);
    if (rc == DLOCK_EPROTO) {
        dloop__complete(op, DLOCK_EPROTO, "token: a malformed reply");
        return;
    }
    if (rc == DLOCK_NOT_OWNER) {
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "token %s: not the owner (the lease expired or "
                        "another owner has it): no token",
                        h->k.name);
        return;
    }
    if (h->token == 0)
        h->token = op->token;
    dloop__complete(op, DLOCK_OK, "%s", "");
}

int dlock_loop_token(dlock_op **out, dlock_loop *l, dlock_hold *h,
                     dlock_op_cb cb, void *userdata)
{
    const char *key;
    const char *args[1];
    size_t kl, al[1];
    dlock_op *op;
    int rc = dloop__hold_op(&op, out, l, h, OP_TOKEN, 1, cb, userdata,
                            "dlock_loop_token");
    if (rc != DLOCK_OK || dloop__hold_lost_done(op))
        return rc;
    if (h->token != 0) { /* issued with the grant, or asked before */
        dloop__complete(op, DLOCK_OK, "%s", "");
        return DLOCK_OK;
    }
    h->refs++; /* dropped after the callback (drive.c) */
    op->href = 1;
    op->state = ST_OUT;
    key = h->k.key, kl = h->k.keylen;
    args[0] = h->owner, al[0] = strlen(h->owner);
    if (dloop__send(l, DLOCK__S_S_STAMP, 1, &key, &kl, 1, args, al, token_reply,
                    op, &op->req) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}
