/*
 * release.c - giving back what a hold has on the servers: the release
 * script of the hold's kind run on its nodes (a release is done once a
 * majority confirmed it), and the undo of what an acquire may have taken,
 * queued for the watchdog thread to retry (client->undos) where a node
 * did not answer (see release.h).
 *
 * One code path serves a single server and Redlock: every step runs a
 * script on the nodes (core.h: dlock__run) and counts the answers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "hold/retention.h"
#include "hold/release.h"

/* ---- the release command of each kind --------------------------------- */

/* See release.h. */
void dlock__lock_keys(dlock__cmdbuf *b, const dlock__keys *k, int nkeys)
{
    dlock__cmd_key(b, k->key, k->keylen);
    if (nkeys > 1)
        dlock__cmd_key(b, k->fkey, k->fkeylen);
    if (nkeys > 2)
        dlock__cmd_key(b, k->qkey, k->qkeylen);
    if (nkeys > 3)
        dlock__cmd_key(b, k->qtkey, k->qtkeylen);
}

/* release.lua. With one server the lock is handed to the first live fair
 * waiter; with several, that waiter is only woken. */
void dlock__lock_release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__keys *k, const dlock__release *r)
{
    if (dlock__string_layout(c)) {
        /* s_release.lua: 1 key and 3 arguments (the fence hash with
         * retention, the SPUBLISH flag in a Cluster). */
        dlock__cmd_begin(b, DLOCK__S_S_RELEASE);
        dlock__lock_keys(b, k, dlock__fence_retention(c) != 0 ? 2 : 1);
        dlock__cmd_arg(b, r->owner, strlen(r->owner));
        dlock__cmd_arg_i64(b, r->depth);
        dlock__cmd_arg_u64(b, r->token);
        if (c->ns.cluster != NULL)
            dlock__cmd_arg(b, "1", 1);
        return;
    }
    dlock__cmd_begin(b, DLOCK__S_RELEASE);
    dlock__lock_keys(b, k, 4);
    dlock__cmd_arg(b, r->owner, strlen(r->owner));
    dlock__cmd_arg_i64(b, r->depth);
    dlock__cmd_arg_u64(b, r->token);
    dlock__cmd_arg(b, k->chan, k->chanlen);
    dlock__cmd_arg_i64(b, c->ns.n > 1 ? 0 : DLOCK__FAIR_HANDOFF_MS);
    dlock__cmd_arg_i64(b, dlock__fence_retention(c)); /* 0: keep none */
    dlock__cmd_arg(b, r->relid, r->relidlen);
    if (c->ns.cluster != NULL || r->ticket > 0) /* SPUBLISH: sharded */
        dlock__cmd_arg(b, c->ns.cluster != NULL ? "1" : "0", 1);
    if (r->ticket > 0) {
        dlock__cmd_arg_u64(b, r->ticket);
        dlock__cmd_arg_i64(b, DLOCK__WAITER_TTL_MS);
    }
}

/* sem_release.lua for OWNER, leaving the queue too when leave is set;
 * without fence retention it deletes a semaphore left free and unqueued
 * (ARGV[7] '0'). */
static void permit_release_args(dlock__cmdbuf *b, const dlock_client *c,
                                const dlock__keys *k, const char *owner,
                                int leave)
{
    int none = dlock__fence_retention(c) == 0;
    dlock__cmd_begin(b, DLOCK__S_SEM_RELEASE);
    dlock__lock_keys(b, k, 4);
    dlock__cmd_arg(b, owner, strlen(owner));
    dlock__cmd_arg(b, k->chan, k->chanlen);
    dlock__cmd_arg_i64(b, DLOCK__FAIR_HANDOFF_MS);
    dlock__cmd_arg(b, c->opts.wait_strategy == DLOCK_WAIT_FAIR ? "1" : "0", 1);
    dlock__cmd_arg_i64(b, DLOCK__FENCE_RETENTION_MS);
    if (leave || none)
        dlock__cmd_arg(b, leave ? "1" : "0", 1);
    if (none)
        dlock__cmd_arg(b, "0", 1);
}

/* sem_release.lua: the freed permit goes to the first live waiter,
 * handed over in FIFO mode, else woken. */
void dlock__permit_release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                               const dlock__keys *k, const dlock__release *r)
{
    permit_release_args(b, c, k, r->owner, 0);
}

/* See release.h. */
void dlock__permit_leave_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__keys *k, const char *owner)
{
    permit_release_args(b, c, k, owner, 1);
}

/* rw_release.lua (the last reader out wakes a fair writer: the queue). */
void dlock__reader_release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                               const dlock__keys *k, const dlock__release *r)
{
    dlock__cmd_begin(b, DLOCK__S_RW_RELEASE);
    dlock__cmd_key(b, k->key, k->keylen);
    dlock__cmd_key(b, k->fkey, k->fkeylen);
    dlock__cmd_key(b, k->rkey, k->rkeylen);
    dlock__cmd_key(b, k->qkey, k->qkeylen);
    dlock__cmd_arg(b, r->owner, strlen(r->owner));
    dlock__cmd_arg(b, k->chan, k->chanlen);
    dlock__cmd_arg(b, r->relid, r->relidlen);
    if (dlock__fence_retention(c) == 0) /* the last reader deletes all */
        dlock__cmd_arg(b, "0", 1);
}

/* See release.h. */
void dlock__release_cmd(dlock__cmdbuf *b, const dlock_client *c,
                        const dlock__keys *k, const dlock__release *r)
{
    if (k->kind == DLOCK__KIND_PERMIT)
        dlock__permit_release_cmd(b, c, k, r);
    else if (k->kind == DLOCK__KIND_READ)
        dlock__reader_release_cmd(b, c, k, r);
    else
        dlock__lock_release_cmd(b, c, k, r);
}

/* See release.h. */
void dlock__set_release_cmd(dlock__cmdbuf *b, dlock_client *c,
                            const dlock__keys *k, const char *owner,
                            uint64_t token, char want[DLOCK__SETREL_WANT],
                            const char *key, size_t kl, const void *value,
                            size_t len)
{
    size_t n = strlen(owner);
    /* The lock's value as this hold of depth 1 left it, one argument
     * (the script compares it whole): "<owner> 1 <token>". */
    memcpy(want, owner, n);
    memcpy(want + n, " 1 ", 3);
    n += 3;
    n += dlock__fmt_u64(want + n, token);
    dlock__cmd_begin(b, DLOCK__S_S_SET_RELEASE);
    dlock__lock_keys(b, k, dlock__fence_retention(c) != 0 ? 2 : 1);
    dlock__cmd_key(b, key, kl);
    dlock__cmd_arg(b, want, n);
    dlock__cmd_arg(b, value != NULL ? value : "", len);
}

/* See release.h. */
int dlock__set_release_verdict(const redisReply *r, long long *t)
{
    long long stored;
    int n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING && r->len > 0 &&
        r->len < 20 && strspn(r->str, "0123456789") == r->len &&
        r->str[0] != '0') {
        /* The common case stored and released: the token alone. */
        errno = 0;
        *t = strtoll(r->str, NULL, 10);
        if (errno == ERANGE)
            return DLOCK_EPROTO;
        stored = 1;
    } else if (r != NULL && r->type == REDIS_REPLY_STRING && r->len < 64 &&
               sscanf(r->str, "%lld %lld 1%n", &stored, t, &n) == 2 &&
               (size_t)n == r->len) {
        /* The common case's answer, one string "<stored> <t> 1". */
    } else if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
               r->element[0]->type != REDIS_REPLY_INTEGER ||
               r->element[1]->type != REDIS_REPLY_INTEGER) {
        return DLOCK_EPROTO;
    } else {
        stored = r->element[0]->integer;
        *t = r->element[1]->integer;
    }
    return stored == -2  ? DLOCK_EINVAL
           : stored < 0  ? DLOCK_NOT_OWNER
           : stored == 0 ? DLOCK_STALE
                         : DLOCK_OK;
}

/* See release.h. */
int dlock__fenced_split(const char *s, size_t n, uint64_t *fence,
                        const char **value, size_t *vlen)
{
    uint64_t f = 0;
    size_t i = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (f > (UINT64_MAX - 9) / 10)
            return 0;
        f = f * 10 + (uint64_t)(s[i] - '0');
        i++;
    }
    if (i == 0 || s[0] == '0' || (i < n && s[i] != ' '))
        return 0;
    *fence = f;
    *value = i < n ? s + i + 1 : NULL;
    *vlen = i < n ? n - i - 1 : 0;
    return 1;
}

/* ---- running it --------------------------------------------------------- */

/* See release.h. */
int dlock__release_enough(const dlock__result *res, uint64_t waiting, int n,
                          const void *ud)
{
    int i, ok = 0;
    for (i = 0; i < n; i++)
        if (!(waiting & (1ULL << i)) && res[i].status == DLOCK_OK &&
            res[i].reply->type == REDIS_REPLY_INTEGER &&
            res[i].reply->integer >= 1 && res[i].reply->integer <= 4)
            ok++;
    return ok >= *(const int *)ud;
}

/* See release.h. With one server a fair undo hands the lock to the first
 * live fair waiter; with several, that waiter is only woken (it needs a
 * majority). */
void dlock__release_run(dlock_client *c, const dlock__keys *k,
                        const char *owner, uint64_t mask, int depth,
                        uint64_t token, int eval, uint64_t ticket,
                        dlock__conn **pins, int early, int64_t deadline_ms,
                        dlock__result *res)
{
    dlock__cmdbuf b;
    char relid[64];
    dlock__release r = {.owner = owner,
                        .depth = depth,
                        .token = token,
                        .ticket = ticket,
                        .relid = relid};

    r.relidlen = dlock__request_id(c, relid);
    dlock__release_cmd(&b, c, k, &r);
    b.cmd.eval = eval;
    b.cmd.give_back = 1;
    b.cmd.pins = pins;
    if (c->ns.n > 1 && early) {
        /* Done once a majority confirmed: the rest are given up on, and
         * an answer NOSCRIPT among them makes their connection send the
         * source (dlock__cmd.enough), so no node keeps the lock for
         * want of a cached script. */
        b.cmd.enough = dlock__release_enough;
        b.cmd.enough_ud = &c->ns.quorum;
    }
    dlock__run(c, mask, &b.cmd, deadline_ms, res);
}

/* Send the undo, waiting for answers until deadline_ms; returns the
 * nodes that did not answer. A deadline already past still sends it on
 * a connection at hand (the pooled one that carried the acquire, so it
 * reaches Redis after it) without waiting. */
static uint64_t undo_send_by(dlock_client *c, const dlock__keys *k,
                             const char *owner, uint64_t mask, int depth,
                             uint64_t token, uint64_t ticket, int eval,
                             dlock__conn **pins, int64_t deadline_ms)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    int i;

    if (mask == 0)
        return 0;
    dlock__release_run(c, k, owner, mask, depth, token, eval, ticket, pins, 0,
                       deadline_ms, res);
    /* Any answer settles a node (released, or nothing to release). */
    for (i = 0; i < c->ns.n; i++)
        if ((mask & (1ULL << i)) && res[i].status != DLOCK_EIO &&
            res[i].status != DLOCK_ETIMEDOUT)
            mask &= ~(1ULL << i);
    dlock__results_clear(res, c->ns.n);
    return mask;
}

/* See release.h. */
uint64_t dlock__undo_send(dlock_client *c, const dlock__keys *k,
                          const char *owner, uint64_t mask, int depth,
                          uint64_t token, uint64_t ticket, int eval,
                          dlock__conn **pins)
{
    return undo_send_by(c, k, owner, mask, depth, token, ticket, eval, pins,
                        dlock__deadline(c, 0));
}

/* See release.h. */
void dlock__undo_queue(dlock_client *c, const dlock__held *h, uint64_t mask,
                       int depth, uint64_t token, int64_t until_ms)
{
    dlock__undo *u = dlock__undo_new(c, h->k.name, h->owner);
    if (u == NULL)
        return; /* the lease runs out by itself */
    u->k.kind = h->k.kind;
    u->nodes = mask;
    u->depth = depth;
    u->token = token;
    u->until_ms = until_ms;
    pthread_mutex_lock(&c->held_mu);
    u->next = c->undos;
    c->undos = u;
    pthread_mutex_unlock(&c->held_mu);
    dlock__work_due(c, 0); /* retry at once */
}

/* See release.h. */
uint64_t dlock__undo_acquire(dlock_client *c, dlock__held *h, uint64_t mask,
                             int depth, uint64_t token, int64_t lease_ms,
                             uint64_t ticket, int eval)
{
    int64_t t0 = dlock__now_ms();
    uint64_t left =
        undo_send_by(c, &h->k, h->owner, mask, depth, token, ticket, eval,
                     h->pins, dlock__deadline_by(c, 0, h->attempt_end_ms));
    dlock__held_drop_pins(c, h);
    if (left != 0)
        dlock__undo_queue(c, h, left, depth, token, t0 + lease_ms);
    return left;
}
