/*
 * loop.c - the engine's descriptors (dlock__call_pollfds: what a poll()
 * or an event loop waits for) and its blocking driver: start the calls,
 * then poll() their descriptors and process until they are done. Every
 * blocking step of the library (dlock__exec) and the watchdog's renewal
 * rounds on a cluster (dlock__cluster_exec_many) run here; an event loop
 * would drive the same three verbs instead.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "engine/machine.h"
#include "engine/cluster_batch.h"
#include "engine/lanes.h"

/* Note descriptor n (fd, events) as p (a lane, or -1 - j for call j's
 * open) when pfd has room. */
static void pfd_add(dlock__call *k, struct pollfd *pfd, int max, int n, int fd,
                    short events, int p)
{
    if (n < max)
        pfd[n] = (struct pollfd){.fd = fd, .events = events, .revents = 0};
    if (n < k->pcap)
        k->pidx[n] = p;
}

/* See call.h. */
int dlock__call_pollfds(dlock__call *k, struct pollfd *pfd, int max,
                        int64_t *wake_ms)
{
    int n = 0, l, j;
    *wake_ms = k->deadline;
    if (k->pcap < k->nl + k->m + 1) {
        int *p = realloc(k->pidx, (size_t)(k->nl + k->m + 1) * sizeof *p);
        if (p == NULL)
            return 0; /* nothing polled: the deadline still ends it */
        k->pidx = p;
        k->pcap = k->nl + k->m + 1;
    }
    for (j = 0; j < k->m; j++) {
        ecall *c = &k->cl[j];
        int fd;
        short ev;
        if (c->state == C_BACKOFF && c->retry_at < *wake_ms)
            *wake_ms = c->retry_at;
        if (c->state != C_OPENING)
            continue;
        if (dlock__node_opening_wake(c->open) < *wake_ms)
            *wake_ms = dlock__node_opening_wake(c->open);
        dlock__node_opening_poll(c->open, &fd, &ev);
        if (fd >= 0) /* none: a locate waiting on the clock */
            pfd_add(k, pfd, max, n++, fd, ev, -1 - j);
    }
    for (l = 0; l < k->nl; l++)
        if (k->ln[l].conn != NULL && k->ln[l].sh < 0) /* a set's: its own */
            pfd_add(k, pfd, max, n++, dlock__conn_fd(k->ln[l].conn),
                    dlock__conn_events(k->ln[l].conn), l);
    if (k->refresh != NULL) { /* a cluster's map being refreshed */
        int64_t w;
        int fd;
        short ev;
        dlock__cluster_refresh_poll(k->refresh, &fd, &ev, &w);
        if (w < *wake_ms)
            *wake_ms = w;
        if (fd >= 0)
            pfd_add(k, pfd, max, n++, fd, ev, -1 - k->m);
    }
    k->npidx = n;
    return n;
}

/* Descriptors held without an allocation (a Redlock's nodes, a few
 * masters). */
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
        if (left > 0)
            dlock__nb_blocking();
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
    dlock__lanes_ctx set = dlock__lanes_enter(NULL, NULL); /* own conns */
    dlock__call *k;
    int nok = 0;
    if (dlock__call_start(&k, ns, scripts, cmd, 1, mask, deadline_ms, res) ==
        DLOCK_OK) {
        nok = drive(k);
        dlock__call_free(k);
    }
    dlock__lanes_leave(set);
    return nok;
}

/* See cluster_batch.h. */
int dlock__cluster_exec_many(dlock__nodeset *ns, const dlock__script *scripts,
                             const dlock__cmd *cmds, int m, int64_t deadline_ms,
                             dlock__result *res)
{
    dlock__lanes_ctx set = dlock__lanes_enter(NULL, NULL); /* as exec */
    dlock__call *k;
    int nok = 0;
    if (dlock__call_start(&k, ns, scripts, cmds, m, ~0ULL, deadline_ms, res) ==
        DLOCK_OK) {
        nok = drive(k);
        dlock__call_free(k);
    }
    dlock__lanes_leave(set);
    return nok;
}
