/*
 * renew.c - renewing leases: every due hold of a kind in one script call
 * per node (extend.lua and its kin take many keys), in a cluster one call
 * per kind and slot, all sent at once (engine/cluster_batch.h); the
 * verdict of each renewal; and, with Redlock, the take-back of a renewed
 * lock on the servers that answered it is not held there (see renew.h).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/slot.h"
#include "engine/cluster_batch.h"
#include "hold/core.h"
#include "hold/held.h"
#include "hold/metrics.h"
#include "hold/holder.h"
#include "hold/kind.h"
#include "hold/renew.h"

/* ---- extend: one renewal call ------------------------------------------- */

/* One renewal call: the extend script of one kind over some locks, with
 * the keys and arguments it points to (owned). */
typedef struct ext_call {
    dlock__cmd cmd;
    const char **keys;
    size_t *keylens;
    char *ikeys;
    const char **args;
    size_t *arglens;
    char (*sl)[24];
    int64_t maxlease;
} ext_call;

/* Free what ext_build allocated (e zeroed: nothing). */
static void ext_free(ext_call *e)
{
    free(e->ikeys);
    free(e->keys);
    free(e->keylens);
    free(e->args);
    free(e->arglens);
    free(e->sl);
    memset(e, 0, sizeof *e);
}

/*
 * Build the renewal call of locks hs[0..n-1] (all of one kind) to their
 * leases: extend.lua (holder_extend.lua with holder info), sem_extend.lua
 * or rw_extend.lua, one key (a reader: two) and two arguments per lock,
 * a lock write (WAIT with wait_replicas). DLOCK_OK or DLOCK_ENOMEM (e
 * freed).
 */
static int ext_build(dlock_client *c, ext_call *e, dlock__held **hs,
                     const int64_t *leases, int n, dlock__conn **pins)
{
    /* A reader's renewal names its lock hash and the readers' set; with
     * holder info, a lock's info keys follow the lock keys (holder.c). */
    const dlock__kind *kd = dlock__kind_of(hs[0]->k.kind);
    int per = kd->extend_keys, info = kd->holder_info && dlock__holder_on(c);
    int nk = info ? 2 * n : n * per;
    int i;

    memset(e, 0, sizeof *e);
    e->keys = calloc((size_t)nk, sizeof *e->keys);
    e->keylens = calloc((size_t)nk, sizeof *e->keylens);
    e->args = calloc((size_t)n * 2, sizeof *e->args);
    e->arglens = calloc((size_t)n * 2, sizeof *e->arglens);
    e->sl = calloc((size_t)n, sizeof *e->sl);
    if (e->keys == NULL || e->keylens == NULL || e->args == NULL ||
        e->arglens == NULL || e->sl == NULL) {
        ext_free(e);
        return DLOCK_ENOMEM;
    }
    for (i = 0; i < n; i++) {
        e->keys[per * i] = hs[i]->k.key;
        e->keylens[per * i] = hs[i]->k.keylen;
        if (per == 2) {
            e->keys[2 * i + 1] = hs[i]->k.rkey;
            e->keylens[2 * i + 1] = hs[i]->k.rkeylen;
        }
        dlock__fmt_i64(e->sl[i], leases[i]);
        e->args[2 * i] = hs[i]->owner;
        e->arglens[2 * i] = strlen(hs[i]->owner);
        e->args[2 * i + 1] = e->sl[i];
        e->arglens[2 * i + 1] = strlen(e->sl[i]);
        if (leases[i] > e->maxlease)
            e->maxlease = leases[i];
    }
    if (info) {
        size_t total = 0;
        char *ik;
        for (i = 0; i < n; i++)
            total += hs[i]->k.keylen + sizeof DLOCK__HOLDER_SUFFIX;
        ik = e->ikeys = malloc(total);
        if (e->ikeys == NULL) {
            ext_free(e);
            return DLOCK_ENOMEM;
        }
        for (i = 0; i < n; i++) {
            e->keys[n + i] = ik;
            e->keylens[n + i] =
                dlock__holder_key(ik, hs[i]->k.key, hs[i]->k.keylen);
            ik += e->keylens[n + i] + 1;
        }
    }
    e->cmd = (dlock__cmd){.script = info ? DLOCK__S_HOLDER_EXTEND
                                         : dlock__extend_script(c, kd),
                          .nkeys = nk,
                          .keys = e->keys,
                          .keylens = e->keylens,
                          .nargs = 2 * n,
                          .args = e->args,
                          .arglens = e->arglens,
                          .pins = pins};
    dlock__cmd_durable(c, &e->cmd);
    return DLOCK_OK;
}

/*
 * Read the answers res (one per node of c) to the renewal call of locks
 * hs[0..n-1], sent at t0 (monotonic ms), answered after rtt_us: ok[i] is
 * DLOCK_OK (valid_until updated), DLOCK_NOT_OWNER (a majority says it is
 * gone), DLOCK_NOT_REPLICATED or an error class.
 */
static void ext_judge(dlock_client *c, dlock__held **hs, const int64_t *leases,
                      int n, int *ok, dlock__result *res, int64_t t0,
                      int64_t rtt_us)
{
    int i, j;
    for (j = 0; j < c->ns.n; j++) {
        const redisReply *r = res[j].reply;
        size_t k;
        int bad = 0;
        if (res[j].status != DLOCK_OK)
            continue;
        bad = r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n;
        for (k = 0; !bad && k < r->elements; k++)
            bad = r->element[k]->type != REDIS_REPLY_INTEGER;
        if (bad)
            dlock__malformed(&c->ns, res, j, "the extend script");
    }
    for (i = 0; i < n; i++) {
        int yes = 0, no = 0, unacked = 0;
        int64_t valid;
        for (j = 0; j < c->ns.n; j++) {
            const redisReply *r = res[j].reply;
            if (res[j].status != DLOCK_OK || r == NULL ||
                r->type != REDIS_REPLY_ARRAY || (size_t)i >= r->elements)
                continue;
            if (r->element[i]->type == REDIS_REPLY_INTEGER &&
                r->element[i]->integer == 1) {
                /* With wait_replicas an extension counts once enough
                 * replicas have it: a failover could lose it. */
                if (c->ns.wait_replicas > 0 &&
                    res[j].acks < c->ns.wait_replicas)
                    unacked++;
                else
                    yes++;
            } else {
                no++;
            }
        }
        valid = dlock__valid_until(c, t0, leases[i]);
        if (yes >= c->ns.quorum && valid > dlock__now_ms()) {
            atomic_store(&hs[i]->valid_until_ms, valid);
            ok[i] = DLOCK_OK;
            dlock__event(c, DLOCK_EVENT_RENEWED, hs[i]->k.name, DLOCK_OK,
                         rtt_us, hs[i]->token);
        } else if (no > c->ns.n - c->ns.quorum) {
            ok[i] = DLOCK_NOT_OWNER;
        } else if (unacked > 0 && yes + unacked >= c->ns.quorum) {
            ok[i] = dlock__set_error(c, DLOCK_NOT_REPLICATED,
                                     "extend %s: too few replicas (of %d "
                                     "asked for) acknowledged the new lease "
                                     "within %" PRId64 " ms",
                                     hs[i]->k.name, c->ns.wait_replicas,
                                     c->ns.wait_timeout_ms);
        } else if (yes >= c->ns.quorum) {
            /* Extended, but the answer came too late to vouch for any
             * validity: not a success. */
            ok[i] = dlock__set_error(c, DLOCK_ETIMEDOUT,
                                     "extend %s: the answer took longer "
                                     "than the lease",
                                     hs[i]->k.name);
        } else {
            ok[i] = dlock__fail_step(
                c, res, dlock__all_nodes(c),
                c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM, "extend");
        }
    }
}

/* ---- Redlock: servers taken back by a renewal --------------------------- */

/* 1 when answer r of a renewal or take-back call says lock i is held
 * there for its owner (1, or 2: taken back), with the replicas asked for
 * acknowledging it; else 0 (no answer, not ours there). */
static int ext_holds(const dlock_client *c, const dlock__result *r, int i)
{
    const redisReply *e;
    if (r->status != DLOCK_OK || r->reply == NULL ||
        r->reply->type != REDIS_REPLY_ARRAY || (size_t)i >= r->reply->elements)
        return 0;
    e = r->reply->element[i];
    if (e->type != REDIS_REPLY_INTEGER || (e->integer != 1 && e->integer != 2))
        return 0;
    return c->ns.wait_replicas == 0 || r->acks >= c->ns.wait_replicas;
}

/* 1 when answer r says lock i is not its owner's there (0). */
static int ext_missing(const dlock__result *r, int i)
{
    return r->status == DLOCK_OK && r->reply != NULL &&
           r->reply->type == REDIS_REPLY_ARRAY &&
           (size_t)i < r->reply->elements &&
           r->reply->element[i]->type == REDIS_REPLY_INTEGER &&
           r->reply->element[i]->integer == 0;
}

/* The arrays of one take-back call (retake), freed at once. */
typedef struct retake_bufs {
    uint64_t *held, *miss;
    int *which;
    const char **keys, **args;
    size_t *keylens, *arglens;
    char (*num)[24];
    int nk, na;       /* keys and arguments of the call */
    uint64_t mask;    /* the nodes it goes to */
    int64_t maxlease; /* the longest lease it sets */
} retake_bufs;

/* Free what b holds. */
static void retake_free(retake_bufs *b)
{
    free(b->held);
    free(b->miss);
    free(b->which);
    free(b->keys);
    free(b->args);
    free(b->keylens);
    free(b->arglens);
    free(b->num);
}

/* 1 when lock h, renewed with verdict ok and found not its owner's on
 * the nodes in miss, is to be taken back there: an exclusive lock of a
 * Redlock whose renewal a majority confirmed. With depth (the caller
 * holds held_mu), also one with a token and a level to set. */
static int retakable(const dlock_client *c, const dlock__held *h, int ok,
                     uint64_t miss, int depth)
{
    /* The string layout takes nothing back (retake.lua reads hashes): a
     * node that lost the hold stays without it until the release. */
    if (ok != DLOCK_OK || miss == 0 || c->ns.n < 2 || c->ns.cluster != NULL ||
        h->k.kind != DLOCK__KIND_LOCK || dlock__string_layout(c))
        return 0;
    return !depth || (h->token != 0 && h->depth >= 1);
}

/* Append argument a (len bytes) to b's. */
static void retake_arg(retake_bufs *b, const char *a, size_t len)
{
    b->args[b->na] = a;
    b->arglens[b->na++] = len;
}

/* Fill b for the take-back call of the m locks among hs[0..n-1] that
 * retakable() chose (renewal verdicts ok): their keys, owners, leases,
 * depths and tokens, the nodes to send it to, the longest lease. Returns
 * the locks in the call (0: none, or out of memory). */
static int retake_build(dlock_client *c, dlock__held **hs,
                        const int64_t *leases, int n, const int *ok,
                        retake_bufs *b, int m)
{
    int i;

    if (m > 0) {
        b->which = calloc((size_t)m, sizeof *b->which);
        b->keys = calloc((size_t)m * 2, sizeof *b->keys);
        b->keylens = calloc((size_t)m * 2, sizeof *b->keylens);
        b->args = calloc((size_t)m * 4 + 1, sizeof *b->args);
        b->arglens = calloc((size_t)m * 4 + 1, sizeof *b->arglens);
        b->num = calloc((size_t)m * 3 + 1, sizeof *b->num);
    }
    if (m > 0 && b->which != NULL && b->keys != NULL && b->keylens != NULL &&
        b->args != NULL && b->arglens != NULL && b->num != NULL) {
        int nn = 0;
        retake_arg(b, b->num[nn],
                   dlock__fmt_i64(b->num[nn], DLOCK__FENCE_RETENTION_MS));
        nn++;
        m = 0;
        /* Depth and token are the holding thread's: read under the
         * registry lock (a reentry changes the depth). */
        pthread_mutex_lock(&c->held_mu);
        for (i = 0; i < n; i++) {
            dlock__held *h = hs[i];
            if (!retakable(c, h, ok[i], b->miss[i], 1))
                continue;
            b->which[m++] = i;
            b->mask |= b->miss[i];
            if (leases[i] > b->maxlease)
                b->maxlease = leases[i];
            b->keys[b->nk] = h->k.key;
            b->keylens[b->nk++] = h->k.keylen;
            b->keys[b->nk] = h->k.fkey;
            b->keylens[b->nk++] = h->k.fkeylen;
            retake_arg(b, h->owner, strlen(h->owner));
            retake_arg(b, b->num[nn], dlock__fmt_i64(b->num[nn], leases[i]));
            nn++;
            retake_arg(b, b->num[nn], dlock__fmt_i64(b->num[nn], h->depth));
            nn++;
            retake_arg(b, b->num[nn], dlock__fmt_u64(b->num[nn], h->token));
            nn++;
        }
        pthread_mutex_unlock(&c->held_mu);
    } else {
        m = 0;
    }
    return m;
}

/*
 * After the renewal of locks hs[0..n-1] (one kind; answers res, verdicts
 * ok), record on which servers each renewed lock is held (h->held_on),
 * and with Redlock put every exclusive lock a majority still holds back
 * on the servers that answered it is not ours there (retake.lua: only
 * where it is free and was not released, never from another owner), in
 * one call per server. A lock on a bare majority is only as strong as
 * those servers: one of them restarted without its data would let a
 * second owner in (issue 29). The take-back needs the renewal's
 * confirmed majority: a lock that a majority no longer holds may have
 * expired and been taken since, so it is never brought back. A failed
 * take-back is tried again by the next renewal.
 */
static void retake(dlock_client *c, dlock__held **hs, const int64_t *leases,
                   int n, const int *ok, const dlock__result *res)
{
    dlock__result rr[DLOCK_MAX_SERVERS];
    retake_bufs b = {0};
    dlock__cmd cmd;
    int i, j, m = 0;

    if (c->ns.n == 1) { /* one node (or a cluster's): nothing to take back */
        for (i = 0; i < n; i++)
            if (ok[i] == DLOCK_OK)
                atomic_store(&hs[i]->held_on, 1);
        return;
    }
    b.held = calloc((size_t)n, sizeof *b.held);
    b.miss = calloc((size_t)n, sizeof *b.miss);
    if (b.held == NULL || b.miss == NULL) {
        retake_free(&b);
        return;
    }
    for (i = 0; i < n; i++) {
        for (j = 0; j < c->ns.n; j++) {
            if (ext_holds(c, &res[j], i))
                b.held[i] |= 1ULL << j;
            else if (ext_missing(&res[j], i))
                b.miss[i] |= 1ULL << j;
        }
        m += retakable(c, hs[i], ok[i], b.miss[i], 0);
    }
    m = retake_build(c, hs, leases, n, ok, &b, m);
    if (m > 0) {
        cmd = (dlock__cmd){.script = DLOCK__S_RETAKE,
                           .nkeys = b.nk,
                           .keys = b.keys,
                           .keylens = b.keylens,
                           .nargs = b.na,
                           .args = b.args,
                           .arglens = b.arglens};
        dlock__cmd_durable(c, &cmd);
        dlock__run(c, b.mask, &cmd, dlock__deadline(c, b.maxlease), rr);
        for (j = 0; j < c->ns.n; j++) {
            if (!(b.mask & (1ULL << j)))
                continue;
            for (i = 0; i < m; i++)
                if (ext_holds(c, &rr[j], i))
                    b.held[b.which[i]] |= 1ULL << j;
        }
        dlock__results_clear(rr, c->ns.n);
    }
    for (i = 0; i < n; i++)
        if (ok[i] == DLOCK_OK)
            atomic_store(&hs[i]->held_on, b.held[i]);
    retake_free(&b);
}

/*
 * Extend the leases of locks h[0..n-1] (all on the same client, all of
 * one kind, in a cluster all of one slot) to their lease_ms from now on
 * every node holding them, in one script call per node. ok[i] as
 * ext_judge says.
 */
static void extend_kind(dlock_client *c, dlock__held **hs,
                        const int64_t *leases, int n, int *ok,
                        dlock__conn **pins)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    ext_call e;
    int64_t t0, t0_us;
    int i, answered;

    if (ext_build(c, &e, hs, leases, n, pins) != DLOCK_OK) {
        for (i = 0; i < n; i++)
            ok[i] = DLOCK_ENOMEM;
        return;
    }
    t0 = dlock__now_ms();
    t0_us = dlock__now_us();
    answered = dlock__run(c, dlock__all_nodes(c), &e.cmd,
                          dlock__deadline(c, e.maxlease), res);
    t0_us = dlock__now_us() - t0_us; /* the round trip */
    if (answered > 0)
        dlock__hist_add(&c->metrics.renewal, t0_us);
    ext_judge(c, hs, leases, n, ok, res, t0, t0_us);
    retake(c, hs, leases, n, ok, res);
    dlock__results_clear(res, c->ns.n);
    ext_free(&e);
}

/* ---- Redis Cluster: one round over every master at once ----------------- */

/* A lock of a round, for sorting it by kind and slot. */
typedef struct by_slot {
    int kind;
    uint16_t slot;
    int i;
} by_slot;

static int by_slot_cmp(const void *a, const void *b)
{
    const by_slot *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind - y->kind;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    return x->i - y->i;
}

/* The arrays of one cluster round (ext_round), freed at once. */
typedef struct round_bufs {
    by_slot *o;
    dlock__held **gh;
    int64_t *gl;
    int *gok, *start;
    ext_call *calls;
    dlock__cmd *cmds;
    dlock__result *res;
} round_bufs;

static void round_bufs_free(round_bufs *r, int ncalls)
{
    int g;
    for (g = 0; r->calls != NULL && g < ncalls; g++)
        ext_free(&r->calls[g]);
    free(r->o);
    free(r->gh);
    free(r->gl);
    free(r->gok);
    free(r->start);
    free(r->calls);
    free(r->cmds);
    free(r->res);
}

/*
 * In a cluster one script call may only touch keys of one slot (else
 * CROSSSLOT), and each kind has its own script: group hs[0..n-1] by kind
 * and slot, one renewal call per group, and send all the calls at once
 * (dlock__cluster_exec_many: each master's calls pipelined behind one
 * WAIT, every
 * master at the same time), so that a round costs one round trip and at
 * most one WAIT timeout however many masters and slots it spans. Returns
 * 1 when it did (ok[] filled), 0 when there is only one group (or out of
 * memory: the caller's one call per kind then reports CROSSSLOT rather
 * than nothing).
 */
static int extend_cluster(dlock_client *c, dlock__held **hs,
                          const int64_t *leases, int n, int *ok)
{
    round_bufs r = {0};
    int i, g, m = 0, built = 0;
    int64_t t0, t0_us, maxlease = 0;

    r.o = malloc((size_t)n * sizeof *r.o);
    r.gh = malloc((size_t)n * sizeof *r.gh);
    r.gl = malloc((size_t)n * sizeof *r.gl);
    r.gok = malloc((size_t)n * sizeof *r.gok);
    r.start = malloc(((size_t)n + 1) * sizeof *r.start);
    if (r.o == NULL || r.gh == NULL || r.gl == NULL || r.gok == NULL ||
        r.start == NULL) {
        round_bufs_free(&r, 0);
        return 0;
    }
    for (i = 0; i < n; i++) {
        r.o[i].kind = hs[i]->k.kind;
        r.o[i].slot = dlock__key_slot(hs[i]->k.key, hs[i]->k.keylen);
        r.o[i].i = i;
    }
    qsort(r.o, (size_t)n, sizeof *r.o, by_slot_cmp);
    for (i = 0; i < n; i++) {
        r.gh[i] = hs[r.o[i].i];
        r.gl[i] = leases[r.o[i].i];
        if (i == 0 || r.o[i].kind != r.o[i - 1].kind ||
            r.o[i].slot != r.o[i - 1].slot)
            r.start[m++] = i;
    }
    r.start[m] = n;
    if (m < 2) {
        round_bufs_free(&r, 0);
        return 0;
    }
    r.calls = calloc((size_t)m, sizeof *r.calls);
    r.cmds = calloc((size_t)m, sizeof *r.cmds);
    r.res = calloc((size_t)m, sizeof *r.res);
    for (g = 0; r.calls != NULL && r.cmds != NULL && r.res != NULL && g < m;
         g++, built++) {
        if (ext_build(c, &r.calls[g], r.gh + r.start[g], r.gl + r.start[g],
                      r.start[g + 1] - r.start[g], NULL) != DLOCK_OK)
            break;
        r.cmds[g] = r.calls[g].cmd;
        if (r.calls[g].maxlease > maxlease)
            maxlease = r.calls[g].maxlease;
    }
    if (built < m) {
        round_bufs_free(&r, built);
        return 0;
    }
    t0 = dlock__now_ms();
    t0_us = dlock__now_us();
    dlock__cluster_exec_many(&c->ns, c->scripts, r.cmds, m,
                             dlock__deadline(c, maxlease), r.res);
    t0_us = dlock__now_us() - t0_us; /* the round trip */
    for (g = 0; g < m; g++) {
        int k = r.start[g], cnt = r.start[g + 1] - k;
        if (r.res[g].status == DLOCK_OK)
            dlock__hist_add(&c->metrics.renewal, t0_us);
        /* A cluster's node set is one node: res + g is a call's answers. */
        ext_judge(c, r.gh + k, r.gl + k, cnt, r.gok + k, r.res + g, t0, t0_us);
        dlock__results_clear(r.res + g, 1);
    }
    for (i = 0; i < n; i++)
        ok[r.o[i].i] = r.gok[i];
    round_bufs_free(&r, m);
    return 1;
}

/* See renew.h. Locks, permits and readers are renewed by different
 * scripts: one call per kind present (per node). */
void dlock__extend_many(dlock_client *c, dlock__held **hs,
                        const int64_t *leases, int n, int *ok,
                        dlock__conn **pins)
{
    dlock__held **sub;
    int64_t *sl;
    int *so, *idx, kind, i, m;

    if (c->ns.cluster != NULL && pins == NULL && n > 1 &&
        extend_cluster(c, hs, leases, n, ok))
        return;
    for (i = 1; i < n && hs[i]->k.kind == hs[0]->k.kind; i++)
        ;
    if (i >= n) {
        if (n > 0)
            extend_kind(c, hs, leases, n, ok, pins);
        return;
    }
    sub = calloc((size_t)n, sizeof *sub);
    sl = calloc((size_t)n, sizeof *sl);
    so = calloc((size_t)n, sizeof *so);
    idx = calloc((size_t)n, sizeof *idx);
    for (kind = DLOCK__KIND_LOCK; kind <= DLOCK__KIND_READ; kind++) {
        for (i = 0, m = 0;
             sub != NULL && sl != NULL && so != NULL && idx != NULL && i < n;
             i++)
            if (hs[i]->k.kind == kind) {
                sub[m] = hs[i];
                sl[m] = leases[i];
                idx[m++] = i;
            }
        if (m > 0)
            extend_kind(c, sub, sl, m, so, NULL);
        for (i = 0; i < m; i++)
            ok[idx[i]] = so[i];
    }
    if (sub == NULL || sl == NULL || so == NULL || idx == NULL)
        for (i = 0; i < n; i++)
            ok[i] = DLOCK_ENOMEM;
    free(sub);
    free(sl);
    free(so);
    free(idx);
}
