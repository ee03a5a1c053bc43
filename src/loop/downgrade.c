/*
 * downgrade.c - a loop's write hold becomes a read hold
 * (dlock_loop_downgrade, include/dlock_loop.h): rw_downgrade.lua on the
 * command connection (dlock_rw_downgrade's script: the writer's field
 * goes and the owner joins the readers, in one step), the same hold going
 * on as the reader. The hold's kind turns to READ when the request is
 * sent: what the loop sends for it afterwards on the same connection (a
 * renewal: rw_extend.lua) runs after the downgrade.
 */
#include <string.h>

#include "hold/kind.h"
#include "loop/loop_impl.h"

/* The downgrade failed (rc, msg) after it may have run: both forms go
 * back (the write hold through its kind's release, the read lease
 * through rw_release.lua) and the hold is lost. */
static void undo(dlock_op *op, int rc, const char *msg)
{
    dlock_hold *h = op->hold;
    h->k.kind = DLOCK__KIND_LOCK;
    dloop__giveback(op->loop, h, h->token);
    h->k.kind = DLOCK__KIND_READ;
    dloop__giveback(op->loop, h, h->token);
    dloop__lost(h, DLOCK_LOST);
    dloop__complete(op, rc, "downgrade %s", msg);
}

/* wait_replicas: WAIT answered for the read lease. */
static void downgrade_acked(dlock_op *op, int rc, const char *msg)
{
    if (rc != DLOCK_OK) {
        undo(op, rc, msg);
        return;
    }
    dloop__complete(op, DLOCK_OK, "%s", "");
}

static void downgrade_reply(dlock_loop *l, void *ctx, int rc,
                            const redisReply *r, const char *err, int sent)
{
    dlock_op *op = ctx;
    dlock_hold *h = op->hold;
    char msg[LOOP_ERRLEN];
    op->req = NULL;
    if (rc == DLOCK_OK && r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
        dloop__lost(h, DLOCK_NOT_OWNER);
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "downgrade %s: not the owner (the lease expired or "
                        "another owner has it)",
                        h->k.name);
        return;
    }
    if (rc == DLOCK_OK && (r->type != REDIS_REPLY_INTEGER || r->integer != 1)) {
        rc = DLOCK_EPROTO;
        err = "a malformed reply";
        sent = 1;
    }
    if (rc != DLOCK_OK) {
        snprintf(msg, sizeof msg, "%s: %s", h->k.name, err);
        if (sent)
            undo(op, rc, msg);
        else
            dloop__complete(op, rc, "downgrade %s", msg);
        return;
    }
    /* The read lease runs from the request (the script set it then). */
    h->valid_until =
        op->wake_at + h->lease_ms - dlock__drift(l->c, h->lease_ms);
    if (h->renew && !h->renewing) {
        h->renew_at = op->wake_at + h->lease_ms / 3;
        dloop__hold_sched(h);
    }
    if (!dloop__durable(l))
        downgrade_acked(op, DLOCK_OK, "");
    else if (dloop__op_acks(op, downgrade_acked) != DLOCK_OK)
        undo(op, DLOCK_ENOMEM, "out of memory");
}

int dlock_loop_downgrade(dlock_op **out, dlock_loop *l, dlock_hold *h,
                         dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    char tok[24], lease[24], id[64];
    const char *keys[3], *args[5];
    size_t kl[3], al[5];
    int rc;
    if (l != NULL && dloop__mn_refuse(l, "dlock_loop_downgrade") != DLOCK_OK)
        return DLOCK_EINVAL;
    rc = dloop__hold_op(&op, out, l, h, OP_DOWNGRADE,
                        h != NULL && h->k.kind == DLOCK__KIND_LOCK, cb,
                        userdata, "dlock_loop_downgrade");
    if (rc != DLOCK_OK || dloop__hold_lost_done(op))
        return rc;
    keys[0] = h->k.key, kl[0] = h->k.keylen;
    keys[1] = h->k.fkey, kl[1] = h->k.fkeylen;
    keys[2] = h->k.rkey, kl[2] = h->k.rkeylen;
    args[0] = h->owner, al[0] = strlen(h->owner);
    args[1] = tok, al[1] = dlock__fmt_u64(tok, h->token);
    args[2] = lease, al[2] = dlock__fmt_i64(lease, h->lease_ms);
    args[3] = h->k.chan, al[3] = h->k.chanlen;
    args[4] = id, al[4] = dlock__request_id(l->c, id);
    op->state = ST_OUT;
    op->wake_at = dlock__now_ms(); /* sent at */
    /* A reader from now on: out of the name table (not exclusive),
     * renewed by its kind's script. */
    dloop__name_drop(h);
    dloop__wd_drop(h); /* the loop renews the reader */
    h->k.kind = DLOCK__KIND_READ;
    if (dloop__send(l, DLOCK__S_RW_DOWNGRADE, 3, keys, kl, 5, args, al,
                    downgrade_reply, op, &op->req) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}
