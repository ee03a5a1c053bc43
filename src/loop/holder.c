/*
 * holder.c - holder info for a loop's locks (src/holder.c's model): a
 * client made with holder_info records who holds each lock it takes
 * ("held by HOST pid PID `COMMAND`"), in "<prefix>:{<name>}:i" with the
 * lock's lease. Through a loop: holder_set.lua right after the grant, on
 * the command connection, nothing waiting for its answer (best effort,
 * as the blocking API's); renewals of such locks use holder_extend.lua,
 * which renews the info with the lease in the same call.
 */
#include <stdlib.h>
#include <string.h>

#include "hold/holder.h"
#include "hold/kind.h"
#include "loop/loop_impl.h"

/* The most holds one renewal call names (holds.c's BATCH_MAX). */
#define RENEW_MAX 200

/* See loop_impl.h. */
int dloop__holder_renews(const dlock_loop *l, int kind)
{
    return dlock__kind_of(kind)->holder_info && dlock__holder_on(l->c);
}

/* See loop_impl.h. */
void dloop__holder_record(dlock_loop *l, dlock_hold *h)
{
    dlock__cmdbuf b;
    char *ikey;

    /* An engine loop records it itself (multi_node.c), as a call on
     * every node. */
    if (l->engine || !dloop__holder_renews(l, h->k.kind))
        return;
    ikey = malloc(h->k.keylen + sizeof DLOCK__HOLDER_SUFFIX);
    if (ikey == NULL)
        return;
    dlock__holder_set_cmd(l->c, &b, &h->k, ikey, h->owner);
    /* The request copies its arguments; its answer is dropped (no
     * callback). */
    dloop__send_cmd(l, &b.cmd, NULL, NULL, NULL);
    free(ikey);
}

/* See loop_impl.h. */
int dloop__holder_extend(dlock_loop *l, dlock_hold **hs, int n, lreq_fn fn,
                         void *ctx, lreq **out)
{
    const char **keys = malloc(2 * n * sizeof *keys);
    size_t *kl = malloc(2 * n * sizeof *kl), total = 0;
    const char *args[2 * RENEW_MAX];
    size_t al[2 * RENEW_MAX];
    char(*num)[24] = malloc(n * sizeof *num), *ik = NULL, *p;
    int i, rc = DLOCK_ENOMEM;

    for (i = 0; i < n; i++)
        total += hs[i]->k.keylen + sizeof DLOCK__HOLDER_SUFFIX;
    if (n <= RENEW_MAX && keys != NULL && kl != NULL && num != NULL)
        ik = malloc(total);
    if (ik != NULL) {
        for (i = 0, p = ik; i < n; i++) {
            keys[i] = hs[i]->k.key;
            kl[i] = hs[i]->k.keylen;
            keys[n + i] = p;
            kl[n + i] = dlock__holder_key(p, hs[i]->k.key, hs[i]->k.keylen);
            p += kl[n + i] + 1;
            args[2 * i] = hs[i]->owner;
            al[2 * i] = strlen(hs[i]->owner);
            args[2 * i + 1] = num[i];
            al[2 * i + 1] = dlock__fmt_i64(num[i], hs[i]->lease_ms);
        }
        rc = dloop__send(l, DLOCK__S_HOLDER_EXTEND, 2 * n, keys, kl, 2 * n,
                         args, al, fn, ctx, out);
    }
    free(ik);
    free(keys);
    free(kl);
    free(num);
    return rc;
}
