/*
 * mn_send.c - one script on an engine loop (multi_node.h): routed to the
 * node that serves it (Sentinel's master, a cluster's slot, a fixed
 * set's first node), or, for Redlock's election, sent to every node and
 * voted; dloop__op_send picks it or the loop's own connection.
 */
#include <string.h>

#include "hold/kind.h"
#include "loop/multi_node.h"

/* ---- one script, routed ------------------------------------------------- */

/* The request's answer: node 0's (the master: Sentinel, a cluster's
 * slot; the first server of a fixed set) to its caller. */
static void send_done(mjob *j)
{
    const dlock__result *r = &j->res[0];
    j->fn(j->l, j->op, r->status, r->reply, r->err, r->sent);
}

/* Redlock's election (the blocking API's rules, src/api/election.c):
 * the answers of every node, voted. */

/* The proclaim of a fixed set answered: done when a majority wrote (1);
 * a majority that answered otherwise: not the owner (a node's 0 to the
 * caller); else the failure. */
static void proclaim_vote(mjob *j)
{
    int i, yes = -1, no = -1, answered = 0, nyes = 0, fail = -1;
    for (i = 0; i < j->nres; i++) {
        const dlock__result *r = &j->res[i];
        if (r->status != DLOCK_OK || r->reply->type != REDIS_REPLY_INTEGER) {
            if (fail < 0 && r->status != DLOCK_OK)
                fail = i;
            continue;
        }
        answered++;
        if (r->reply->integer == 1) {
            nyes++;
            yes = i;
        } else {
            no = i;
        }
    }
    if (nyes >= j->l->c->ns.quorum)
        i = yes;
    else if (answered >= j->l->c->ns.quorum)
        i = no >= 0 ? no : yes;
    else
        i = fail;
    if (i < 0) {
        j->fn(j->l, j->op, DLOCK_NO_QUORUM, NULL, "too few servers answered",
              1);
        return;
    }
    j->fn(j->l, j->op, j->res[i].status, j->res[i].reply, j->res[i].err, 1);
}

/* elect_leader.lua's answer r: its kind (0 none, 1 proclaimed, 2 held,
 * not proclaimed), -1 malformed; *owner, *epoch. */
static int leader_kind(const redisReply *r, const redisReply **owner,
                       uint64_t *epoch)
{
    long long k;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    k = r->element[0]->integer;
    if (k == 0)
        return 0;
    if ((k != 1 || r->elements < 6) && (k != 2 || r->elements < 4))
        return -1;
    *owner = r->element[1];
    *epoch = (uint64_t)dlock__elem_int(r, 2);
    return (int)k;
}

/* The leader look of a fixed set answered: the owner a majority names,
 * its newest view (a proclaimed one first, then the highest epoch) to
 * the caller; none named by a majority: no leader. */
static void leader_vote(mjob *j)
{
    static redisReply zero = {.type = REDIS_REPLY_INTEGER, .integer = 0};
    static redisReply *zeros[1] = {&zero};
    static redisReply none = {
        .type = REDIS_REPLY_ARRAY, .elements = 1, .element = zeros};
    const redisReply *own[DLOCK_MAX_SERVERS];
    uint64_t ep[DLOCK_MAX_SERVERS];
    int kind[DLOCK_MAX_SERVERS];
    int i, k, answered = 0, fail = -1, q = j->l->c->ns.quorum;
    for (i = 0; i < j->nres; i++) {
        kind[i] = -1;
        if (j->res[i].status != DLOCK_OK) {
            if (fail < 0)
                fail = i;
            continue;
        }
        kind[i] = leader_kind(j->res[i].reply, &own[i], &ep[i]);
        answered += kind[i] >= 0;
    }
    if (answered < q) {
        j->fn(j->l, j->op, fail >= 0 ? j->res[fail].status : DLOCK_NO_QUORUM,
              NULL, fail >= 0 ? j->res[fail].err : "too few servers answered",
              1);
        return;
    }
    for (i = 0; i < j->nres; i++) {
        int agree = 0, best = -1;
        if (kind[i] < 1)
            continue;
        for (k = 0; k < j->nres; k++) {
            if (kind[k] < 1 || own[k]->len != own[i]->len ||
                memcmp(own[k]->str, own[i]->str, own[i]->len) != 0)
                continue;
            agree++;
            if (best < 0 || (kind[k] == 1 && kind[best] != 1) ||
                (kind[k] == kind[best] && ep[k] > ep[best]))
                best = k;
        }
        if (agree >= q) {
            j->fn(j->l, j->op, DLOCK_OK, j->res[best].reply, "", 1);
            return;
        }
    }
    j->fn(j->l, j->op, DLOCK_OK, &none, "", 1);
}

/* See loop_impl.h. */
int dloop__mn_send(dlock_op *op, int script, int nkeys, const char **keys,
                   const size_t *keylens, int nargs, const char **args,
                   const size_t *arglens, lreq_fn fn)
{
    dlock_loop *l = op->loop;
    dlock__cmd cmd;
    mjob *j;
    int vote;
    if (op->mn == NULL && dloop__mop_new(op) != DLOCK_OK)
        return DLOCK_OK; /* completed: out of memory */
    memset(&cmd, 0, sizeof cmd);
    cmd.script = script;
    cmd.nkeys = nkeys;
    cmd.keys = keys;
    cmd.keylens = keylens;
    cmd.nargs = nargs;
    cmd.args = args;
    cmd.arglens = arglens;
    /* Redlock's election asks every node and votes; the rest goes to
     * the one node that serves it. */
    vote =
        l->c->ns.cluster == NULL && l->c->ns.n > 1 &&
        (script == DLOCK__S_ELECT_PROCLAIM || script == DLOCK__S_ELECT_LEADER);
    j = dloop__cmd_job(l, op, &cmd, !vote);
    if (j == NULL)
        return DLOCK_ENOMEM;
    j->fn = fn;
    j->done = !vote                               ? send_done
              : script == DLOCK__S_ELECT_PROCLAIM ? proclaim_vote
                                                  : leader_vote;
    op->mn->job = j;
    if (dloop__job_call(l, j) != DLOCK_OK) {
        op->mn->job = NULL;
        return DLOCK_ENOMEM;
    }
    return DLOCK_OK;
}

/* See loop_impl.h. */
int dloop__op_send(dlock_op *op, int script, int nkeys, const char **keys,
                   const size_t *keylens, int nargs, const char **args,
                   const size_t *arglens, lreq_fn fn)
{
    if (op->loop->engine)
        return dloop__mn_send(op, script, nkeys, keys, keylens, nargs, args,
                              arglens, fn);
    return dloop__send(op->loop, script, nkeys, keys, keylens, nargs, args,
                       arglens, fn, op, &op->req);
}
