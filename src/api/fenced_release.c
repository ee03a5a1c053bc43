/*
 * fenced_release.c - dlock_lock_fenced_set_release: store a fenced value
 * with the lock's token and release the lock in one script
 * (s_set_release.lua), the blocking twin of the event loop's
 * dlock_loop_fenced_set_release (src/loop/fenced.c). One server (a plain
 * URL or a Sentinel group), the string layout, an exclusive lock held
 * once: the lock key and the value's key must be on one server.
 *
 * The handle's end follows dlock_lock_release (lock.c): the same registry
 * steps before and after the step, only the script differs.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/metrics.h"
#include "hold/release.h"

/* Check what the call needs of c and the arguments: DLOCK_OK, or
 * DLOCK_EINVAL with the message set (nothing done). */
static int check(dlock_client *c, const dlock__held *h, const char *key,
                 const void *value, size_t len)
{
    int rc = dlock__check_key(c, key);
    if (rc != DLOCK_OK)
        return rc;
    if (value == NULL && len > 0)
        return dlock__set_error(c, DLOCK_EINVAL, "value is NULL");
    if (c->ns.n != 1 || c->ns.cluster != NULL || !dlock__string_layout(c) ||
        h->k.kind != DLOCK__KIND_LOCK)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "dlock_lock_fenced_set_release: needs an "
                                "exclusive lock on one server (or a "
                                "Sentinel group) with the string layout "
                                "(else: dlock_fenced_set, then "
                                "dlock_lock_release)");
    return DLOCK_OK;
}

/* The status of s_set_release.lua's answer {stored, t, r} (res: one
 * server's), with the message set. */
static int answer(dlock_client *c, const dlock__held *h, dlock__result *res)
{
    const redisReply *r = res->reply;
    long long stored;
    if (res->status != DLOCK_OK)
        return dlock__fail_step(c, res, 1, res->status,
                                "fenced set and release");
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER)
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced set and release: unexpected reply");
    stored = r->element[0]->integer;
    if (stored < 0)
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "fenced set and release %s: not the owner "
                                "(the lease expired or another owner has "
                                "the lock): nothing stored",
                                h->k.name);
    if (stored == 0)
        return dlock__set_error(c, DLOCK_STALE,
                                "fenced set and release %s: the lock's "
                                "token is older than %lld: not stored; "
                                "released",
                                h->k.name, r->element[1]->integer);
    if (c->ns.wait_replicas > 0 && res->acks < c->ns.wait_replicas)
        return dlock__set_error(c, DLOCK_NOT_REPLICATED,
                                "fenced set and release %s: done, but %lld "
                                "of the %d replicas asked for acknowledged "
                                "it",
                                h->k.name, res->acks < 0 ? 0 : res->acks,
                                c->ns.wait_replicas);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_lock_fenced_set_release(dlock_lock *l, const char *key,
                                  const void *value, size_t len)
{
    dlock_client *c;
    dlock__held *h;
    dlock__result res[DLOCK_MAX_SERVERS], back[DLOCK_MAX_SERVERS];
    dlock__release rel;
    dlock__cmdbuf b;
    char relid[64];
    int rc, depth;

    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;
    rc = check(c, h, key, value, len);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->held_mu);
    depth = h->depth;
    if (depth > 1) {
        pthread_mutex_unlock(&c->held_mu);
        return dlock__set_error(c, DLOCK_EINVAL,
                                "dlock_lock_fenced_set_release %s: held %d "
                                "times (re-entered): release the inner "
                                "levels first",
                                h->k.name, depth);
    }
    /* As dlock_lock_release: no renewal or lost callback concerns it
     * from here. */
    if (depth == 1 && h->life == DLOCK__HELD_LIVE)
        h->life = DLOCK__HELD_RELEASING;
    if (h->wd_handle == l)
        h->wd_handle = NULL;
    while (h->flags & DLOCK__HELD_CB)
        pthread_cond_wait(&c->held_cv, &c->held_mu);
    pthread_mutex_unlock(&c->held_mu);
    if (atomic_load(&h->state) == DLOCK_LOST ||
        h->life == DLOCK__HELD_UNLINKED || depth <= 0) {
        int st = atomic_load(&h->state);
        dlock__handle_drop(c, h, l, 1);
        return dlock__set_error(c,
                                st == DLOCK_LOST ? DLOCK_LOST : DLOCK_NOT_OWNER,
                                "fenced set and release: the lock was "
                                "already lost: nothing stored");
    }
    memset(&rel, 0, sizeof rel);
    rel.owner = h->owner;
    rel.depth = 1;
    rel.token = h->token;
    rel.relid = relid;
    rel.relidlen = dlock__request_id(c, relid);
    dlock__release_cmd(&b, c, &h->k, &rel);
    b.cmd.script = DLOCK__S_S_SET_RELEASE;
    dlock__cmd_key(&b, key, strlen(key));
    dlock__cmd_arg(&b, value != NULL ? value : "", len);
    b.cmd.pins = h->pins;
    b.cmd.lock_write = 1;
    dlock__cmd_durable(c, &b.cmd);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    dlock__held_drop_pins(c, h);
    rc = answer(c, h, &res[0]);
    dlock__results_clear(res, c->ns.n);
    if (rc != DLOCK_OK && rc != DLOCK_STALE && rc != DLOCK_NOT_OWNER &&
        rc != DLOCK_NOT_REPLICATED) {
        /* Not known: give the lock back (a release of a name no longer
         * ours changes nothing). */
        dlock__release_run(c, &h->k, h->owner, 1, 1, h->token, 0, 0, NULL, 0,
                           dlock__deadline(c, 0), back);
        dlock__results_clear(back, c->ns.n);
    }
    {
        int64_t held_us = dlock__now_us() - h->since_us;
        if (rc == DLOCK_OK || rc == DLOCK_STALE)
            dlock__hist_add(&c->metrics.hold, held_us);
        dlock__event(c, DLOCK_EVENT_RELEASED, h->k.name, rc, held_us, h->token);
    }
    dlock__handle_drop(c, h, l, 1);
    return rc;
}
