/*
 * check.c - dlock_lock_check(): is TOKEN the fencing token of the hold
 * that owns the lock now? For a resource outside Redis that wants to
 * verify a caller's token before it acts (Chubby's CheckSequencer, etcd's
 * IsOwner inside a transaction): the caller passes the token it got from
 * its acquire, the resource asks the lock's servers.
 *
 * It runs check.lua (read-only) on every node. A node vouches for TOKEN
 * when a live hold there has it: the writer of a lock (its token is the
 * fence hash's n, the last granted: reentry keeps it, every fresh grant
 * raises it), or a live reader or semaphore permit (each has its own
 * token, t:<owner> in the fence hash; n is only the latest of them, and
 * its holder may have left while others still hold). One server: that
 * server; Redlock: a majority, as for the acquire (the fencing round
 * leaves the holder's token on every granting node).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"

/* One node's answer {holds, held, n}: whether a live hold there has the
 * token, whether anything holds the name there, and its last token. 0
 * read, -1 bad. */
static int read_node(const redisReply *r, int *holds, int *held, uint64_t *last)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->integer < 0)
        return -1;
    *holds = r->element[0]->integer == 1;
    *held = r->element[1]->integer == 1;
    *last = (uint64_t)r->element[2]->integer;
    return 0;
}

/* See dlock.h. */
int dlock_lock_check(dlock_client *c, const char *name, uint64_t token)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__keys *keys;
    dlock__cmdbuf b;
    uint64_t newest = 0;
    int i, answered = 0, vouch = 0, held_any = 0, rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (token == 0)
        return dlock__set_error(c, DLOCK_EINVAL, "check: token must be > 0");
    keys = dlock__keys_new(c, name);
    if (keys == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    dlock__cmd_begin(&b, DLOCK__S_CHECK);
    dlock__cmd_key(&b, keys->key, keys->keylen);
    dlock__cmd_key(&b, keys->fkey, keys->fkeylen);
    dlock__cmd_key(&b, keys->rkey, keys->rkeylen);
    dlock__cmd_arg_u64(&b, token);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    for (i = 0; i < c->ns.n; i++) {
        int holds, held;
        uint64_t last;
        if (res[i].status != DLOCK_OK)
            continue;
        if (read_node(res[i].reply, &holds, &held, &last) != 0) {
            dlock__malformed(&c->ns, res, i, "the check script");
            continue;
        }
        answered++;
        if (last > newest)
            newest = last;
        held_any |= held;
        if (holds)
            vouch++;
    }
    if (answered < c->ns.quorum)
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "check");
    else if (vouch >= c->ns.quorum)
        rc = DLOCK_OK;
    else if (token < newest)
        rc = dlock__set_error(c, DLOCK_STALE,
                              "check %s: token %" PRIu64
                              " is older than %" PRIu64 ", the last granted",
                              name, token, newest);
    else if (!held_any)
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "check %s: the lock is free (token %" PRIu64
                              " no longer holds it)",
                              name, token);
    else
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "check %s: token %" PRIu64
                              " is not a live holder's (the last granted "
                              "is %" PRIu64 ")",
                              name, token, newest);
    dlock__results_clear(res, c->ns.n);
    free(keys);
    return rc;
}
