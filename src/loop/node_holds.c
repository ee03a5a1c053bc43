/*
 * node_holds.c - what a loop over several servers (Redlock), Sentinel or
 * Cluster does with its holds (include/dlock_loop.h), as engine calls
 * (multi_node.h's jobs): the release, an extend, and the renewal rounds
 * (a fixed node set: one script call per node for every hold due; a
 * cluster: one call per hold, routed by its slot and pipelined per
 * master). A hold is renewed when a majority of the nodes renewed it,
 * lost (DLOCK_NOT_OWNER) when too many said it is not ours for a
 * majority, else tried again soon (its validity running out reports
 * it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/holder.h"
#include "hold/kind.h"
#include "hold/release.h"
#include "loop/multi_node.h"

/* Over the outcomes of j's call: how many nodes answered hold i of the
 * call's holds with an integer in [lo, hi] (element i of an array reply
 * when arr; the reply itself otherwise), how many answered otherwise,
 * and the first failure (its index, -1 none). In a cluster, res[i] is
 * hold i's only outcome. */
static void tally(const mjob *j, int i, int arr, long long lo, long long hi,
                  int *yes, int *no, int *fail)
{
    int fixed = j->l->c->ns.cluster == NULL, a, b;
    *yes = *no = 0;
    *fail = -1;
    a = fixed ? 0 : i;
    b = fixed ? j->nres : i + 1;
    for (; a < b; a++) {
        const dlock__result *r = &j->res[a];
        long long v;
        if (r->status != DLOCK_OK) {
            if (*fail < 0)
                *fail = a;
            continue;
        }
        if (arr && r->reply->type == REDIS_REPLY_ARRAY)
            v = dlock__elem_int(r->reply, fixed ? (size_t)i : 0);
        else if (!arr && r->reply->type == REDIS_REPLY_INTEGER)
            v = r->reply->integer;
        else
            v = lo - 1;
        if (v >= lo && v <= hi)
            (*yes)++;
        else
            (*no)++;
    }
}

/* The votes a fixed set needs (a cluster's call for one hold: 1). */
static int quorum(const dlock_loop *l)
{
    return l->c->ns.cluster != NULL ? 1 : l->c->ns.quorum;
}

/* The release answered (or its time is up). */
static void release_done(mjob *j)
{
    dlock_op *op = j->op;
    int yes, no, fail;
    tally(j, 0, 0, 1, 4, &yes, &no, &fail); /* sem_release: 1, 3 */
    if (yes > 0)
        dloop__complete(op, DLOCK_OK, "%s", "");
    else if (fail < 0)
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "release: %s: not the owner (the lease expired or "
                        "another owner has it)",
                        op->hold->k.name);
    else
        dloop__complete(op, j->res[fail].status, "release: %s",
                        j->res[fail].err);
}

/* See loop_impl.h. */
void dloop__mn_release(dlock_op *op)
{
    dlock_loop *l = op->loop;
    dlock_client *c = l->c;
    dlock_hold *h = op->hold;
    dlock__release r = {
        .owner = h->owner, .depth = 1, .token = h->token, .relid = NULL};
    mjob *j;
    if (dloop__mop_new(op) != DLOCK_OK)
        return;
    j = dloop__job_new(l, op, 1, c->ns.cluster != NULL ? 1 : c->ns.n, 0);
    if (j == NULL) {
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return;
    }
    r.relid = j->relid;
    r.relidlen = dlock__request_id(c, j->relid);
    dlock__kind_of(h->k.kind)->release_cmd(&j->bufs[0], c, &h->k, &r);
    j->cmds[0] = j->bufs[0].cmd;
    j->cmds[0].give_back = 1;
    /* Behind the acquire's requests still out (Redlock's pins); done
     * once a majority confirmed (the rest given up on, as
     * dlock_lock_release does). */
    j->cmds[0].pins = h->rec != NULL ? h->rec->pins : NULL;
    if (c->ns.cluster == NULL && c->ns.n > 1) {
        j->cmds[0].enough = dlock__release_enough;
        j->cmds[0].enough_ud = &c->ns.quorum;
    }
    j->done = release_done;
    op->state = ST_OUT;
    op->mn->job = j;
    if (dloop__job_call(l, j) != DLOCK_OK) {
        op->mn->job = NULL;
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
    }
}

/* holder_extend.lua for b's holds (locks of a client that records
 * holder info: each lease renewed with its info, holder.c): a fixed set:
 * one command, the lock keys then the info keys; a cluster: one per
 * hold, its two keys (one slot). DLOCK_OK or DLOCK_ENOMEM. */
static int holder_cmds(mjob *j, const lbatch *b)
{
    int n = b->n, i, fixed = j->l->c->ns.cluster == NULL;
    size_t total = 0;
    char *p;
    for (i = 0; i < n; i++)
        total += b->h[i]->k.keylen + sizeof DLOCK__HOLDER_SUFFIX;
    j->ks = malloc((size_t)4 * (size_t)n * sizeof *j->ks);
    j->kls = malloc((size_t)4 * (size_t)n * sizeof *j->kls);
    j->num = malloc((size_t)n * sizeof *j->num);
    j->blob = malloc(total);
    if (j->ks == NULL || j->kls == NULL || j->num == NULL || j->blob == NULL)
        return DLOCK_ENOMEM;
    for (i = 0, p = j->blob; i < n; i++) {
        const dlock_hold *h = b->h[i];
        int lk = fixed ? i : 2 * i, ik = fixed ? n + i : 2 * i + 1;
        j->ks[lk] = h->k.key;
        j->kls[lk] = h->k.keylen;
        j->ks[ik] = p;
        j->kls[ik] = dlock__holder_key(p, h->k.key, h->k.keylen);
        p += j->kls[ik] + 1;
        j->ks[2 * n + 2 * i] = h->owner;
        j->kls[2 * n + 2 * i] = strlen(h->owner);
        j->ks[2 * n + 2 * i + 1] = j->num[i];
        j->kls[2 * n + 2 * i + 1] = dlock__fmt_i64(j->num[i], h->lease_ms);
    }
    for (i = 0; i < (fixed ? 1 : n); i++) {
        dlock__cmd *cmd = &j->cmds[i];
        int m = fixed ? n : 1;
        cmd->script = DLOCK__S_HOLDER_EXTEND;
        cmd->nkeys = 2 * m;
        cmd->keys = j->ks + 2 * i;
        cmd->keylens = j->kls + 2 * i;
        cmd->nargs = 2 * m;
        cmd->args = j->ks + 2 * n + 2 * i;
        cmd->arglens = j->kls + 2 * n + 2 * i;
    }
    return DLOCK_OK;
}

/* The holds' renewal script (extend.lua, sem_extend.lua, rw_extend.lua:
 * keys, then (owner, lease) per hold) for b's holds (one kind), with
 * their leases: one command for them all on a fixed set, one per hold in
 * a cluster (each routed by its slot). DLOCK_OK or DLOCK_ENOMEM. */
static int extend_cmds(mjob *j, const lbatch *b)
{
    const dlock__kind *kd = dlock__kind_of(b->h[0]->k.kind);
    int per = kd->extend_keys, n = b->n, i;
    int fixed = j->l->c->ns.cluster == NULL;
    if (dloop__holder_renews(j->l, b->h[0]->k.kind))
        return holder_cmds(j, b);
    j->ks = malloc((size_t)(per + 2) * (size_t)n * sizeof *j->ks);
    j->kls = malloc((size_t)(per + 2) * (size_t)n * sizeof *j->kls);
    j->num = malloc((size_t)n * sizeof *j->num);
    if (j->ks == NULL || j->kls == NULL || j->num == NULL)
        return DLOCK_ENOMEM;
    for (i = 0; i < n; i++) {
        const char **args = j->ks + per * n;
        size_t *al = j->kls + per * n;
        j->ks[per * i] = b->h[i]->k.key;
        j->kls[per * i] = b->h[i]->k.keylen;
        if (per == 2) {
            j->ks[2 * i + 1] = b->h[i]->k.rkey;
            j->kls[2 * i + 1] = b->h[i]->k.rkeylen;
        }
        args[2 * i] = b->h[i]->owner;
        al[2 * i] = strlen(b->h[i]->owner);
        args[2 * i + 1] = j->num[i];
        al[2 * i + 1] = dlock__fmt_i64(j->num[i], b->h[i]->lease_ms);
    }
    for (i = 0; i < (fixed ? 1 : n); i++) {
        dlock__cmd *cmd = &j->cmds[i];
        int m = fixed ? n : 1;
        cmd->script = dlock__extend_script(j->l->c, kd);
        cmd->nkeys = per * m;
        cmd->keys = j->ks + per * i;
        cmd->keylens = j->kls + per * i;
        cmd->nargs = 2 * m;
        cmd->args = j->ks + per * n + 2 * i;
        cmd->arglens = j->kls + per * n + 2 * i;
    }
    return DLOCK_OK;
}

/* A job renewing (or extending) b's holds; NULL out of memory. */
static mjob *extend_job(dlock_loop *l, dlock_op *op, lbatch *b)
{
    dlock_client *c = l->c;
    int fixed = c->ns.cluster == NULL;
    mjob *j =
        dloop__job_new(l, op, fixed ? 1 : b->n, fixed ? c->ns.n : b->n, 0);
    if (j == NULL)
        return NULL;
    j->l = l; /* not linked yet: read by extend_cmds */
    j->batch = b;
    j->kind = b->h[0]->k.kind;
    if (extend_cmds(j, b) != DLOCK_OK) {
        j->l = NULL;
        dloop__job_free(j);
        return NULL;
    }
    j->l = NULL;
    return j;
}

/* What the servers said of hold i of j's renewal: 1 renewed (a
 * majority), 0 not ours any more (too many said no for a majority),
 * -1 not known (failures: try again). *fail: the first failure. */
static int renew_verdict(const mjob *j, int i, int *fail)
{
    const dlock_loop *l = j->l;
    int yes, no, voters = l->c->ns.cluster != NULL ? 1 : l->c->ns.n;
    tally(j, i, 1, 1, 1, &yes, &no, fail);
    if (yes >= quorum(l))
        return 1;
    if (voters - no < quorum(l))
        return 0;
    return -1;
}

/* A renewal round answered (or its time is up). */
static void renew_done(mjob *j)
{
    lbatch *b = j->batch;
    int64_t now = dlock__now_ms();
    int i, fail;
    for (i = 0; i < b->n; i++) {
        dlock_hold *h = b->h[i];
        int v;
        if (h == NULL)
            continue; /* released meanwhile */
        h->batch = NULL;
        h->renewing = 0;
        if (h->k.kind != j->kind) {
            /* Downgraded meanwhile (downgrade.c): the writer's renewal
             * says nothing of the reader; renew that at once. */
            h->renew_at = now;
            dloop__hold_sched(h);
            continue;
        }
        v = renew_verdict(j, i, &fail);
        if (v == 1 && h->status == DLOCK_OK) {
            dloop__round_renewed(h, b->sent_ms);
            continue; /* scheduled there */
        }
        if (v == 0)
            dloop__lost(h, DLOCK_NOT_OWNER);
        else if (v < 0) /* again soon; the validity running out reports it */
            h->renew_at = now + 100;
        dloop__hold_sched(h);
    }
    free(b);
}

/* See loop_impl.h. */
int dloop__mn_renew(dlock_loop *l, lbatch *b)
{
    mjob *j = extend_job(l, NULL, b);
    if (j == NULL)
        return DLOCK_ENOMEM;
    j->done = renew_done;
    return dloop__job_call(l, j);
}

/* An extend answered (or its time is up). */
static void extend_done(mjob *j)
{
    dlock_op *op = j->op;
    int fail, v = renew_verdict(j, 0, &fail);
    if (v == 1) {
        dloop__extended(op, j->batch->sent_ms);
        dloop__complete(op, DLOCK_OK, "%s", "");
    } else if (v == 0) {
        dloop__lost(op->hold, DLOCK_NOT_OWNER);
        dloop__complete(op, DLOCK_NOT_OWNER,
                        "extend: %s: not the owner (the lease expired or "
                        "another owner has it)",
                        op->hold->k.name);
    } else {
        dloop__complete(op, fail >= 0 ? j->res[fail].status : DLOCK_EIO,
                        "extend: %s", fail >= 0 ? j->res[fail].err : "");
    }
    free(j->batch);
    j->batch = NULL;
}

/* See loop_impl.h. */
int dloop__mn_extend(dlock_op *op)
{
    dlock_loop *l = op->loop;
    lbatch *b;
    mjob *j;
    int rc;
    if (op->mn == NULL) {
        if ((op->mn = calloc(1, sizeof *op->mn)) == NULL)
            return DLOCK_ENOMEM;
        op->end = dloop__mn_abort;
    }
    b = malloc(sizeof *b + sizeof *b->h);
    if (b == NULL)
        return DLOCK_ENOMEM;
    b->n = 1;
    b->h = (dlock_hold **)(b + 1);
    b->h[0] = op->hold;
    b->sent_ms = dlock__now_ms();
    /* A release may complete first (another call): the hold stays until
     * this op's callback has run. */
    op->hold->refs++;
    op->href = 1;
    j = extend_job(l, op, b);
    if (j == NULL) {
        free(b);
        return DLOCK_ENOMEM;
    }
    j->done = extend_done;
    op->mn->job = j;
    rc = dloop__job_call(l, j);
    if (rc != DLOCK_OK) {
        op->mn->job = NULL;
        free(b);
    }
    return rc;
}
