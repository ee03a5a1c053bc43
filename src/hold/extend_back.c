/*
 * extend_back.c - give back an extension too few replicas acknowledged
 * (see extend_back.h).
 */
#include <string.h>

#include "hold/extend_back.h"
#include "engine/step.h"

/* See extend_back.h. */
void dlock__extend_give_back(dlock_client *c, dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    int64_t left;
    int renewed;

    pthread_mutex_lock(&c->held_mu);
    renewed = h->watchdog || h->confirm_pending || h->wd_refs > 0;
    pthread_mutex_unlock(&c->held_mu);
    if (renewed)
        return;
    /* What the holder counts on: the servers' deadline is no earlier
     * than this from when the script runs (it runs after now). */
    left = atomic_load(&h->valid_until_ms) - dlock__now_ms();
    if (left < 1)
        left = 1;
    dlock__cmd_begin(&b, DLOCK__S_EXTEND_BACK);
    dlock__cmd_key(&b, h->k.key, h->k.keylen);
    if (h->k.kind == DLOCK__KIND_READ)
        dlock__cmd_key(&b, h->k.rkey, h->k.rkeylen);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(&b, left);
    dlock__cmd_arg(&b,
                   h->k.kind == DLOCK__KIND_READ     ? "r"
                   : h->k.kind == DLOCK__KIND_PERMIT ? "p"
                                                     : "l",
                   1);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    dlock__results_clear(res, c->ns.n);
}
