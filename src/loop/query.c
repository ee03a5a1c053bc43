/*
 * query.c - what a program driving a loop may ask besides its callbacks
 * (include/dlock_loop.h): whether the loop still has work out (to let
 * give-backs reach the server before the program exits), an operation's
 * last failed attempt while it waits on (to say that the servers fail),
 * a hold's status and validity left (the client's watchdog's when it
 * renews the hold), and why a hold was lost. The dlock tool uses them for run, acquire and
 * elect.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/loop_impl.h"

int dlock_loop_pending(const dlock_loop *l)
{
    int n = 0;
    const dlock_op *op;

    if (l == NULL)
        return 0;
    for (op = l->ops; op != NULL; op = op->next)
        n++;
    return n + l->cmd.nreq + dloop__jobs_detached(l);
}

int dlock_op_last_failure(const dlock_op *op, const char **msg)
{
    /* Several locks: the one being acquired now. */
    if (op != NULL && op->type == OP_MULTI && dloop__multi_child(op) != NULL)
        op = dloop__multi_child(op);
    if (msg != NULL)
        *msg = op != NULL && op->last_rc != DLOCK_OK ? op->err : "";
    return op != NULL ? op->last_rc : DLOCK_OK;
}

int64_t dlock_hold_validity_ms(const dlock_hold *h)
{
    int64_t left;
    if (h == NULL || h->status != DLOCK_OK)
        return 0;
    if (h->wd != NULL) { /* the watchdog renews it */
        dloop__wd_status(h, &left, NULL);
        return left;
    }
    left = h->valid_until - dlock__now_ms();
    return left > 0 ? left : 0;
}

int dlock_hold_status(const dlock_hold *h)
{
    if (h == NULL)
        return DLOCK_EINVAL;
    if (h->status == DLOCK_OK && h->wd != NULL)
        return dloop__wd_status(h, NULL, NULL);
    if (h->status == DLOCK_OK && dlock__now_ms() >= h->valid_until)
        return DLOCK_NOT_OWNER;
    return h->status;
}

int dlock_hold_lost_reason(const dlock_hold *h, const char **why)
{
    if (why != NULL)
        *why =
            h != NULL && h->status != DLOCK_OK && h->why != NULL ? h->why : "";
    return h != NULL ? h->status : DLOCK_EINVAL;
}

const char *dlock_loop_warning(dlock_loop *l)
{
    if (l == NULL || !l->sub_refused)
        return "";
    snprintf(l->warn, sizeof l->warn,
             "warning: the server refuses this user the lock's pub/sub "
             "channels (NOPERM), so waiters poll instead of being "
             "notified; allow them with the ACL rule &%s:* (or "
             "allchannels)",
             l->c->key_prefix);
    return l->warn;
}
