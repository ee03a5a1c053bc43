/*
 * waiters.c - counting the waiters of a lock for dlock_lock_inspect().
 *
 * Waiters leave different traces. A process waiting by notification (the
 * default strategy) is subscribed to the lock's release channel: one
 * subscription per process, whatever its number of waiting threads (the
 * notifier shares it), kept up to 2 s after its last waiter left (the
 * linger, docs/design.md). So PUBSUB NUMSUB of the channel counts waiting
 * processes, give or take one that has just stopped waiting. Fair-mode
 * waiters are queued one per process (the inspect script's queue length);
 * a process's other waiting threads take turns in-process.
 * Spin-mode waiters leave no trace at all.
 *
 * waiters.lua asks NUMSUB from inside a script, so that the channel
 * travels as a key (routed with the lock's slot) through the same step
 * as every other operation.
 */
#include "api/waiters.h"

/* See waiters.h. */
void dlock__count_waiters(dlock_client *c, const dlock__keys *k,
                          int64_t deadline_ms, dlock_info *out)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int i;

    out->notify_waiters = -1;
    dlock__cmd_begin(&b, DLOCK__S_WAITERS);
    dlock__cmd_key(&b, k->chan, k->chanlen);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, deadline_ms, res);
    for (i = 0; i < c->ns.n; i++) {
        const redisReply *r = res[i].reply;
        /* Every node sees every waiting process (a waiter subscribes on
         * all of them): the most any node counts. */
        if (res[i].status == DLOCK_OK && r->type == REDIS_REPLY_INTEGER &&
            r->integer >= 0 && r->integer > out->notify_waiters)
            out->notify_waiters = r->integer;
    }
    dlock__results_clear(res, c->ns.n);
    out->waiters =
        out->notify_waiters < 0
            ? -1
            : out->notify_waiters + (out->fair_queue > 0 ? out->fair_queue : 0);
}
