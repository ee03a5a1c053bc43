/*
 * retention.c - the fence retention a client asks for (the option
 * fence_retention_ms), as the scripts are told it: acquire.lua's ARGV[9],
 * sent only when it is neither the default nor 0 (0 is in the mode, "a"
 * to "c": the hot path's command stays short), release.lua's ARGV[6],
 * and the retention of a fence hash that must exist (a Redlock fencing
 * round). Redlock keeps the default for 0.
 * See docs/design.md, "Fence retention".
 */
#include "hold/core.h"
#include "hold/held.h"
#include "hold/retention.h"

/* See retention.h. */
int64_t dlock__fence_keep_ms(const dlock_client *c)
{
    return c->opts.fence_retention_ms > 0 ? c->opts.fence_retention_ms
                                          : DLOCK__FENCE_RETENTION_MS;
}

/* See retention.h. */
int64_t dlock__fence_retention(const dlock_client *c)
{
    if (c->opts.fence_retention_ms == 0 && c->ns.n > 1)
        return DLOCK__FENCE_RETENTION_MS;
    return c->opts.fence_retention_ms;
}

/* See retention.h. The placeholders are the values acquire.lua reads as
 * absent: mode "0" (plain), no hint, no waiter TTL or ticket, not a
 * waiting writer. */
void dlock__acquire_retention_args(dlock__cmdbuf *b, const dlock_client *c)
{
    static const char *const none[] = {"0", "0", "0", "0", "0"};
    int have = b->cmd.nargs - 3; /* of ARGV[4..8] */
    int64_t keep = dlock__fence_retention(c);
    if (keep == DLOCK__FENCE_RETENTION_MS || keep == 0)
        return; /* 0: the mode says it ("a" to "c", kind.c) */
    for (; have < 5; have++)
        dlock__cmd_arg(b, none[have], 1);
    dlock__cmd_arg_i64(b, keep);
}
