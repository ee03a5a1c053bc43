/*
 * verdict.c - the decision of an acquire attempt of any kind (verdict.h):
 * classify each node's reply, count them, and from the count alone the
 * verdict and the nodes to give back. Pure: no I/O, no client.
 */
#include <string.h>

#include "hold/verdict.h"

/* See verdict.h. */
int dlock__classify(const redisReply *r)
{
    long long k;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return DLOCK_EPROTO;
    k = r->element[0]->integer;
    if (k == DLOCK__R_GRANTED && r->elements == 3)
        return DLOCK__R_GRANTED;
    if (k == DLOCK__R_BUSY || k == DLOCK__R_GONE)
        return (int)k;
    return DLOCK_EPROTO;
}

/* Count one granting reply r (node bit) into *t; first: no grant yet. */
static void tally_grant(dlock__tally *t, const redisReply *r, uint64_t bit,
                        int first)
{
    /* A plain SET's OK: depth 1, the token not stamped yet (0). */
    uint64_t tok = (uint64_t)dlock__elem_int(r, 1);
    t->granted++;
    t->gmask |= bit;
    if (!first && tok != t->tmax)
        t->tokens_differ = 1;
    if (first || tok > t->tmax)
        t->tmax = tok;
    t->depth = r->type == REDIS_REPLY_STATUS ? 1 : (int)dlock__elem_int(r, 2);
}

/* Count one busy reply r into *t. */
static void tally_busy(dlock__tally *t, const redisReply *r)
{
    int64_t p = dlock__elem_int(r, 1);
    t->busy++;
    if (p > 0 && (t->pttl < 0 || p < t->pttl))
        t->pttl = p;
    else if (p == -2)
        t->ahead = 1;
    if (r->elements > 2 && (uint64_t)dlock__elem_int(r, 2) > t->nbusy)
        t->nbusy = (uint64_t)dlock__elem_int(r, 2);
    if (r->elements > 3) {
        int64_t ttl = dlock__elem_int(r, 3);
        if (ttl > 0 && (t->place_ms == 0 || ttl < t->place_ms))
            t->place_ms = ttl;
    }
}

/* See verdict.h. */
void dlock__acquire_tally(dlock__tally *t, const dlock__result *res, int n)
{
    dlock__acquire_tally_as(t, res, n, 0);
}

/* See verdict.h. */
void dlock__acquire_tally_as(dlock__tally *t, const dlock__result *res, int n,
                             int plain)
{
    int i, first = 1;
    memset(t, 0, sizeof *t);
    t->pttl = -1;
    for (i = 0; i < n; i++) {
        uint64_t bit = 1ULL << i;
        int k;
        if (res[i].status != DLOCK_OK) {
            /* A request that never left (refused connect) took nothing. */
            if (res[i].sent)
                t->unknown |= bit;
            continue;
        }
        k = dlock__classify(res[i].reply);
        if (plain && res[i].reply->type == REDIS_REPLY_STATUS &&
            strcmp(res[i].reply->str, "OK") == 0)
            k = DLOCK__R_GRANTED; /* the plain SET NX took it */
        if (k == DLOCK__R_GRANTED) {
            tally_grant(t, res[i].reply, bit, first);
            first = 0;
        } else if (k == DLOCK__R_BUSY) {
            tally_busy(t, res[i].reply);
        } else if (k == DLOCK__R_GONE) {
            t->gone++;
        } else {
            t->bad |= bit;
            t->unknown |= bit;
        }
    }
}

/* See verdict.h. */
dlock__verdict dlock__acquire_verdict(const dlock__tally *t, int quorum,
                                      int depth, int64_t validity_ms)
{
    if (t->granted >= quorum && validity_ms > 0)
        return DLOCK__V_GRANTED;
    if (t->gone > 0 && depth > 0 && t->granted < quorum)
        return DLOCK__V_NOT_OWNER;
    if (t->busy > 0 && t->granted + t->busy + t->gone >= quorum)
        return DLOCK__V_BUSY;
    if (t->granted >= quorum)
        return DLOCK__V_TOO_LATE;
    return DLOCK__V_FAILED;
}

/* See verdict.h. Giving back partial grants and whatever a lost reply may
 * have taken, at once, keeps leftovers from blocking the next attempt
 * (ours or another client's). */
uint64_t dlock__acquire_undo_mask(const dlock__tally *t, dlock__verdict v,
                                  int n, int depth)
{
    if (depth != 0 && t->granted == 0)
        return 0;
    if (v == DLOCK__V_BUSY && n == 1)
        return 0;
    return t->gmask | t->unknown;
}

/* See verdict.h. */
uint64_t dlock__refused_undo_mask(const dlock__result *res, int n)
{
    uint64_t m = 0;
    int i;
    for (i = 0; i < n; i++)
        if ((res[i].status != DLOCK_OK && res[i].sent) ||
            (res[i].status == DLOCK_OK &&
             dlock__elem_int(res[i].reply, 0) == 1))
            m |= 1ULL << i;
    return m;
}

/* See verdict.h. */
int dlock__withdraw_decides(uint64_t withdrawn, dlock__verdict v)
{
    return withdrawn != 0 && v != DLOCK__V_GRANTED && v != DLOCK__V_BUSY;
}

/* See verdict.h. */
void dlock__downgrade_count(const dlock__nodeset *ns, int wait_replicas,
                            dlock__result *res, int n, dlock__downgraded *d)
{
    int i;
    memset(d, 0, sizeof *d);
    d->fail = -1;
    for (i = 0; i < n; i++) {
        const redisReply *rep = res[i].reply;
        int one = res[i].status == DLOCK_OK &&
                  rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        if (res[i].status != DLOCK_OK) {
            if (res[i].sent)
                d->unknown |= 1ULL << i;
            if (d->fail < 0)
                d->fail = i;
        } else if (one && wait_replicas > 0 && res[i].acks < wait_replicas) {
            /* Too few replicas have the read lease: a failover could
             * lose it (and keep the writer's older lease). */
            d->unacked++;
            d->unknown |= 1ULL << i;
        } else if (one) {
            d->ok++;
            d->granted |= 1ULL << i;
        } else if (rep->type == REDIS_REPLY_INTEGER) {
            d->no++;
        } else {
            dlock__malformed(ns, res, i, "the downgrade script");
            d->unknown |= 1ULL << i;
        }
    }
}
