/*
 * loop.c - the blocking driver of the engine (call.h): start the calls,
 * then poll() their descriptors and process until they are done. Every
 * blocking step of the library (dlock__exec) and the watchdog's renewal
 * rounds on a cluster (dlock__cluster_exec_many) run here; an event loop
 * would drive the same three verbs instead.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "call.h"
#include "cluster_batch.h"

/* Descriptors held without an allocation (a Redlock's nodes, a few
 * masters, and the opener's). */
#define SMALL_FDS (DLOCK_MAX_SERVERS + 1)

/* Run k until it is done. Returns the number of calls with DLOCK_OK. */
static int drive(dlock__call *k)
{
    struct pollfd small[SMALL_FDS], *pfd = small;
    int max = SMALL_FDS, nok = 0;
    while (!dlock__call_done(k)) {
        int64_t wake, left;
        int n = dlock__call_pollfds(k, pfd, max, &wake), r;
        if (n > max) {
            struct pollfd *p =
                realloc(pfd == small ? NULL : pfd, (size_t)n * sizeof *p);
            if (p == NULL) {
                dlock__call_cancel(k, DLOCK_ENOMEM, "out of memory");
                break;
            }
            pfd = p;
            max = n;
            continue;
        }
        left = wake - dlock__now_ms();
        left = left < 0 ? 0 : left > 60000 ? 60000 : left;
        r = poll(pfd, (nfds_t)n, (int)left);
        if (r < 0 && errno != EINTR) {
            dlock__call_cancel(k, DLOCK_EIO, "poll failed");
            break;
        }
        dlock__call_process(k, pfd, r > 0 ? n : 0);
    }
    if (pfd != small)
        free(pfd);
    dlock__call_results(k, &nok);
    return nok;
}

/* See step.h. */
int dlock__exec(dlock__nodeset *ns, const dlock__script *scripts, uint64_t mask,
                const dlock__cmd *cmd, int64_t deadline_ms, dlock__result *res)
{
    dlock__call *k;
    int nok;
    if (dlock__call_start(&k, ns, scripts, cmd, 1, mask, deadline_ms, res) !=
        DLOCK_OK)
        return 0;
    nok = drive(k);
    dlock__call_free(k);
    return nok;
}

/* See cluster_batch.h. */
int dlock__cluster_exec_many(dlock__nodeset *ns, const dlock__script *scripts,
                             const dlock__cmd *cmds, int m, int64_t deadline_ms,
                             dlock__result *res)
{
    dlock__call *k;
    int nok;
    if (dlock__call_start(&k, ns, scripts, cmds, m, ~0ULL, deadline_ms, res) !=
        DLOCK_OK)
        return 0;
    nok = drive(k);
    dlock__call_free(k);
    return nok;
}
