/*
 * election.c - leader election on a lock (dlock_campaign and friends).
 *
 * The leader is the holder of the lock NAME: campaigning is a waiting
 * acquire with the watchdog, the epoch is the lock's fencing token, and a
 * lost lease is lost leadership (reported by the lock's own lost
 * callback and status). Beside the lock, the leader keeps the small hash
 * <prefix>:{NAME}:l (same hash tag, so the same Cluster slot): o = owner
 * id, e = epoch, v = value, s = when it won (server Unix ms). It is
 * written right after the win and by every proclaim (elect_proclaim.lua,
 * only while the owner holds the lock), and it is believed only while its
 * owner holds the lock (elect_leader.lua checks the lock hash in the same
 * script). So the hash needs no renewal of its own: a leader that dies
 * stops leading when its lease runs out, whatever the hash says; the hash
 * is kept for the fence retention so that it does not pile up.
 *
 * Observers sleep on the lock's channel: the release script announces a
 * resignation ("r ID"), the proclaim script a win or a new value ("l
 * EPOCH"); any message wakes a waiter, which then reads the leader again.
 * A leader that died announces nothing, so the wait also ends when the
 * leader's lease would have run out, and at least every second (a
 * message lost with a subscriber connection is covered by the notifier
 * waking everyone when a link drops).
 *
 * Above the lock layer: dlock.h's lock calls, notify.h, the registry's
 * key names, the engine through core.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/retention.h"
#include "notify/notify.h"

/* Observers look at the leader at least this often. */
#define POLL_MS 1000

struct dlock_election {
    dlock_client *c;
    dlock_lock *lock;
    dlock__keys *k; /* the lock's keys and channel */
    char *lkey;     /* <prefix>:{NAME}:l */
    size_t lkeylen;
    int64_t lease_ms;
};

/* Check a leader value. DLOCK_OK or DLOCK_EINVAL with the message set. */
static int check_value(dlock_client *c, const char *value)
{
    if (value != NULL && strlen(value) > DLOCK_VALUE_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "leader value is longer than %d bytes",
                                DLOCK_VALUE_MAX);
    return DLOCK_OK;
}

/* The keys of NAME and its leader hash name, into e. DLOCK_OK or
 * DLOCK_ENOMEM. */
static int election_keys(dlock_client *c, const char *name, dlock__keys **k,
                         char **lkey, size_t *lkeylen)
{
    *k = dlock__keys_new(c, name);
    *lkey = NULL;
    if (*k != NULL)
        *lkey = malloc((*k)->keylen + 3);
    if (*k == NULL || *lkey == NULL) {
        free(*k);
        *k = NULL;
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    }
    memcpy(*lkey, (*k)->key, (*k)->keylen);
    memcpy(*lkey + (*k)->keylen, ":l", 3);
    *lkeylen = (*k)->keylen + 2;
    return DLOCK_OK;
}

/* Free an election handle's own parts (not its lock). */
static void election_free(dlock_election *e)
{
    free(e->k);
    free(e->lkey);
    free(e);
}

/* Write VALUE as e's leader value on every server (elect_proclaim.lua).
 * DLOCK_OK when a majority (one server: it) still has the lock and took
 * it, DLOCK_NOT_OWNER when too few hold it, else the step's error. */
static int proclaim(dlock_election *e, const char *value)
{
    dlock_client *c = e->c;
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    const char *owner = dlock_lock_owner(e->lock);
    int i, yes = 0, answered = 0, rc;

    dlock__cmd_begin(&b, DLOCK__S_ELECT_PROCLAIM);
    dlock__cmd_key(&b, e->k->key, e->k->keylen);
    dlock__cmd_key(&b, e->lkey, e->lkeylen);
    dlock__cmd_arg(&b, owner, strlen(owner));
    dlock__cmd_arg_u64(&b, dlock_lock_token(e->lock));
    dlock__cmd_arg(&b, value != NULL ? value : "",
                   value != NULL ? strlen(value) : 0);
    dlock__cmd_arg_i64(&b, DLOCK__FENCE_RETENTION_MS);
    dlock__cmd_arg(&b, e->k->chan, e->k->chanlen);
    /* A cluster's waiters listen on sharded channels (SSUBSCRIBE). */
    dlock__cmd_arg(&b, c->ns.cluster != NULL ? "1" : "0", 1);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, e->lease_ms),
               res);
    for (i = 0; i < c->ns.n; i++) {
        if (res[i].status != DLOCK_OK)
            continue;
        if (res[i].reply->type != REDIS_REPLY_INTEGER) {
            dlock__malformed(&c->ns, res, i, "the proclaim script");
            continue;
        }
        answered++;
        yes += res[i].reply->integer == 1;
    }
    if (yes >= c->ns.quorum)
        rc = DLOCK_OK;
    else if (answered >= c->ns.quorum)
        rc = dlock__set_error(c, DLOCK_NOT_OWNER,
                              "proclaim %s: the leadership was lost",
                              e->k->name);
    else
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "proclaim");
    dlock__results_clear(res, c->ns.n);
    return rc;
}

/* See dlock.h. */
int dlock_campaign(dlock_election **out, dlock_client *c, const char *name,
                   const char *value, const dlock_acquire_options *opts)
{
    dlock_acquire_options ao;
    dlock_election *e;
    char why[DLOCK__MSGLEN];
    int rc;

    if (out != NULL)
        *out = NULL;
    if (c == NULL)
        return DLOCK_EINVAL;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "campaign: out is NULL");
    rc = dlock__check_name(c, name);
    if (rc == DLOCK_OK)
        rc = dlock__layout_refuse(c, "elections");
    if (rc == DLOCK_OK)
        rc = check_value(c, value);
    if (rc != DLOCK_OK)
        return rc;
    if (opts != NULL) {
        ao = *opts;
    } else {
        dlock_acquire_options_init(&ao);
        ao.wait_ms = -1;
    }
    ao.watchdog = 1; /* leadership lasts while it is renewed */
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    e->c = c;
    e->lease_ms = ao.lease_ms;
    rc = election_keys(c, name, &e->k, &e->lkey, &e->lkeylen);
    if (rc != DLOCK_OK) {
        free(e);
        return rc;
    }
    rc = dlock_lock_acquire_ex(&e->lock, c, name, &ao);
    if (rc == DLOCK_OK)
        rc = proclaim(e, value);
    if (rc != DLOCK_OK) {
        if (e->lock != NULL) {
            snprintf(why, sizeof why, "%s", dlock_errmsg(c));
            dlock_lock_release(e->lock);
            dlock__set_error(c, rc, "campaign %s: won, but %s", name, why);
        }
        election_free(e);
        return rc;
    }
    *out = e;
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_election_proclaim(dlock_election *e, const char *value)
{
    int rc;

    if (e == NULL)
        return DLOCK_EINVAL;
    rc = check_value(e->c, value);
    if (rc != DLOCK_OK)
        return rc;
    rc = dlock_lock_status(e->lock);
    if (rc != DLOCK_OK)
        return dlock__set_error(e->c, rc, "proclaim %s: %s", e->k->name,
                                dlock_strerror(rc));
    return proclaim(e, value);
}

/* Without fence retention (issue 31), after the resignation: delete the
 * leader hash on every server where it is still OWNER's
 * (elect_proclaim.lua's forget mode), so that a resigned name leaves
 * nothing. Best effort: a hash left (a server that did not answer) is
 * never believed (its owner no longer holds the lock) and expires. */
static void forget(dlock_election *e, const char *owner)
{
    dlock_client *c = e->c;
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;

    dlock__cmd_begin(&b, DLOCK__S_ELECT_PROCLAIM);
    dlock__cmd_key(&b, e->k->key, e->k->keylen);
    dlock__cmd_key(&b, e->lkey, e->lkeylen);
    dlock__cmd_arg(&b, owner, strlen(owner));
    dlock__cmd_arg(&b, "0", 1);
    dlock__cmd_arg(&b, "", 0);
    dlock__cmd_arg(&b, "0", 1); /* forget */
    dlock__cmd_arg(&b, e->k->chan, e->k->chanlen);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    dlock__results_clear(res, c->ns.n);
}

/* See dlock.h. */
int dlock_election_resign(dlock_election *e)
{
    char owner[DLOCK_OWNER_MAX];
    int rc;

    if (e == NULL)
        return DLOCK_EINVAL;
    snprintf(owner, sizeof owner, "%s", dlock_lock_owner(e->lock));
    rc = dlock_lock_release(e->lock); /* announces "r ID" to observers */
    if (rc == DLOCK_OK && dlock__fence_retention(e->c) == 0)
        forget(e, owner);
    election_free(e);
    return rc;
}

/* See dlock.h. */
int dlock_election_status(const dlock_election *e)
{
    return e != NULL ? dlock_lock_status(e->lock) : DLOCK_EINVAL;
}

/* See dlock.h. */
uint64_t dlock_election_epoch(const dlock_election *e)
{
    return e != NULL ? dlock_lock_token(e->lock) : 0;
}

/* See dlock.h. */
dlock_lock *dlock_election_lock(const dlock_election *e)
{
    return e != NULL ? e->lock : NULL;
}

/* Copy a string element of r into buf (len bytes), cut to fit. */
static void copy_elem(const redisReply *r, size_t i, char *buf, size_t len)
{
    const redisReply *x = r->element[i];

    snprintf(buf, len, "%.*s", (int)(x->len < len ? x->len : len - 1), x->str);
}

/* Does reply r have the shape elect_leader.lua returns? */
static int leader_reply_ok(const redisReply *r)
{
    size_t want, i;

    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return 0;
    switch (r->element[0]->integer) {
    case 0:
        want = 1;
        break;
    case 1:
        want = 6;
        break;
    case 2:
        want = 4;
        break;
    default:
        return 0;
    }
    if (r->elements != want)
        return 0;
    for (i = 1; i + 1 < want; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING)
            return 0;
    return want == 1 || r->element[want - 1]->type == REDIS_REPLY_INTEGER;
}

/* One node's view of the leader, from a checked elect_leader.lua reply. */
static void node_view(const redisReply *r, dlock_leader_info *v)
{
    memset(v, 0, sizeof *v);
    v->ttl_ms = -1;
    if (r->element[0]->integer == 0)
        return;
    v->leading = 1;
    copy_elem(r, 1, v->owner, sizeof v->owner);
    v->epoch = strtoull(r->element[2]->str, NULL, 10);
    if (r->element[0]->integer == 1) {
        v->proclaimed = 1;
        copy_elem(r, 3, v->value, sizeof v->value);
        v->since_ms = strtoll(r->element[4]->str, NULL, 10);
    }
    v->ttl_ms = r->element[r->elements - 1]->integer;
}

/* See dlock.h. With several servers the leader is the owner a majority
 * name; its epoch, value and since come from the newest of their views
 * (a proclaimed one first), its ttl is the shortest. */
int dlock_leader(dlock_client *c, const char *name, dlock_leader_info *out)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock_leader_info views[DLOCK_MAX_SERVERS];
    char *lkey;
    size_t lkeylen;
    dlock__keys *k;
    dlock__cmdbuf b;
    int i, j, answered = 0, rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "leader: out is NULL");
    memset(out, 0, sizeof *out);
    out->ttl_ms = -1;
    rc = election_keys(c, name, &k, &lkey, &lkeylen);
    if (rc != DLOCK_OK)
        return rc;
    dlock__cmd_begin(&b, DLOCK__S_ELECT_LEADER);
    dlock__cmd_key(&b, k->key, k->keylen);
    dlock__cmd_key(&b, lkey, lkeylen);
    dlock__cmd_key(&b, k->fkey, k->fkeylen);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    for (i = 0; i < c->ns.n; i++) {
        views[i].leading = -1; /* no answer */
        if (res[i].status != DLOCK_OK)
            continue;
        if (!leader_reply_ok(res[i].reply)) {
            dlock__malformed(&c->ns, res, i, "the leader script");
            continue;
        }
        node_view(res[i].reply, &views[i]);
        answered++;
    }
    if (answered < c->ns.quorum) {
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "leader");
        goto done;
    }
    for (i = 0; i < c->ns.n; i++) {
        int agree = 0;
        const dlock_leader_info *best = NULL;

        if (views[i].leading != 1)
            continue;
        for (j = 0; j < c->ns.n; j++) {
            const dlock_leader_info *v = &views[j];

            if (v->leading != 1 || strcmp(v->owner, views[i].owner) != 0)
                continue;
            agree++;
            if (best == NULL || v->proclaimed > best->proclaimed ||
                (v->proclaimed == best->proclaimed && v->epoch > best->epoch))
                best = v;
        }
        if (agree >= c->ns.quorum) {
            *out = *best;
            for (j = 0; j < c->ns.n; j++)
                if (views[j].leading == 1 &&
                    strcmp(views[j].owner, best->owner) == 0 &&
                    views[j].ttl_ms < out->ttl_ms)
                    out->ttl_ms = views[j].ttl_ms;
            break;
        }
    }
    rc = DLOCK_OK;
done:
    dlock__results_clear(res, c->ns.n);
    free(k);
    free(lkey);
    return rc;
}

/* Is b another leader than a (who leads, under which epoch, with which
 * value)? The remaining lease and since do not count. */
static int leader_changed(const dlock_leader_info *a,
                          const dlock_leader_info *b)
{
    return a->leading != b->leading || a->proclaimed != b->proclaimed ||
           a->epoch != b->epoch || strcmp(a->owner, b->owner) != 0 ||
           strcmp(a->value, b->value) != 0;
}

/* When to look again at the latest: the deadline, a second from now, or
 * when the current leader's lease would run out (it may have died). */
static int64_t next_look(int64_t deadline, const dlock_leader_info *cur)
{
    int64_t now = dlock__now_ms(), t = now + POLL_MS;

    if (cur->leading && cur->ttl_ms >= 0 && now + cur->ttl_ms + 5 < t)
        t = now + cur->ttl_ms + 5;
    if (deadline >= 0 && deadline < t)
        t = deadline;
    return t;
}

/* See dlock.h. */
int dlock_leader_wait(dlock_client *c, const char *name,
                      const dlock_leader_info *known, int64_t wait_ms,
                      dlock_leader_info *out)
{
    uint64_t gen;
    dlock__keys *k;
    dlock__waiter *w = NULL;
    int64_t deadline;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    if (known == NULL)
        return dlock_leader(c, name, out);
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (out == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "leader wait: out is NULL");
    gen = atomic_load(&c->cancel_gen);
    deadline = wait_ms >= 0 ? dlock__now_ms() + wait_ms : -1;
    k = dlock__keys_new(c, name);
    if (k == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    /* Subscribe before the first look, so that a change after it is
     * heard. Without a subscription the wait still works, by looking
     * every second. */
    if (dlock__notify_begin(c->notifier, k->chan, k->chanlen, NULL, &w,
                            dlock__now_ms() + c->opts.command_timeout_ms,
                            gen) != DLOCK_OK)
        w = NULL;
    for (;;) {
        int64_t until;

        rc = dlock_leader(c, name, out);
        if (rc != DLOCK_OK)
            break;
        if (leader_changed(known, out))
            break;
        if (deadline >= 0 && dlock__now_ms() >= deadline) {
            rc = dlock__set_error(c, DLOCK_TIMEDOUT,
                                  "leader wait %s: no change", name);
            break;
        }
        until = next_look(deadline, out);
        if (w != NULL) {
            if (dlock__notify_wait(w, until) == DLOCK_CANCELED)
                rc = DLOCK_CANCELED;
        } else {
            while (dlock__now_ms() < until &&
                   atomic_load(&c->cancel_gen) == gen)
                dlock__sleep_until(
                    until < dlock__now_ms() + 50 ? until : dlock__now_ms() + 50,
                    -1);
            if (atomic_load(&c->cancel_gen) != gen)
                rc = DLOCK_CANCELED;
        }
        if (rc == DLOCK_CANCELED) {
            dlock__set_error(c, rc, "leader wait %s: cancelled", name);
            break;
        }
    }
    dlock__notify_end(w);
    free(k);
    return rc;
}
