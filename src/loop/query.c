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

#include "loop/loop_impl.h"
#include "topo/node.h"

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

/* See loop_impl.h. The engine's rule (call.c): a lock written on a
 * replica would not be seen by the master's clients and would vanish at
 * the next resync. */
int dloop__replica_refused(dlock_loop *l, char *err, size_t len)
{
    dlock__node *nd = &l->c->ns.node[0];
    char of[80];

    if (l->c->ns.locate != NULL || l->c->ns.cluster != NULL ||
        !atomic_load(&nd->replica))
        return 0;
    pthread_mutex_lock(&nd->mu);
    snprintf(of, sizeof of, "%s", nd->master_of);
    pthread_mutex_unlock(&nd->mu);
    snprintf(err, len,
             "%s is a replica%s%s%s, not a master: locks are taken on "
             "masters only",
             dlock__node_name(nd), of[0] ? " (of " : "", of, of[0] ? ")" : "");
    return 1;
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
