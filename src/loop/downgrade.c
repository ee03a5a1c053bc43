/*
 * downgrade.c - a loop's write hold becomes a read hold
 * (dlock_loop_downgrade, include/dlock_loop.h): rw_downgrade.lua on the
 * command connection (dlock_rw_downgrade's script: the writer's field
 * goes and the owner joins the readers, in one step), the same hold going
 * on as the reader. The hold's kind turns to READ when the request is
 * sent: what the loop sends for it afterwards on the same connection (a
 * renewal: rw_extend.lua) runs after the downgrade.
 *
 * On an engine loop (Redlock, Sentinel, Cluster) the script is an engine
 * call on the name's nodes (every node of a fixed set; the master of
 * Sentinel or of the name's slot), voted by dlock_rw_downgrade's rules
 * (src/api/shared.c): done when a majority downgraded (with the
 * replicas asked for); not the owner when too many said no for a
 * majority; else failed, and both forms are given back by the client's
 * watchdog on the nodes that may have either. Those calls go on other
 * connections than the hold's renewals and extends, so none is sent
 * while the downgrade is out (the hold counts as extending; an extend
 * is refused), a downgrade is refused while an extend is out, and a
 * writer's renewal round answered after it is not counted
 * (node_holds.c).
 */
#include <inttypes.h>
#include <string.h>

#include "hold/kind.h"
#include "hold/release.h"
#include "hold/verdict.h"
#include "loop/loop_impl.h"
#include "loop/multi_node.h"

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
    h->valid_until = dlock__valid_until(l->c, op->wake_at, h->lease_ms);
    if (h->renew && !h->renewing) {
        h->renew_at = op->wake_at + h->lease_ms / 3;
        dloop__hold_sched(h);
    }
    if (!dloop__durable(l))
        downgrade_acked(op, DLOCK_OK, "");
    else
        dloop__op_acks(op, downgrade_acked);
}

/* ---- on an engine loop ------------------------------------------------ */

/* The engine's downgrade failed: both forms go back through the
 * client's watchdog on every node when any may have one (a node that
 * may, or one that downgraded), the hold is lost (status), op completes
 * with rc and msg. */
static void mn_undo(dlock_op *op, const dlock__downgraded *t, int status,
                    int rc, const char *msg)
{
    dlock_hold *h = op->hold;
    dlock_client *c = op->loop->c;
    if ((t->unknown != 0 || t->ok > 0) && h->rec != NULL) {
        int64_t until = dlock__now_ms() + h->lease_ms;
        h->rec->k.kind = DLOCK__KIND_LOCK;
        dlock__undo_queue(c, h->rec, dlock__all_nodes(c), 1, h->token, until);
        h->rec->k.kind = DLOCK__KIND_READ;
        dlock__undo_queue(c, h->rec, dlock__all_nodes(c), 1, h->token, until);
    }
    dloop__lost(h, status);
    dloop__complete(op, rc, "downgrade %s: %s", h->k.name, msg);
}

/* The engine's downgrade answered (or its time is up). */
static void mn_downgrade_done(mjob *j)
{
    dlock_op *op = j->op;
    dlock_hold *h = op->hold;
    dlock_client *c = op->loop->c;
    int q = c->ns.cluster != NULL ? 1 : c->ns.quorum;
    int voters = c->ns.cluster != NULL ? 1 : c->ns.n;
    int64_t valid = dlock__valid_until(c, op->wake_at, h->lease_ms);
    char msg[LOOP_ERRLEN];
    dlock__downgraded t;
    dlock__downgrade_count(&c->ns, c->ns.wait_replicas, j->res, j->nres, &t);
    if (t.ok >= q && valid > dlock__now_ms()) {
        /* The read lease runs from the request (the script set it). */
        h->valid_until = valid;
        if (h->renew && !h->renewing) {
            h->renew_at = op->wake_at + h->lease_ms / 3;
            dloop__hold_sched(h);
        }
        dloop__complete(op, DLOCK_OK, "%s", "");
    } else if (t.no > voters - q) {
        mn_undo(op, &t, DLOCK_NOT_OWNER, DLOCK_NOT_OWNER,
                "not the owner (the lease expired or another owner has "
                "it)");
    } else if (t.unacked > 0 && t.ok + t.unacked >= q) {
        snprintf(msg, sizeof msg,
                 "done, but fewer than the %d replicas asked for "
                 "acknowledged it within %" PRId64 " ms: the write and "
                 "read holds are given back",
                 c->ns.wait_replicas, c->ns.wait_timeout_ms);
        mn_undo(op, &t, DLOCK_LOST, DLOCK_NOT_REPLICATED, msg);
    } else {
        snprintf(msg, sizeof msg, "%s",
                 t.fail >= 0 ? j->res[t.fail].err : "too few servers agreed");
        mn_undo(op, &t, DLOCK_LOST,
                t.fail >= 0 && voters == 1 ? j->res[t.fail].status
                                           : DLOCK_NO_QUORUM,
                msg);
    }
}

/* The engine's downgrade op ends (completed or cancelled): extends of
 * its hold may go again, once its call is answered. */
static void mn_downgrade_end(dlock_op *op)
{
    /* A call still out keeps it (multi_node.c: until the answer). */
    if (op->hold != NULL && (op->mn->job == NULL || op->mn->job->finished))
        op->hold->downgrading = 0;
    dloop__mn_abort(op);
}

/* Send the downgrade (the script's keys and args) as an engine call;
 * the hold counts as extending until it completes. */
static void mn_downgrade(dlock_op *op, const char **keys, const size_t *kl,
                         const char **args, const size_t *al)
{
    dlock_loop *l = op->loop;
    dlock_hold *h = op->hold;
    dlock__cmd cmd;
    mjob *j;
    if (dloop__mop_new(op) != DLOCK_OK)
        return; /* completed */
    op->end = mn_downgrade_end;
    memset(&cmd, 0, sizeof cmd);
    cmd.script = DLOCK__S_RW_DOWNGRADE;
    cmd.nkeys = 3;
    cmd.keys = keys;
    cmd.keylens = kl;
    cmd.nargs = 5;
    cmd.args = args;
    cmd.arglens = al;
    dlock__cmd_durable(l->c, &cmd); /* it grants a read lease */
    j = dloop__cmd_job(l, op, &cmd, 0);
    if (j == NULL) {
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    j->done = mn_downgrade_done;
    op->mn->job = j;
    if (dloop__job_call(l, j) != DLOCK_OK) {
        op->mn->job = NULL;
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    /* No renewal round or extend of h until it is answered. */
    if (op->state != ST_DONE) {
        op->extending = 1;
        h->extending++;
        h->downgrading = 1;
        dloop__hold_sched(h);
    }
}

/* ---- the call ----------------------------------------------------------- */

int dlock_loop_downgrade(dlock_op **out, dlock_loop *l, dlock_hold *h,
                         dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    char tok[24], lease[24], id[64];
    const char *keys[3], *args[5];
    size_t kl[3], al[5];
    int rc;
    if (l != NULL && l->engine && h != NULL && h->loop == l && h->extending > 0)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "dlock_loop_downgrade: %s: an extend or "
                                "downgrade of it is out (on several servers, "
                                "Sentinel or Cluster the two could run in "
                                "either order): downgrade once it completed",
                                h->k.name);
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
    if (l->engine) {
        mn_downgrade(op, keys, kl, args, al);
        return DLOCK_OK;
    }
    if (dloop__send(l, DLOCK__S_RW_DOWNGRADE, 3, keys, kl, 5, args, al,
                    downgrade_reply, op, &op->req) != DLOCK_OK)
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    return DLOCK_OK;
}
