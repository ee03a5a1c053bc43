/*
 * query.c - what a program driving a loop may ask besides its callbacks
 * (include/dlock_loop.h): whether the loop still has work out (to let
 * give-backs reach the server before the program exits), an operation's
 * last failed attempt while it waits on (to say that the servers fail),
 * and why a hold was lost. The dlock tool uses them for run, acquire and
 * elect.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop_impl.h"

int dlock_loop_pending(const dlock_loop *l)
{
    int n = 0;
    const dlock_op *op;

    if (l == NULL)
        return 0;
    for (op = l->ops; op != NULL; op = op->next)
        n++;
    return n + l->cmd.nreq;
}

int dlock_op_last_failure(const dlock_op *op, const char **msg)
{
    if (msg != NULL)
        *msg = op != NULL && op->last_rc != DLOCK_OK ? op->err : "";
    return op != NULL ? op->last_rc : DLOCK_OK;
}

/* See loop_impl.h. */
void dloop__lost_why(dlock_hold *h, int status)
{
    const char *last = h->loop->renew_err;
    char text[LOOP_ERRLEN + 96];

    if (status == DLOCK_NOT_OWNER)
        snprintf(text, sizeof text,
                 "the servers say it is no longer this owner's: its key "
                 "expired or was deleted, or another owner holds it");
    else if (last[0] != '\0')
        snprintf(text, sizeof text, "renewals failed: %s", last);
    else
        snprintf(text, sizeof text,
                 "renewals failed: the lease ran out before one was "
                 "confirmed (the loop did not run in time)");
    free(h->why);
    h->why = strdup(text);
}

int dlock_hold_lost_reason(const dlock_hold *h, const char **why)
{
    if (why != NULL)
        *why =
            h != NULL && h->status != DLOCK_OK && h->why != NULL ? h->why : "";
    return h != NULL ? h->status : DLOCK_EINVAL;
}
