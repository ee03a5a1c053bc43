/*
 * shared_info.c - looking at semaphores and read-write locks' readers:
 * dlock_shared_inspect() for status tools, and the lookup of one permit
 * or reader by owner id for dlock_lock_adopt() (inspect.c). One script,
 * shared_inspect.lua, answers both. Beside inspect.c in the layers: it
 * calls only core (the engine) and registry's key names.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"
#include "api/shared_info.h"

/* One node's answer, checked and read. */
typedef struct answer {
    int kind;
    int64_t limit, count, queued, mark, found;
    uint64_t last, ftok;
    const redisReply *list; /* {owner, ms left, token, ...} */
} answer;

/* Read a shared_inspect.lua reply into *a; 0, or -1 if it has the wrong
 * shape. */
static int read_answer(const redisReply *r, answer *a)
{
    size_t k;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 9 ||
        r->element[3]->type != REDIS_REPLY_ARRAY ||
        r->element[3]->elements % 3 != 0)
        return -1;
    for (k = 0; k < 9; k++)
        if (k != 3 && r->element[k]->type != REDIS_REPLY_INTEGER)
            return -1;
    for (k = 0; k < r->element[3]->elements; k++)
        if (r->element[3]->element[k]->type !=
            (k % 3 == 0 ? REDIS_REPLY_STRING : REDIS_REPLY_INTEGER))
            return -1;
    a->kind = (int)r->element[0]->integer;
    a->limit = r->element[1]->integer;
    a->count = r->element[2]->integer;
    a->list = r->element[3];
    a->queued = r->element[4]->integer;
    a->last = (uint64_t)r->element[5]->integer;
    a->mark = r->element[6]->integer;
    a->found = r->element[7]->integer;
    a->ftok = (uint64_t)r->element[8]->integer;
    return 0;
}

/* Run shared_inspect.lua for NAME on the nodes in mask, listing at most
 * max holders and looking for owner ("" for none). */
static int run_inspect(dlock_client *c, const char *name, uint64_t mask,
                       size_t max, const char *owner, dlock__result *res)
{
    dlock__keys *k = dlock__keys_new(c, name);
    dlock__cmdbuf b;
    if (k == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    dlock__cmd_begin(&b, DLOCK__S_SHARED_INSPECT);
    dlock__cmd_key(&b, k->key, k->keylen);
    dlock__cmd_key(&b, k->fkey, k->fkeylen);
    dlock__cmd_key(&b, k->qtkey, k->qtkeylen);
    dlock__cmd_key(&b, k->rkey, k->rkeylen);
    dlock__cmd_arg_i64(&b, (int64_t)max);
    dlock__cmd_arg(&b, owner, strlen(owner));
    dlock__run(c, mask, &b.cmd, dlock__deadline(c, 0), res);
    free(k);
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_shared_inspect(dlock_client *c, const char *name,
                         dlock_shared_info *out, dlock_holder *holders,
                         size_t nholders)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    answer a;
    size_t i;
    int rc;

    if (c == NULL)
        return DLOCK_EINVAL;
    rc = dlock__check_name(c, name);
    if (rc != DLOCK_OK)
        return rc;
    if (out == NULL || (holders == NULL && nholders > 0))
        return dlock__set_error(c, DLOCK_EINVAL, "out or holders is NULL");
    memset(out, 0, sizeof *out);
    out->waiters = -1;
    if (nholders > 100000)
        nholders = 100000;
    rc = run_inspect(c, name, 1, nholders, "", res);
    if (rc != DLOCK_OK)
        return rc;
    if (res[0].status != DLOCK_OK) {
        rc = dlock__fail_step(c, res, 1, res[0].status, "inspect");
        dlock__results_clear(res, c->ns.n);
        return rc;
    }
    if (read_answer(res[0].reply, &a) < 0) {
        dlock__malformed(&c->ns, res, 0, "the shared inspect script");
        rc = dlock__fail_step(c, res, 1, res[0].status, "inspect");
        dlock__results_clear(res, c->ns.n);
        return rc;
    }
    out->kind = a.kind == 2   ? DLOCK_KIND_SEMAPHORE
                : a.kind == 1 ? DLOCK_KIND_LOCK
                              : DLOCK_KIND_NONE;
    out->limit = a.limit;
    out->holders = a.count;
    out->waiters = a.kind == 2 ? a.queued : -1;
    out->writer_waiting_ms = a.mark;
    out->last_token = a.last;
    for (i = 0; i < nholders && 3 * i < a.list->elements; i++) {
        const redisReply *o = a.list->element[3 * i];
        snprintf(holders[i].owner, sizeof holders[i].owner, "%.*s", (int)o->len,
                 o->str);
        holders[i].ttl_ms = a.list->element[3 * i + 1]->integer;
        holders[i].token = (uint64_t)a.list->element[3 * i + 2]->integer;
    }
    out->listed = i;
    dlock__results_clear(res, c->ns.n);
    return DLOCK_OK;
}

/* See shared_info.h. */
int dlock__shared_owner(dlock_client *c, const char *name, const char *owner,
                        int *kind, int64_t *ttl_ms, uint64_t *token)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    int i, answered = 0, found = 0, sem = 0, rc;
    int64_t ttl = -1;
    uint64_t tok = 0;
    answer a;

    *kind = -1;
    rc = run_inspect(c, name, dlock__all_nodes(c), 0, owner, res);
    if (rc != DLOCK_OK)
        return rc;
    for (i = 0; i < c->ns.n; i++) {
        if (res[i].status != DLOCK_OK)
            continue;
        if (read_answer(res[i].reply, &a) < 0) {
            dlock__malformed(&c->ns, res, i, "the shared inspect script");
            continue;
        }
        answered++;
        if (a.kind == 2)
            sem = 1;
        if (a.found < 0)
            continue;
        found++;
        if (ttl < 0 || a.found < ttl)
            ttl = a.found;
        if (a.ftok > tok)
            tok = a.ftok;
    }
    if (answered < c->ns.quorum) {
        rc = dlock__fail_step(c, res, dlock__all_nodes(c),
                              c->ns.n == 1 ? res[0].status : DLOCK_NO_QUORUM,
                              "adopt");
        dlock__results_clear(res, c->ns.n);
        return rc;
    }
    dlock__results_clear(res, c->ns.n);
    if (found >= c->ns.quorum) {
        *kind = sem ? DLOCK__KIND_PERMIT : DLOCK__KIND_READ;
        *ttl_ms = ttl;
        *token = tok;
    } else if (sem) {
        *kind = -2;
    }
    return DLOCK_OK;
}
