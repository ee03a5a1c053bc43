/*
 * rw_leave.c - a waiting writer gives up: its mark goes (see rw_leave.h).
 */
#include <string.h>

#include "hold/rw_leave.h"
#include "engine/step.h"

/* See rw_leave.h. */
void dlock__rw_leave(dlock_client *c, const dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    char id[64];
    size_t n;

    n = dlock__request_id(c, id); /* as a release's: readers woken by it */
    dlock__cmd_begin(&b, DLOCK__S_RW_LEAVE);
    dlock__cmd_key(&b, h->k.key, h->k.keylen);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    dlock__cmd_arg(&b, h->k.chan, h->k.chanlen);
    dlock__cmd_arg(&b, id, n);
    dlock__cmd_arg(&b, c->ns.cluster != NULL ? "1" : "0", 1);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    dlock__results_clear(res, c->ns.n);
}
