/*
 * ctx.h - the notifier's names and what it needs of its client
 * (dlock__notify_ctx), shared by its API (notify.h) and its inside
 * (notify_impl.h), so that the subscriber thread's file needs neither
 * the waiters' API nor the client. Above the node set, the message store
 * and the counters.
 */
#ifndef DLOCK_NOTIFY_CTX_H
#define DLOCK_NOTIFY_CTX_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/errors.h"
#include "base/util.h"
#include "topo/node.h"

typedef struct dlock__notifier dlock__notifier;
typedef struct dlock__waiter dlock__waiter;

/* What the notifier needs of its client, and no more (it sits below the
 * lock layer and never sees struct dlock_client): the node set, the
 * per-thread messages its failures are written to, the counters it bumps,
 * the cancel generation it compares, the flag a NOPERM on SUBSCRIBE
 * raises (waiters poll) and the connect timeout of its links. The
 * pointers must outlive the notifier. */
typedef struct dlock__notify_ctx {
    dlock__nodeset *ns;
    const dlock__msgs *msgs;
    dlock__stats *stats;
    _Atomic uint64_t *cancel_gen;
    _Atomic int *nopub;
    int64_t connect_timeout_ms;
} dlock__notify_ctx;

#endif /* DLOCK_NOTIFY_CTX_H */
