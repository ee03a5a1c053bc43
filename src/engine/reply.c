/*
 * reply.c - reading what the servers answered: results, the naming of a
 * server's error reply (one place for every call the engine runs), the
 * message of a failed step, and the shape checks of script replies.
 * Above node.h, ident.h and errors.h; no I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/ident.h"
#include "engine/step.h"

/* Free the replies of res[0..n-1]. */
void dlock__results_clear(dlock__result *res, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        if (res[i].reply != NULL)
            freeReplyObject(res[i].reply);
        res[i].reply = NULL;
        res[i].status = DLOCK_EIO;
        res[i].err[0] = '\0';
    }
}

/* See step.h. */
void dlock__results_reset(dlock__result *res, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        res[i].reply = NULL;
        res[i].err[0] = '\0';
        res[i].status = DLOCK_EIO;
        res[i].sent = 0;
        res[i].pending = 0;
        res[i].acks = -1;
    }
}

/* See step.h. */
int dlock__reply_error(const dlock__nodeset *ns, const dlock__node *nd,
                       const char *msg, char *err, size_t errlen, int *failover)
{
    const char *why = "";
    if (strncmp(msg, "READONLY", 8) == 0 || strstr(msg, "-READONLY") != NULL)
        why = "a replica, not a master: ";
    else if (strncmp(msg, "LOADING", 7) == 0 ||
             strncmp(msg, "MASTERDOWN", 10) == 0)
        why = "not ready: ";
    *failover = why[0] != '\0';
    /* Busy with a script, or a slot moving: not ready either (a waiting
     * acquire tries again), but no failover. */
    if (strncmp(msg, "BUSY ", 5) == 0 || strncmp(msg, "TRYAGAIN", 8) == 0)
        why = "not ready: ";
    if (ns->cluster == NULL &&
        (strncmp(msg, "MOVED ", 6) == 0 || strncmp(msg, "ASK ", 4) == 0)) {
        /* A redirection outside cluster mode: the URL names a cluster
         * node (a usage error, said so). */
        snprintf(err, errlen,
                 "%s: this is a Redis Cluster node (it answered %.48s): use "
                 "redis+cluster://",
                 dlock__node_name(nd), msg);
        return DLOCK_EINVAL;
    }
    snprintf(err, errlen, "%s: %s%s", dlock__node_name(nd), why, msg);
    /* With Sentinel, a replica or a server not ready is what a failover
     * in progress looks like: the master is located again and a retry
     * may succeed. */
    if (*failover && ns->locate != NULL)
        return DLOCK_ESERVER;
    /* NOAUTH and "unauthenticated multibulk length" are authentication
     * failures; NOPERM, READONLY, an unknown command are refusals no
     * retry cures (errors.c). */
    return dlock__server_error_code(msg, strlen(msg));
}

/* See step.h. */
int dlock__reply_notready(const char *err)
{
    return strstr(err, ": not ready: ") != NULL;
}

/* See step.h. */
int64_t dlock__step_deadline(const dlock__nodeset *ns, int64_t command_ms,
                             int64_t lease_ms)
{
    int64_t t = command_ms;
    if (ns->n > 1 && lease_ms > 0) {
        int64_t cap = lease_ms / 10 < 10 ? 10 : lease_ms / 10;
        if (cap < t)
            t = cap;
    }
    return dlock__now_ms() + t;
}

/* No majority because so many servers refused (credentials, ACL,
 * read-only replica...) that none is left: that is the refusal, which a
 * retry cannot cure, not an outage. Returns the code to report. */
static int refusal_code(const dlock__nodeset *ns, const dlock__result *res,
                        uint64_t mask, int code)
{
    int i, refused = 0, auth = 0;
    if (code != DLOCK_NO_QUORUM)
        return code;
    for (i = 0; i < ns->n; i++) {
        if (!(mask & (1ULL << i)))
            continue;
        refused += res[i].status == DLOCK_EREFUSED;
        auth += res[i].status == DLOCK_EAUTH;
    }
    if (refused + auth > ns->n - ns->quorum)
        return refused > 0 ? DLOCK_EREFUSED : DLOCK_EAUTH;
    return code;
}

/* See step.h. */
int dlock__step_error(const dlock__nodeset *ns, const dlock__msgs *msgs,
                      const dlock__result *res, uint64_t mask, int code,
                      const char *what)
{
    char *b = dlock__msgs_buf(msgs);
    size_t off = 0;
    int i, nfail = 0;
    code = refusal_code(ns, res, mask, code);
    if (b == NULL)
        return code;
    if (dlock__ident_refused(ns, NULL, 0)) {
        char msg[DLOCK__ERRLEN];
        dlock__ident_refused(ns, msg, sizeof msg);
        snprintf(b, DLOCK__MSGLEN, "%s: %s", what, msg);
        return DLOCK_EINVAL;
    }
    for (i = 0; i < ns->n; i++)
        if ((mask & (1ULL << i)) && res[i].status != DLOCK_OK)
            nfail++;
    if (ns->n == 1) {
        snprintf(b, DLOCK__MSGLEN, "%s: %s", what,
                 res[0].err[0] ? res[0].err : dlock_strerror(res[0].status));
        return code;
    }
    off = (size_t)snprintf(b, DLOCK__MSGLEN, "%s: %d of %d nodes failed", what,
                           nfail, ns->n);
    for (i = 0; i < ns->n && off < DLOCK__MSGLEN; i++) {
        if (!(mask & (1ULL << i)) || res[i].status == DLOCK_OK)
            continue;
        off += (size_t)snprintf(b + off, DLOCK__MSGLEN - off, "; %s",
                                res[i].err[0] ? res[i].err
                                              : dlock_strerror(res[i].status));
    }
    return code;
}

/* See step.h. */
long long dlock__elem_int(const redisReply *r, size_t i)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return 0;
    if (r->element[i]->type == REDIS_REPLY_INTEGER)
        return r->element[i]->integer;
    if (r->element[i]->type == REDIS_REPLY_STRING)
        return strtoll(r->element[i]->str, NULL, 10);
    return 0;
}

/* See step.h. */
void dlock__malformed(const dlock__nodeset *ns, dlock__result *res, int i,
                      const char *what)
{
    res[i].status = DLOCK_EPROTO;
    snprintf(res[i].err, sizeof res[i].err, "%s: unexpected reply to %s",
             dlock__node_name(&ns->node[i]), what);
}
