/*
 * shared.c - holds that several owners have at once, as the API sees
 * them: a semaphore's permits (at most N holders) and a read-write lock's
 * readers (their argument checks, then the one acquire of every kind,
 * dlock__take: src/hold/), the semaphore's limit, and the downgrade of a
 * writer to a reader.
 *
 * A permit or a reader is a held record like a lock's (registry.c) with a
 * kind (held.h: DLOCK__KIND_PERMIT, DLOCK__KIND_READ) whose entry in the
 * kind table (src/hold/kind.c) names its scripts (sem_*.lua, rw_*.lua);
 * the handle, release, extend, the watchdog, lost leases and undo are the
 * lock's. How each kind waits: src/hold/wait.c.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/release.h"
#include "hold/take.h"
#include "hold/verdict.h"

/* The common checks; *found = this thread's registered hold of NAME's
 * kind, or -1. */
static int check_common(dlock_lock **out, dlock_client *c, const char *name,
                        int *found)
{
    dlock__held *h;
    int rc = dlock__check_acquire_args(out, c, name);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->held_mu);
    h = dlock__held_find(c, name, dlock__thread_serial());
    *found = h != NULL ? h->k.kind : -1;
    pthread_mutex_unlock(&c->held_mu);
    return DLOCK_OK;
}

/* A semaphore's own checks: one server, a limit in range. DLOCK_OK, or
 * DLOCK_EINVAL with the message. */
static int check_sem(dlock_client *c, const char *name, int64_t limit)
{
    if (c->ns.n > 1)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "semaphore %s: a semaphore needs one server; "
                                "over Redlock's majorities more than its "
                                "limit could hold permits",
                                name);
    if (limit < 1 || limit > DLOCK_SEM_LIMIT_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "semaphore %s: the limit must be 1 to %d "
                                "(got %" PRId64 ")",
                                name, DLOCK_SEM_LIMIT_MAX, limit);
    return DLOCK_OK;
}

/* Take w of NAME with options opts (NULL: the defaults), once the kind's
 * own checks passed: a fresh hold (permits and readers are never
 * re-entered). */
static int take_shared(dlock_lock **out, dlock_client *c, const char *name,
                       dlock__want *w, const dlock_acquire_options *opts)
{
    dlock_acquire_options defaults;
    int rc = dlock__check_acquire_opts(c, &opts, &defaults, 1);
    if (rc != DLOCK_OK)
        return rc;
    w->lease_ms = opts->lease_ms;
    return dlock__take(out, c, name, w, opts, NULL);
}

/* See dlock.h. */
int dlock_sem_acquire(dlock_lock **out, dlock_client *c, const char *name,
                      int64_t limit, const dlock_acquire_options *opts)
{
    dlock__want w = {.kind = DLOCK__KIND_PERMIT, .limit = limit};
    int found = -1, rc = check_common(out, c, name, &found);

    if (rc == DLOCK_OK)
        rc = check_sem(c, name, limit);
    if (rc != DLOCK_OK)
        return rc;
    if (found == DLOCK__KIND_LOCK || found == DLOCK__KIND_READ)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "%s is a lock this thread holds, not a "
                                "semaphore",
                                name);
    return take_shared(out, c, name, &w, opts);
}

/* See dlock.h. */
int dlock_rw_acquire_shared(dlock_lock **out, dlock_client *c, const char *name,
                            unsigned flags, const dlock_acquire_options *opts)
{
    dlock__want w = {.kind = DLOCK__KIND_READ};
    int found = -1, rc = check_common(out, c, name, &found);

    if (rc == DLOCK_OK)
        rc = dlock__layout_refuse(c, "read locks");
    if (rc != DLOCK_OK)
        return rc;
    if (flags & ~(unsigned)DLOCK_RW_PREFER_READERS)
        return dlock__set_error(c, DLOCK_EINVAL, "read %s: unknown flags %#x",
                                name, flags);
    if (found == DLOCK__KIND_LOCK)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "read %s: this thread holds it exclusively "
                                "(dlock_rw_downgrade turns that into a read "
                                "lock)",
                                name);
    if (found == DLOCK__KIND_PERMIT)
        return dlock__set_error(
            c, DLOCK_EINVAL, "%s is a semaphore, not a read-write lock", name);
    /* A thread that reads NAME already would wait for a writer that
     * waits for it: it goes in. */
    w.ignore_mark =
        (flags & DLOCK_RW_PREFER_READERS) || found == DLOCK__KIND_READ;
    return take_shared(out, c, name, &w, opts);
}

/* ---- the limit, the downgrade ------------------------------------------ */

/* See dlock.h. */
int dlock_sem_set_limit(dlock_client *c, const char *name, int64_t limit,
                        int64_t *old_limit)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__held *h;
    dlock__cmdbuf b;
    const redisReply *r;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_name(c, name);
    if (rc == DLOCK_OK)
        rc = check_sem(c, name, limit);
    if (rc != DLOCK_OK)
        return rc;
    h = dlock__held_new(c, name, "");
    if (h == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    dlock__cmd_begin(&b, DLOCK__S_SEM_LIMIT);
    dlock__cmd_key(&b, h->k.key, h->k.keylen);
    dlock__cmd_key(&b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_key(&b, h->k.qkey, h->k.qkeylen);
    dlock__cmd_key(&b, h->k.qtkey, h->k.qtkeylen);
    dlock__cmd_arg_i64(&b, limit);
    dlock__cmd_arg_i64(&b, DLOCK__FENCE_RETENTION_MS);
    dlock__cmd_arg(&b, h->k.chan, h->k.chanlen);
    dlock__cmd_arg_i64(&b, DLOCK__FAIR_HANDOFF_MS);
    dlock__cmd_arg(&b, c->opts.wait_strategy == DLOCK_WAIT_FAIR ? "1" : "0", 1);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    r = res[0].reply;
    if (res[0].status != DLOCK_OK)
        rc = dlock__fail_step(c, res, 1, res[0].status, "set limit");
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             dlock__elem_int(r, 0) == 1) {
        if (old_limit != NULL)
            *old_limit = dlock__elem_int(r, 1);
        rc = DLOCK_OK;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               dlock__elem_int(r, 0) == -3 &&
               r->element[1]->type == REDIS_REPLY_STRING)
        rc = dlock__set_error(c, DLOCK_EINVAL, "%s is a %s, not a semaphore",
                              name, r->element[1]->str);
    else
        rc = dlock__set_error(c, DLOCK_EPROTO, "set limit: unexpected reply");
    dlock__results_clear(res, c->ns.n);
    dlock__held_free(h);
    return rc;
}

/* Give back both forms a failed downgrade of the reader r may have left
 * on the nodes in mask: the write hold (release.lua, through a record of
 * the lock's kind under the same owner) and the read lease
 * (rw_release.lua). */
static void downgrade_undo(dlock_client *c, dlock__held *r, uint64_t mask,
                           uint64_t token, int64_t lease_ms)
{
    dlock__held *wr = dlock__held_new(c, r->k.name, r->owner);
    if (wr != NULL) { /* out of memory: the write hold runs out */
        wr->thread = r->thread;
        wr->attempt_end_ms = r->attempt_end_ms;
        dlock__undo_acquire(c, wr, mask, 1, token, lease_ms, 0, 1);
        dlock__held_free(wr);
    }
    dlock__undo_acquire(c, r, mask, 1, token, lease_ms, 0, 1);
}

/* Send rw_downgrade.lua for the reader r (its writer's token, lease_ms)
 * to every node; the answers in res. */
static void downgrade_send(dlock_client *c, const dlock__held *r,
                           uint64_t token, int64_t lease_ms, dlock__result *res)
{
    dlock__cmdbuf b;
    char relid[64];
    size_t n = dlock__request_id(c, relid);
    dlock__cmd_begin(&b, DLOCK__S_RW_DOWNGRADE);
    dlock__cmd_key(&b, r->k.key, r->k.keylen);
    dlock__cmd_key(&b, r->k.fkey, r->k.fkeylen);
    dlock__cmd_key(&b, r->k.rkey, r->k.rkeylen);
    dlock__cmd_arg(&b, r->owner, strlen(r->owner));
    dlock__cmd_arg_u64(&b, token);
    dlock__cmd_arg_i64(&b, lease_ms);
    dlock__cmd_arg(&b, r->k.chan, r->k.chanlen);
    dlock__cmd_arg(&b, relid, n);
    dlock__cmd_durable(c, &b.cmd); /* it grants a read lease */
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, lease_ms),
               res);
}

/* The status, with its message, of a downgrade of r that did not get a
 * majority. */
static int downgrade_failed(dlock_client *c, const dlock__held *r,
                            const dlock__result *res,
                            const dlock__downgraded *d)
{
    if (d->no > c->ns.n - c->ns.quorum)
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "downgrade %s: not the owner (the lease had "
                                "run out)",
                                r->k.name);
    if (d->unacked > 0 && d->ok + d->unacked >= c->ns.quorum)
        return dlock__set_error(c, DLOCK_NOT_REPLICATED,
                                "downgrade %s: done, but fewer than the %d "
                                "replicas asked for acknowledged it within "
                                "%" PRId64 " ms: the write and read holds "
                                "are given back",
                                r->k.name, c->ns.wait_replicas,
                                c->ns.wait_timeout_ms);
    return dlock__fail_all(c, res, "downgrade");
}

/* The checks of a downgrade of l: DLOCK_OK to go on, or the status with
 * its message; *done set when l is gone (a lost hold: released). */
static int downgrade_check(dlock_lock **out, dlock_lock *l, int *done)
{
    dlock__held *h;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    h = l->held;
    if (out == NULL)
        return dlock__set_error(l->client, DLOCK_EINVAL, "out is NULL");
    if (dlock__string_layout(l->client))
        return dlock__layout_refuse(l->client, "downgrade");
    if (h->k.kind != DLOCK__KIND_LOCK || h->depth != 1)
        return dlock__set_error(l->client, DLOCK_EINVAL,
                                "downgrade %s: not an exclusive hold held "
                                "once (re-entered levels would lose their "
                                "lock); the handle is unchanged",
                                h->k.name);
    if (atomic_load(&h->state) == DLOCK_LOST) {
        *done = 1;
        return dlock_lock_release(l);
    }
    return DLOCK_OK;
}

/* See dlock.h. The writer's record is detached first (renewal of it
 * stops, and its "not owner" after the downgrade is no loss); the reader
 * is a new record under the same owner id. */
int dlock_rw_downgrade(dlock_lock **out, dlock_lock *l)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock_acquire_options o;
    dlock_client *c;
    dlock__held *r;
    dlock__downgraded d;
    uint64_t token;
    int64_t t0, valid;
    int done = 0, rc = downgrade_check(out, l, &done);

    if (rc != DLOCK_OK || done)
        return rc;
    c = l->client;
    r = dlock__held_new(c, l->held->k.name, l->held->owner);
    if (r == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    r->k.kind = DLOCK__KIND_READ;
    r->thread = dlock__thread_serial();
    token = l->held->token;
    dlock_acquire_options_init(&o);
    o.lease_ms = l->held->lease_ms;
    o.watchdog = l->held->watchdog;
    o.on_lost = l->held->on_lost;
    o.on_lost_userdata = l->held->on_lost_ud;
    dlock_lock_detach(l);

    t0 = dlock__now_ms();
    downgrade_send(c, r, token, o.lease_ms, res);
    dlock__downgrade_count(&c->ns, c->ns.wait_replicas, res, c->ns.n, &d);
    valid = dlock__valid_until(c, t0, o.lease_ms);
    if (d.ok >= c->ns.quorum && valid > dlock__now_ms()) {
        dlock__got g = {.token = token,
                        .depth = 1,
                        .nodes = d.granted,
                        .valid_until = valid};
        dlock__results_clear(res, c->ns.n);
        return dlock__record(c, r, &o, &g, 1, dlock__now_us(), out);
    }
    rc = downgrade_failed(c, r, res, &d);
    dlock__results_clear(res, c->ns.n);
    if ((d.granted | d.unknown) != 0)
        downgrade_undo(c, r, d.granted | d.unknown, token, o.lease_ms);
    dlock__held_free(r);
    return rc;
}
