/*
 * withdraw.c - which grants of an attempt may not last, and the status
 * that says so (see withdraw.h). A grant is kept only when it can be
 * trusted to outlive a failover: its node's master did not change during
 * the attempt (lock-delay), and, with wait_replicas, enough replicas
 * acknowledged it before the answer came. And the give-back of what a
 * failed attempt may have taken, after which the hold's next attempts
 * use a new owner id when the give-back may still arrive late.
 */
#include <inttypes.h>

#include "hold/release.h"
#include "hold/renew.h"
#include "hold/withdraw.h"
#include "notify/notify.h"
#include "topo/cluster_delay.h"

/* See withdraw.h. */
uint64_t dlock__askable_nodes(dlock_client *c, const dlock__held *h, int fresh,
                              int64_t *left_ms)
{
    uint64_t mask = dlock__all_nodes(c), delayed;
    int64_t left = 0;
    if (!fresh)
        return mask;
    delayed = dlock__delayed_for(&c->ns, h->k.key, h->k.keylen, &left);
    mask &= ~delayed;
    if (delayed != 0 && __builtin_popcountll(mask) < c->ns.quorum) {
        *left_ms = left;
        return 0;
    }
    return mask;
}

/* See withdraw.h. */
uint64_t dlock__withdraw_grants(dlock_client *c, const dlock__held *h,
                                int fresh, dlock__tally *t,
                                const dlock__result *res, long long *minacks)
{
    uint64_t out = 0;
    int i;
    if (fresh)
        out =
            t->gmask & dlock__delayed_for(&c->ns, h->k.key, h->k.keylen, NULL);
    for (i = 0; i < c->ns.n && c->ns.wait_replicas > 0; i++) {
        if (!(t->gmask & (1ULL << i)))
            continue;
        if (*minacks < 0 || res[i].acks < *minacks)
            *minacks = res[i].acks;
        if (res[i].acks < c->ns.wait_replicas)
            out |= 1ULL << i;
    }
    if (out == 0)
        return 0;
    t->gmask &= ~out;
    t->granted -= __builtin_popcountll(out);
    t->unknown |= out;
    return out;
}

/* See withdraw.h. */
int dlock__lock_delay_error(dlock_client *c, const dlock__held *h,
                            int64_t left_ms)
{
    return dlock__set_error(c, DLOCK_LOCK_DELAY,
                            "acquire %s: the master changed (failover or "
                            "restart) and may have forgotten locks: no new "
                            "grant for %" PRId64 " ms more (lock-delay)",
                            h->k.name, left_ms);
}

/* See withdraw.h. */
int dlock__withdrawn_error(dlock_client *c, const dlock__held *h,
                           uint64_t withdrawn, long long minacks, int64_t *pttl)
{
    int64_t left;
    if (dlock__delayed_for(&c->ns, h->k.key, h->k.keylen, &left) & withdrawn) {
        *pttl = left;
        return dlock__lock_delay_error(c, h, left);
    }
    return dlock__set_error(
        c, DLOCK_NOT_REPLICATED,
        "acquire %s: granted, but %lld of the %d replicas asked for "
        "acknowledged it within %" PRId64 " ms: given back",
        h->k.name, minacks < 0 ? 0 : minacks, c->ns.wait_replicas,
        c->ns.wait_timeout_ms);
}

/* See withdraw.h. */
void dlock__give_back(dlock_client *c, dlock__held *h, uint64_t mask,
                      uint64_t token, int64_t lease_ms, uint64_t ticket,
                      int eval)
{
    if (dlock__undo_acquire(c, h, mask, h->depth + 1, token, lease_ms, ticket,
                            eval) != 0)
        dlock__give_back_left(c, h);
}

/* See withdraw.h. */
void dlock__give_back_left(dlock_client *c, dlock__held *h)
{
    char next[DLOCK_OWNER_MAX];
    if (h->depth > 0)
        return;
    dlock__owner_id(c, next, sizeof next);
    dlock__notify_rename(c->notifier, h->owner, sizeof h->owner, next);
}

/* See withdraw.h. */
int dlock__confirm_handed(dlock_client *c, dlock__held *h, int64_t lease_ms,
                          uint64_t token, int64_t *valid_until,
                          const char *what)
{
    dlock__held *hs[1] = {h};
    int64_t leases[1] = {lease_ms};
    int ok;
    if (c->ns.wait_replicas == 0)
        return DLOCK_OK;
    dlock__extend_many(c, hs, leases, 1, &ok, NULL);
    if (ok == DLOCK_OK) {
        h->confirm_pending = 0;
        *valid_until = atomic_load(&h->valid_until_ms);
        return DLOCK_OK;
    }
    h->attempt_end_ms = dlock__now_ms() + c->opts.command_timeout_ms;
    dlock__undo_acquire(c, h, 1, 1, token, lease_ms, 0, 0);
    if (ok != DLOCK_NOT_REPLICATED)
        return ok; /* the extend's message says why */
    return dlock__set_error(
        c, DLOCK_NOT_REPLICATED,
        "acquire %s: %s, but fewer than the %d replicas "
        "asked for acknowledged it within %" PRId64 " ms: given back",
        h->k.name, what, c->ns.wait_replicas, c->ns.wait_timeout_ms);
}
