/*
 * lock.c - a held lock as the caller sees it (dlock.h): release (all
 * levels or one; or with a fenced value stored in the same script),
 * detach, extend, and the accessors of a handle. The
 * release script and the undo are hold/release.c's, renewal
 * hold/renew.c's, the handles and the record's lifecycle registry.c's
 * (its mutex rules are at the top of that file).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/extend_back.h"
#include "hold/held.h"
#include "hold/kind.h"
#include "hold/metrics.h"
#include "hold/release.h"
#include "hold/renew.h"

/* The start of a release of l's hold (dlock_lock_release, and
 * dlock_lock_fenced_set_release with max_depth 1): from here no renewal
 * result or lost callback concerns the lock (renewal is idempotent on the
 * server: an extend that lands after the delete finds no owner and
 * changes nothing). DLOCK_OK with *depth, the levels held; 1 when the
 * hold has more than max_depth levels (nothing done); or, the lock
 * already lost, the handle dropped and DLOCK_LOST / DLOCK_NOT_OWNER with
 * the message "WHAT: the lock was already lost". */
static int release_begin(dlock_lock *l, int max_depth, const char *what,
                         int *depth)
{
    dlock_client *c = l->client;
    dlock__held *h = l->held;

    pthread_mutex_lock(&c->held_mu);
    *depth = h->depth;
    if (*depth > max_depth) {
        pthread_mutex_unlock(&c->held_mu);
        return 1;
    }
    if (*depth <= 1 && h->life == DLOCK__HELD_LIVE)
        h->life = DLOCK__HELD_RELEASING;
    if (h->wd_handle == l)
        h->wd_handle = NULL;
    while (h->flags & DLOCK__HELD_CB)
        pthread_cond_wait(&c->held_cv, &c->held_mu);
    pthread_mutex_unlock(&c->held_mu);
    /* Only this thread moves h out of the registry: its life may be read
     * without the mutex here. */
    if (atomic_load(&h->state) == DLOCK_LOST ||
        h->life == DLOCK__HELD_UNLINKED || *depth <= 0) {
        int st = atomic_load(&h->state);
        dlock__handle_drop(c, h, l, 1);
        return dlock__set_error(c,
                                st == DLOCK_LOST ? DLOCK_LOST : DLOCK_NOT_OWNER,
                                "%s: the lock was already lost", what);
    }
    return DLOCK_OK;
}

/* The metrics of h's hold ending with a release's status rc: its time
 * held into the hold histogram when released (the hold ended by our
 * release), and the RELEASED event. */
static void hold_ended(dlock_client *c, const dlock__held *h, int rc,
                       int released)
{
    int64_t held_us = dlock__now_us() - h->since_us;
    if (released)
        dlock__hist_add(&c->metrics.hold, held_us);
    dlock__event(c, DLOCK_EVENT_RELEASED, h->k.name, rc, held_us, h->token);
}

/* See dlock.h. */
int dlock_lock_release(dlock_lock *l)
{
    dlock_client *c;
    dlock__held *h;
    dlock__result res[DLOCK_MAX_SERVERS];
    int i, confirmed = 0, notowner = 0, rc, depth;

    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;
    rc = release_begin(l, INT_MAX, "release", &depth);
    if (rc != DLOCK_OK)
        return rc;
    dlock__release_run(c, &h->k, h->owner, dlock__all_nodes(c), depth, h->token,
                       0, 0, h->pins, 1, dlock__deadline(c, 0), res);
    dlock__held_drop_pins(c, h);
    for (i = 0; i < c->ns.n; i++)
        if (res[i].pending) {
            /* Given up on with a majority confirmed: the watchdog's next
             * look (within a second) settles what no thread reuses. */
            dlock__work_due(c, dlock__now_ms() + 1000);
            break;
        }
    for (i = 0; i < c->ns.n; i++) {
        const redisReply *r = res[i].reply;
        if (res[i].status != DLOCK_OK)
            continue;
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > 4)
            dlock__malformed(&c->ns, res, i, "the release script");
        else if (r->integer > 0)
            confirmed++;
        else
            notowner++;
        if (res[i].status == DLOCK_OK && r->integer == 4)
            atomic_store(&c->nopub, 1); /* released; waiters must poll */
    }
    if (confirmed >= c->ns.quorum)
        rc = DLOCK_OK;
    else if (notowner > c->ns.n - c->ns.quorum ||
             (c->ns.n == 1 && notowner == 1))
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "release %s: not the owner (the lease expired "
                              "or another owner has the lock)",
                              h->k.name);
    else
        rc = dlock__fail_all(c, res, "release");
    dlock__results_clear(res, c->ns.n);
    if (depth <= 1) /* the hold ends here */
        hold_ended(c, h, rc, rc == DLOCK_OK);
    dlock__handle_drop(c, h, l, rc != DLOCK_OK);
    return rc;
}

/* See dlock.h. The registry forgets this level: a later release by this
 * owner in this process would expect one level less. */
void dlock_lock_detach(dlock_lock *l)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->client->held_mu);
    if (l->held->life == DLOCK__HELD_LIVE)
        l->held->life = DLOCK__HELD_RELEASING;
    while (l->held->flags & DLOCK__HELD_CB)
        pthread_cond_wait(&l->client->held_cv, &l->client->held_mu);
    pthread_mutex_unlock(&l->client->held_mu);
    dlock__handle_drop(l->client, l->held, l, 1);
}

/* See dlock.h. */
int dlock_lock_extend(dlock_lock *l, int64_t lease_ms)
{
    dlock_client *c;
    dlock__held *h;
    int ok;
    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;
    if (lease_ms <= 0)
        return dlock__set_error(c, DLOCK_EINVAL, "lease_ms must be > 0");
    if (atomic_load(&h->state) == DLOCK_LOST)
        return dlock__set_error(c, DLOCK_LOST, "extend: the lease was lost");
    /* Never beside the watchdog's renewal of h: the server could run that
     * one (the old lease) last, and the validity below would then be
     * longer than the key's. */
    pthread_mutex_lock(&c->held_mu);
    while (h->wd_renewing)
        pthread_cond_wait(&c->held_cv, &c->held_mu);
    h->extending++;
    pthread_mutex_unlock(&c->held_mu);
    /* Over the hold's pinned connections: behind its acquire. */
    dlock__extend_many(c, &h, &lease_ms, 1, &ok, h->pins);
    dlock__held_drop_pins(c, h);
    pthread_mutex_lock(&c->held_mu);
    h->extending--;
    pthread_mutex_unlock(&c->held_mu);
    if (ok == DLOCK_OK) {
        int on = dlock_lock_nodes_holding(l, NULL);
        pthread_mutex_lock(&c->held_mu);
        h->lease_ms = lease_ms;
        h->next_renew_ms = dlock__now_ms() + lease_ms / 3;
        pthread_mutex_unlock(&c->held_mu);
        if (on < c->ns.n)
            dlock__set_error(
                c, DLOCK_OK, "warning: extend %s: held on %d of %d servers%s",
                h->k.name, on, c->ns.n,
                on <= c->ns.quorum ? " (a bare majority: losing one more of "
                                     "them loses the lock)"
                                   : "");
    } else if (ok == DLOCK_NOT_OWNER) {
        dlock__set_error(c, ok, "extend %s: not the owner (expired or taken)",
                         h->k.name);
    } else if (ok == DLOCK_NOT_REPLICATED) {
        dlock__extend_give_back(c, h); /* the old lease, not this one */
    }
    return ok;
}

/* The token of h, a live hold of the string layout taken by the plain
 * SET (token 0: not issued yet): stamped on the server now while the
 * hold is still its owner's (s_stamp.lua), and kept in h. 0, with a
 * message, when the hold is gone or the server did not answer. */
static uint64_t lazy_token(dlock_client *c, dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    uint64_t tok = 0;
    int rc;
    dlock__cmd_begin(&b, DLOCK__S_S_STAMP);
    dlock__cmd_key(&b, h->k.key, h->k.keylen);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    if (res[0].status != DLOCK_OK) {
        dlock__fail_step(c, res, dlock__all_nodes(c), res[0].status, "token");
    } else if ((rc = dlock__stamp_verdict(res[0].reply, &tok)) == DLOCK_OK) {
        pthread_mutex_lock(&c->held_mu);
        if (h->token == 0)
            h->token = tok;
        tok = h->token;
        pthread_mutex_unlock(&c->held_mu);
    } else if (rc == DLOCK_NOT_OWNER) {
        dlock__set_error(c, DLOCK_NOT_OWNER,
                         "token %s: not the owner (expired or taken)",
                         h->k.name);
    } else {
        dlock__set_error(c, rc, "token %s: a malformed reply", h->k.name);
    }
    dlock__results_clear(res, c->ns.n);
    return tok;
}

/* See dlock.h. */
uint64_t dlock_lock_token(const dlock_lock *l)
{
    uint64_t tok;
    if (l == NULL)
        return 0;
    pthread_mutex_lock(&l->client->held_mu);
    tok = l->held->token;
    pthread_mutex_unlock(&l->client->held_mu);
    if (tok == 0 && dlock__string_layout(l->client) &&
        atomic_load(&l->held->state) == DLOCK_OK)
        tok = lazy_token(l->client, l->held);
    return tok;
}

/* See dlock.h. */
int dlock_lock_nodes_holding(const dlock_lock *l, int *servers)
{
    if (servers != NULL)
        *servers = 0;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (servers != NULL)
        *servers = l->client->ns.n;
    return __builtin_popcountll(atomic_load(&l->held->held_on));
}

/* See dlock.h. */
int64_t dlock_lock_validity_ms(const dlock_lock *l)
{
    int64_t left;
    if (l == NULL || atomic_load(&l->held->state) != DLOCK_OK)
        return 0;
    left = atomic_load(&l->held->valid_until_ms) - dlock__now_ms();
    return left > 0 ? left : 0;
}

/* See dlock.h. */
int dlock_lock_status(const dlock_lock *l)
{
    if (l == NULL)
        return DLOCK_EINVAL;
    if (atomic_load(&l->held->state) == DLOCK_LOST)
        return DLOCK_LOST;
    return dlock_lock_validity_ms(l) > 0 ? DLOCK_OK : DLOCK_NOT_OWNER;
}

/* See dlock.h. The reason was written before state LOST was stored. */
int dlock_lock_lost_reason(const dlock_lock *l, const char **why)
{
    const dlock__held *h;
    if (why != NULL)
        *why = "";
    if (l == NULL)
        return DLOCK_EINVAL;
    h = l->held;
    if (atomic_load(&h->state) != DLOCK_LOST)
        return DLOCK_OK;
    if (why != NULL)
        *why = h->lost_why != NULL ? h->lost_why : dlock_strerror(h->lost_code);
    return h->lost_code;
}

/* See dlock.h. */
const char *dlock_lock_name(const dlock_lock *l)
{
    return l != NULL ? l->held->k.name : "";
}

/* See dlock.h. */
const char *dlock_lock_owner(const dlock_lock *l)
{
    return l != NULL ? l->held->owner : "";
}

/* dlock_lock_fenced_set_release: store a fenced value with the lock's
 * token and release the lock in one script (s_set_release.lua), the
 * blocking twin of the loop's dlock_loop_fenced_set_release
 * (src/loop/fenced.c). */

/* Check what the call needs of c and the arguments: DLOCK_OK, or
 * DLOCK_EINVAL with the message set (nothing done). */
static int setrel_check(dlock_client *c, const dlock__held *h, const char *key,
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

/* The status of s_set_release.lua's answer (res: one server's), with the
 * message set; *other 1 when the value's key held something else (not
 * stored, released: DLOCK_EINVAL). */
static int setrel_answer(dlock_client *c, const dlock__held *h, const char *key,
                         dlock__result *res, int *other)
{
    long long t = 0;
    int rc;
    if (res->status != DLOCK_OK)
        return dlock__fail_step(c, res, 1, res->status,
                                "fenced set and release");
    rc = dlock__set_release_verdict(res->reply, &t);
    if (rc == DLOCK_EPROTO)
        return dlock__set_error(c, DLOCK_EPROTO,
                                "fenced set and release: unexpected reply");
    if (rc == DLOCK_NOT_OWNER)
        return dlock__set_error(c, DLOCK_NOT_OWNER,
                                "fenced set and release %s: not the owner "
                                "(the lease expired or another owner has "
                                "the lock): nothing stored",
                                h->k.name);
    *other = rc == DLOCK_EINVAL;
    if (rc == DLOCK_EINVAL)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "fenced set and release %s: %s %s: not "
                                "stored; released",
                                h->k.name, key, DLOCK__FENCED_OTHER);
    if (rc == DLOCK_STALE)
        return dlock__set_error(c, DLOCK_STALE,
                                "fenced set and release %s: the lock's "
                                "token is older than %lld: not stored; "
                                "released",
                                h->k.name, t);
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
    dlock__cmdbuf b;
    char want[DLOCK__SETREL_WANT];
    int rc, depth, other = 0;

    if (l == NULL)
        return DLOCK_EINVAL;
    c = l->client;
    h = l->held;
    rc = setrel_check(c, h, key, value, len);
    if (rc != DLOCK_OK)
        return rc;
    rc = release_begin(l, 1, "fenced set and release", &depth);
    if (rc == 1)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "dlock_lock_fenced_set_release %s: held %d "
                                "times (re-entered): release the inner "
                                "levels first",
                                h->k.name, depth);
    if (rc != DLOCK_OK)
        return rc;
    dlock__set_release_cmd(&b, c, &h->k, h->owner, h->token, want, key,
                           strlen(key), value, len);
    b.cmd.pins = h->pins;
    b.cmd.lock_write = 1;
    dlock__cmd_durable(c, &b.cmd);
    dlock__run(c, 1, &b.cmd, dlock__deadline(c, 0), res);
    dlock__held_drop_pins(c, h);
    rc = setrel_answer(c, h, key, &res[0], &other);
    dlock__results_clear(res, c->ns.n);
    if (rc != DLOCK_OK && rc != DLOCK_STALE && rc != DLOCK_NOT_OWNER &&
        rc != DLOCK_NOT_REPLICATED && !other) {
        /* Not known: give the lock back (a release of a name no longer
         * ours changes nothing). */
        dlock__release_run(c, &h->k, h->owner, 1, 1, h->token, 0, 0, NULL, 0,
                           dlock__deadline(c, 0), back);
        dlock__results_clear(back, c->ns.n);
    }
    hold_ended(c, h, rc, rc == DLOCK_OK || rc == DLOCK_STALE || other);
    dlock__handle_drop(c, h, l, 1);
    return rc;
}
