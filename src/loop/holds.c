/*
 * holds.c - what a loop does with its holds (include/dlock_loop.h):
 * release and extend operations, the renewal of every hold due in one
 * extend.lua call per round (BATCH_MAX holds at most), the report of a
 * lease lost (the servers' answer, or the validity run out: renewals
 * failed or the loop did not run), and fenced set / get.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/kind.h"
#include "loop/loop_impl.h"

#define BATCH_MAX 200

static void release_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                          const char *err, int sent)
{
    dlock_op *op = ctx;
    long long v;
    (void)l;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "release: %s", err);
        return;
    }
    v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (v == 1 || v == 2 || v == 3 || v == 4) /* sem_release: 1, 3 */
        dloop__complete(op, DLOCK_OK, "%s", "");
    else if (v == 0)
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "release: %s: not the owner (the lease expired or "
                        "another owner has it)",
                        op->hold->k.name);
    else
        dloop__complete(op, DLOCK_EPROTO, "release: a malformed reply");
}

/* Release hold h's last level: its kind's release (the kind table). */
int dlock_loop_release(dlock_op **out, dlock_loop *l, dlock_hold *h,
                       dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    int rc = dloop__hold_op(&op, out, l, h, OP_RELEASE, 1, cb, userdata,
                            "dlock_loop_release");
    if (rc != DLOCK_OK)
        return rc;
    h->gone = 1;
    h->renew = 0; /* op->hold's reference: freed after the callback */
    if (h->wd != NULL)
        dloop__wd_drop(h);
    if (h->status != DLOCK_OK) {
        dloop__complete(op, DLOCK_LOST, "%s: the lease had been lost",
                        h->k.name);
        return DLOCK_OK;
    }
    op->state = ST_OUT;
    if (l->engine) {
        dloop__mn_release(op);
        return DLOCK_OK;
    }
    rc = dloop__send_release(l, h, 1, h->token, release_reply, op, &op->req);
    if (rc != DLOCK_OK)
        dloop__complete(op, rc, "out of memory");
    return DLOCK_OK;
}

/* wait_replicas: WAIT answered for op's extension: it counts, or the
 * hold keeps the validity it had (the renewals go on). */
static void extend_acked(dlock_op *op, int rc, const char *msg)
{
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "extend %s", msg);
        return;
    }
    dloop__extended(op, op->wake_at);
    dloop__complete(op, DLOCK_OK, "%s", "");
}

static void extend_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                         const char *err, int sent)
{
    dlock_op *op = ctx;
    (void)sent;
    op->req = NULL;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "extend: %s", err);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
               dlock__elem_int(r, 0) == 1) {
        if (!dloop__durable(l))
            extend_acked(op, DLOCK_OK, "");
        else
            dloop__op_acks(op, extend_acked);
    } else {
        dloop__lost(op->hold, DLOCK_NOT_OWNER);
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "extend: %s: not the owner (the lease expired or "
                        "another owner has it)",
                        op->hold->k.name);
    }
}

/* Send their kind's renewal script (extend.lua, sem_extend.lua: one key
 * per hold; rw_extend.lua: a reader's lock hash and readers' set) for
 * holds hs[0..n), all of one kind, with their leases. */
static int send_extend(dlock_loop *l, dlock_hold **hs, int n, lreq_fn fn,
                       void *ctx, lreq **out)
{
    const dlock__kind *kd = dlock__kind_of(hs[0]->k.kind);
    int per = kd->extend_keys, i, rc;
    const char **keys = malloc(n * (per + 2) * sizeof(char *));
    size_t *kl = malloc(n * (per + 2) * sizeof(size_t));
    char(*num)[24] = malloc(n * sizeof *num);
    const char **args;
    size_t *al;
    if (dloop__holder_renews(l, hs[0]->k.kind)) {
        free(keys);
        free(kl);
        free(num);
        return dloop__holder_extend(l, hs, n, fn, ctx, out);
    }
    if (keys == NULL || kl == NULL || num == NULL) {
        free(keys);
        free(kl);
        free(num);
        return DLOCK_ENOMEM;
    }
    args = keys + per * n;
    al = kl + per * n;
    for (i = 0; i < n; i++) {
        keys[per * i] = hs[i]->k.key;
        kl[per * i] = hs[i]->k.keylen;
        if (per == 2) {
            keys[2 * i + 1] = hs[i]->k.rkey;
            kl[2 * i + 1] = hs[i]->k.rkeylen;
        }
        args[2 * i] = hs[i]->owner;
        al[2 * i] = strlen(hs[i]->owner);
        args[2 * i + 1] = num[i];
        al[2 * i + 1] = dlock__fmt_i64(num[i], hs[i]->lease_ms);
    }
    rc = dloop__send(l, dlock__extend_script(l->c, kd), per * n, keys, kl,
                     2 * n, args, al, fn, ctx, out);
    free(keys);
    free(kl);
    free(num);
    return rc;
}

int dlock_loop_extend(dlock_op **out, dlock_loop *l, dlock_hold *h,
                      int64_t lease_ms, dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    int64_t keep;
    int rc = dloop__hold_op(&op, out, l, h, OP_EXTEND, lease_ms > 0, cb,
                            userdata, "dlock_loop_extend");
    if (rc != DLOCK_OK || dloop__hold_lost_done(op))
        return rc;
    if (h->downgrading) { /* downgrade.c: the two could run in any order */
        dloop__complete(op, DLOCK_EINVAL,
                        "extend %s: a downgrade of it is out: extend once "
                        "it completed",
                        h->k.name);
        return DLOCK_OK;
    }
    op->lease_ms = lease_ms;
    op->wake_at = dlock__now_ms(); /* sent at (not a timer: ST_OUT) */
    op->state = ST_OUT;
    op->overlap = h->renewing;
    keep = h->lease_ms;
    h->lease_ms = lease_ms;
    rc = l->engine ? dloop__mn_extend(op)
                   : send_extend(l, &h, 1, extend_reply, op, &op->req);
    h->lease_ms = keep;
    if (rc != DLOCK_OK) {
        dloop__complete(op, rc, "out of memory");
    } else if (op->state != ST_DONE) {
        /* No renewal round of h until it is answered (ops.c's
         * dloop__op_abort counts it out). */
        op->extending = 1;
        h->extending++;
        dloop__hold_sched(h);
    }
    return DLOCK_OK;
}

/* A renewal round's outcome for b's holds: rc DLOCK_OK with b->res (1:
 * renewed), or its failure (err: why, for the holds' loss reason). */
static void batch_apply(dlock_loop *l, lbatch *b, int rc, const char *err)
{
    int64_t now = dlock__now_ms();
    int i;
    if (rc != DLOCK_OK) {
        snprintf(l->renew_err, sizeof l->renew_err, "%s", err);
    } else {
        l->renew_err[0] = '\0';
        dloop__ev_round(l, b->sent_ms);
    }
    for (i = 0; i < b->n; i++) {
        dlock_hold *h = b->h[i];
        if (h == NULL)
            continue;
        h->batch = NULL;
        h->renewing = 0;
        if (rc != DLOCK_OK) {
            /* Try again soon; the validity running out reports it. */
            h->renew_at = now + 100;
            dloop__hold_sched(h);
        } else if (b->res[i] == 1) {
            if (h->status == DLOCK_OK)
                dloop__round_renewed(h, b->sent_ms);
            else
                dloop__hold_sched(h);
        } else {
            dloop__lost(h, DLOCK_NOT_OWNER);
            dloop__hold_sched(h);
        }
    }
    free(b);
}

/* wait_replicas: WAIT answered for a renewal round: the extensions count
 * only when enough replicas have them. */
static void batch_acked(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent)
{
    char msg[LOOP_ERRLEN];
    (void)sent;
    rc = dloop__acks_rc(l, rc, r, err, "extend", msg, sizeof msg);
    batch_apply(l, ctx, rc, msg);
}

static void batch_reply(dlock_loop *l, void *ctx, int rc, const redisReply *r,
                        const char *err, int sent)
{
    lbatch *b = ctx;
    char msg[LOOP_ERRLEN];
    int i;
    (void)sent;
    if (rc == DLOCK_OK &&
        (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)b->n)) {
        rc = DLOCK_EPROTO;
        err = "a malformed reply";
    }
    if (rc != DLOCK_OK) {
        snprintf(msg, sizeof msg, "extend: %s", err);
        batch_apply(l, b, rc, msg);
        return;
    }
    for (i = 0; i < b->n; i++)
        b->res[i] = dlock__elem_int(r, (size_t)i) == 1;
    if (dloop__durable(l))
        dloop__send_wait(l, batch_acked, b, NULL);
    else
        batch_apply(l, b, DLOCK_OK, "");
}

/* Send one renewal call for hs[0..n). */
static void renew_batch(dlock_loop *l, dlock_hold **hs, int n, int64_t now)
{
    lbatch *b = malloc(sizeof *b + n * (sizeof *b->h + 1));
    int i;
    if (b == NULL)
        return;
    b->n = n;
    b->h = (dlock_hold **)(b + 1);
    b->res = (signed char *)(b->h + n);
    b->sent_ms = now;
    for (i = 0; i < n; i++) {
        b->h[i] = hs[i];
        hs[i]->batch = b;
        hs[i]->slot = i;
        hs[i]->renewing = 1;
        hs[i]->round_lease = hs[i]->lease_ms;
    }
    if ((l->engine ? dloop__mn_renew(l, b)
                   : send_extend(l, hs, n, batch_reply, b, NULL)) != DLOCK_OK) {
        for (i = 0; i < n; i++) {
            hs[i]->batch = NULL;
            hs[i]->renewing = 0;
            hs[i]->renew_at = now + 100; /* again soon */
        }
        free(b);
    }
    for (i = 0; i < n; i++) /* due again: at its validity's end, or the
                               retry */
        dloop__hold_sched(hs[i]);
}

/* h (renewed by the client's watchdog: h->wd) is due on the loop's
 * clock: report a loss the watchdog found (its reason kept), else take
 * its validity and look again in a third of a lease. */
static void wd_check(dlock_hold *h, int64_t now)
{
    const char *why = NULL;
    int64_t left = 0;
    int st = dloop__wd_status(h, &left, &why);
    if (st != DLOCK_OK) {
        dloop__lost(h, st);
        if (why != NULL && why[0] != '\0') {
            size_t n = strlen(why);
            char *w = malloc(n + sizeof "watchdog: ");
            if (w != NULL) {
                memcpy(w, "watchdog: ", sizeof "watchdog: " - 1);
                memcpy(w + sizeof "watchdog: " - 1, why, n + 1);
                free(h->why);
                h->why = w;
            }
        }
        dloop__hold_sched(h);
        return;
    }
    h->valid_until = now + left;
    h->renew_at = now + h->lease_ms / 3;
    dloop__hold_sched(h);
}

/* The holds' clock: report leases run out, renew those due (batched),
 * taking from the heap (lheap.c) only the holds due by now. */
void dloop__holds_time(dlock_loop *l, int64_t now)
{
    dlock_hold *h, *due[3][BATCH_MAX], *gone[BATCH_MAX];
    int nd[3] = {0, 0, 0}, ng = 0, i;
    while ((h = dloop__heap_pop_due(l, now)) != NULL) {
        int k = h->k.kind; /* DLOCK__KIND_LOCK, _PERMIT, _READ: 0, 1, 2 */
        if (!h->renew || h->status != DLOCK_OK || h->gone)
            continue;        /* released or lost since: nothing more due */
        if (h->wd != NULL) { /* the watchdog renews it: look */
            wd_check(h, now);
            continue;
        }
        if (now >= h->valid_until) {
            if (ng == BATCH_MAX) {
                dloop__hold_sched(h); /* more to report: next process */
                break;
            }
            gone[ng++] = h;
            continue;
        }
        if (h->renewing || h->extending || now < h->renew_at) {
            dloop__hold_sched(h); /* not due after all */
            continue;
        }
        due[k][nd[k]++] = h;
        if (nd[k] == BATCH_MAX) {
            renew_batch(l, due[k], nd[k], now); /* back in the heap */
            nd[k] = 0;
        }
    }
    for (i = 0; i < 3; i++)
        if (nd[i] > 0)
            renew_batch(l, due[i], nd[i], now);
    for (i = 0; i < ng; i++)
        dloop__lost(gone[i], DLOCK_LOST);
}
