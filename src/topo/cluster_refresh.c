/*
 * cluster_refresh.c - the slot map's refresh as steps that never block
 * (see cluster.h): the masters of the map are asked first, then every
 * other node of the table, until one answers. A node is asked CLUSTER
 * SHARDS on a connection of its pool or one opened by node_open.c's
 * steps; a server that does not know SHARDS is asked CLUSTER SLOTS, one
 * that does not know CLUSTER at all SENTINEL MYID (to say what it is).
 * One refresh at a time (the cluster's busy flag): a second one with a
 * usable map goes on with it, one without waits on the clock. The
 * engine drives these steps; dlock__cluster_refresh waits for them.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ask.h"
#include "topo/cluster_impl.h"

enum { R_WAIT, R_OPEN, R_ASK };
enum { Q_SHARDS, Q_SLOTS, Q_MYID };

struct dlock__refreshing {
    dlock__nodeset *ns;
    struct dlock__cluster *cl;
    int64_t deadline;
    int phase;
    int owner; /* holds cl->busy */
    int64_t wake;
    unsigned char *map;
    uint64_t tried, masters;
    int pass, i; /* the next node to look at */
    int rc, einval;
    char e[DLOCK__ERRLEN];   /* the node's failure */
    char msg[DLOCK__ERRLEN]; /* the refresh's, so far */
    dlock__node *nd;         /* the node asked */
    dlock__node_opening *open;
    dlock__asking *a;
    int q;           /* the question out */
    redisReply *rep; /* Q_MYID: the CLUSTER answer it explains */
};

static int next_node(dlock__refreshing *R, char *err, size_t errlen);

/* What node nd's answer rep to CLUSTER SHARDS (shards) or SLOTS says:
 * the map filled, or why not (sentinel: it answered SENTINEL MYID). */
static int answer_read(dlock__refreshing *R, const redisReply *rep, int shards,
                       int sentinel)
{
    const char *d = R->nd->ep.display;
    char *e = R->e;
    size_t el = sizeof R->e;
    int rc;
    if (rep->type != REDIS_REPLY_ERROR) {
        rc = shards ? dlock__cluster_read_shards(R->ns, rep, R->nd, R->map)
                    : dlock__cluster_read_slots(R->ns, rep, R->nd, R->map);
        if (rc != DLOCK_OK)
            dlock__fail(e, el, rc, "%s: unexpected reply to CLUSTER %s", d,
                        shards ? "SHARDS" : "SLOTS");
        return rc;
    }
    if (strstr(rep->str, "cluster support disabled") != NULL)
        return dlock__fail(e, el, DLOCK_EINVAL,
                           "%s is not in cluster mode (cluster support "
                           "disabled): use redis:// for a single server",
                           d);
    if (sentinel)
        return dlock__fail(e, el, DLOCK_EINVAL,
                           "%s is a Redis Sentinel, not a cluster node: "
                           "use redis+sentinel://HOST:PORT[,HOST:PORT...]/"
                           "MASTER-NAME for the master it watches",
                           d);
    if (strstr(rep->str, "nknown command") != NULL)
        return dlock__fail(e, el, DLOCK_EINVAL,
                           "%s does not know CLUSTER: not a Redis Cluster "
                           "node (use redis:// for a single server)",
                           d);
    if (strncmp(rep->str, "NOAUTH", 6) == 0)
        return dlock__fail(e, el, DLOCK_EAUTH, "%s: %s", d, rep->str);
    return dlock__fail(e, el, DLOCK_ESERVER, "%s: CLUSTER %s: %s", d,
                       shards ? "SHARDS" : "SLOTS", rep->str);
}

/* The node asked is done with (rc; R->e says why not): a failure is
 * noted (a node not in cluster mode is the clearest thing to report:
 * its message is kept over later ones), then the next node. */
static int node_done(dlock__refreshing *R, int rc, char *err, size_t errlen)
{
    R->rc = rc;
    R->phase = R_OPEN;
    if (rc != DLOCK_OK && !R->einval) {
        R->einval = rc == DLOCK_EINVAL;
        snprintf(R->msg, sizeof R->msg, "%s", R->e);
    }
    return next_node(R, err, errlen);
}

/* Ask q (CLUSTER SHARDS / SLOTS, SENTINEL MYID) on conn, R->nd's. */
static int question(dlock__refreshing *R, dlock__conn *conn, int q, char *err,
                    size_t errlen);

/* The question's answer (rc: how the asking went). */
static int answer(dlock__refreshing *R, int rc, char *err, size_t errlen)
{
    redisReply *rep = rc == DLOCK_OK ? dlock__asking_reply(R->a) : NULL;
    dlock__conn *conn = dlock__asking_conn(R->a);
    int sentinel = 0, ok = rc == DLOCK_OK;
    dlock__asking_free(R->a);
    R->a = NULL;
    if (R->q == Q_SHARDS && rep != NULL && rep->type == REDIS_REPLY_ERROR &&
        strstr(rep->str, "nknown subcommand") != NULL) {
        freeReplyObject(rep);
        return question(R, conn, Q_SLOTS, err, errlen);
    }
    if (R->q == Q_SHARDS && rep != NULL && rep->type == REDIS_REPLY_ERROR &&
        strstr(rep->str, "nknown command") != NULL) {
        R->rep = rep; /* no CLUSTER at all: a Sentinel knows MYID */
        return question(R, conn, Q_MYID, err, errlen);
    }
    if (R->q == Q_MYID) {
        sentinel = rep != NULL && rep->type == REDIS_REPLY_STRING;
        if (rep != NULL)
            freeReplyObject(rep);
        rep = R->rep;
        R->rep = NULL;
        rc = DLOCK_OK;
    }
    dlock__node_give(R->ns, R->nd, conn, ok); /* closed after a failure */
    if (rc == DLOCK_OK) {
        rc = answer_read(R, rep, R->q == Q_SHARDS, sentinel);
        freeReplyObject(rep);
    }
    return node_done(R, rc, err, errlen);
}

static int question(dlock__refreshing *R, dlock__conn *conn, int q, char *err,
                    size_t errlen)
{
    static const char *const words[3][2] = {
        {"CLUSTER", "SHARDS"}, {"CLUSTER", "SLOTS"}, {"SENTINEL", "MYID"}};
    int rc;
    R->q = q;
    atomic_fetch_add(&R->ns->stats->requests, 1);
    rc = dlock__asking_start(&R->a, dlock__node_addr(R->nd), R->ns->tls, conn,
                             2, (const char **)words[q], R->deadline, R->e,
                             sizeof R->e);
    if (rc == DLOCK__OPEN_AGAIN) {
        R->phase = R_ASK;
        return rc;
    }
    if (R->a != NULL || rc == DLOCK_OK)
        return answer(R, rc, err, errlen);
    if (q == Q_MYID) { /* no answer: the CLUSTER one stands alone */
        conn = NULL;
        rc = answer_read(R, R->rep, 0, 0);
        freeReplyObject(R->rep);
        R->rep = NULL;
    }
    return node_done(R, rc, err, errlen);
}

/* A connection to R->nd: taken or opened (R_OPEN), then asked. */
static int node_ask(dlock__refreshing *R, int idx, char *err, size_t errlen)
{
    dlock__conn *conn = NULL;
    int fresh, rc;
    R->nd = &R->cl->node[idx];
    memset(R->map, NO_OWNER, DLOCK__CLUSTER_SLOTS);
    rc = dlock__node_opening_take(&R->open, R->ns, R->nd, R->deadline, &conn,
                                  &fresh, R->e, sizeof R->e);
    if (rc == DLOCK__OPEN_AGAIN) {
        R->phase = R_OPEN;
        return rc;
    }
    if (rc != DLOCK_OK)
        return node_done(R, rc, err, errlen);
    return question(R, conn, Q_SHARDS, err, errlen);
}

/* The refresh is over (R->rc): the map published, or why not. */
static int finish(dlock__refreshing *R, char *err, size_t errlen)
{
    struct dlock__cluster *cl = R->cl;
    int rc = R->rc, i;
    if (rc == DLOCK_OK) {
        for (i = 0; i < DLOCK__CLUSTER_SLOTS; i++)
            atomic_store(&cl->owner[i], R->map[i]);
        atomic_store(&cl->loaded, 1);
        atomic_store(&cl->stale, 0);
    } else {
        rc = R->einval ? DLOCK_EINVAL : rc;
        dlock__fail(err, errlen, rc, "%s",
                    R->msg[0] ? R->msg : "cluster: no node to ask");
    }
    if (R->owner) {
        cl->refreshed_ms = dlock__now_ms();
        atomic_store(&cl->busy, 0);
    }
    R->owner = 0;
    return rc;
}

/* The next node to ask (the map's masters, then the others), until
 * one answered or the time is up once one was asked. */
static int next_node(dlock__refreshing *R, char *err, size_t errlen)
{
    if (R->rc == DLOCK_OK && R->tried != 0)
        return finish(R, err, errlen);
    for (; R->pass < 2; R->pass++, R->i = 0)
        for (; R->i < atomic_load(&R->cl->n); R->i++) {
            uint64_t bit = 1ULL << R->i;
            if ((R->tried & bit) || (R->pass == 0 && !(R->masters & bit)))
                continue;
            if (R->tried != 0 && dlock__now_ms() >= R->deadline)
                return finish(R, err, errlen); /* one was asked */
            R->tried |= bit;
            return node_ask(R, R->i++, err, errlen);
        }
    return finish(R, err, errlen);
}

/* The flag is ours, or the refresh is not needed (another one runs,
 * the old map will do) or waits for it (no map; until the deadline at
 * most: a refresh whose driver stalls must not hold up the others; then
 * it goes on without the flag). */
static int begin(dlock__refreshing *R, char *err, size_t errlen)
{
    struct dlock__cluster *cl = R->cl;
    int zero = 0, i;
    R->owner = atomic_compare_exchange_strong(&cl->busy, &zero, 1);
    if (!R->owner && atomic_load(&cl->loaded))
        return DLOCK_OK;
    if (!R->owner && dlock__now_ms() < R->deadline) {
        R->phase = R_WAIT;
        R->wake = dlock__now_ms() + 5;
        return DLOCK__OPEN_AGAIN;
    }
    if (atomic_load(&cl->loaded) &&
        (!atomic_load(&cl->stale) ||
         dlock__now_ms() - cl->refreshed_ms < REFRESH_GAP_MS)) {
        if (R->owner)
            atomic_store(&cl->busy, 0);
        R->owner = 0;
        return DLOCK_OK;
    }
    for (i = 0; i < DLOCK__CLUSTER_SLOTS; i++) {
        int o = atomic_load(&cl->owner[i]);
        if (o != NO_OWNER)
            R->masters |= 1ULL << o;
    }
    return next_node(R, err, errlen);
}

/* See cluster.h. */
int dlock__cluster_refresh_start(dlock__refreshing **out, dlock__nodeset *ns,
                                 int64_t deadline_ms, char *err, size_t errlen)
{
    dlock__refreshing *R = calloc(1, sizeof *R);
    int rc;
    *out = NULL;
    if (R != NULL && (R->map = malloc(DLOCK__CLUSTER_SLOTS)) == NULL) {
        free(R);
        R = NULL;
    }
    if (R == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    R->ns = ns;
    R->cl = ns->cluster;
    R->deadline = deadline_ms;
    R->rc = DLOCK_EIO;
    rc = begin(R, err, errlen);
    if (rc == DLOCK__OPEN_AGAIN)
        *out = R;
    else
        dlock__cluster_refresh_free(R);
    return rc;
}

/* See cluster.h. */
void dlock__cluster_refresh_poll(const dlock__refreshing *R, int *fd,
                                 short *events, int64_t *wake_ms)
{
    *fd = -1;
    *events = 0;
    if (R->phase == R_WAIT) {
        *wake_ms = R->wake;
    } else if (R->phase == R_OPEN) {
        dlock__node_opening_poll(R->open, fd, events);
        *wake_ms = dlock__node_opening_wake(R->open);
    } else {
        dlock__asking_poll(R->a, fd, events);
        *wake_ms = dlock__asking_deadline(R->a);
    }
}

/* See cluster.h. */
int dlock__cluster_refresh_step(dlock__refreshing *R, short revents, char *err,
                                size_t errlen)
{
    dlock__conn *conn = NULL;
    int rc;
    if (R->phase == R_WAIT)
        return dlock__now_ms() < R->wake ? DLOCK__OPEN_AGAIN
                                         : begin(R, err, errlen);
    if (R->phase == R_OPEN) {
        rc = dlock__node_opening_step(R->open, revents, &conn, R->e,
                                      sizeof R->e);
        if (rc == DLOCK__OPEN_AGAIN)
            return rc;
        dlock__node_opening_free(R->open);
        R->open = NULL;
        return rc == DLOCK_OK ? question(R, conn, Q_SHARDS, err, errlen)
                              : node_done(R, rc, err, errlen);
    }
    rc = dlock__asking_step(R->a, revents, R->e, sizeof R->e);
    if (rc == DLOCK__OPEN_AGAIN &&
        dlock__now_ms() >= dlock__asking_deadline(R->a))
        rc = dlock__asking_timeout(R->a, R->e, sizeof R->e);
    return rc == DLOCK__OPEN_AGAIN ? rc : answer(R, rc, err, errlen);
}

/* See cluster.h. */
void dlock__cluster_refresh_free(dlock__refreshing *R)
{
    if (R == NULL)
        return;
    dlock__node_opening_free(R->open);
    dlock__asking_free(R->a);
    if (R->rep != NULL)
        freeReplyObject(R->rep);
    if (R->owner)
        atomic_store(&R->cl->busy, 0);
    free(R->map);
    free(R);
}

/* See cluster.h: the steps, waited for with poll(). */
int dlock__cluster_refresh(dlock__nodeset *ns, int64_t deadline_ms, char *err,
                           size_t errlen)
{
    dlock__refreshing *R;
    int rc = dlock__cluster_refresh_start(&R, ns, deadline_ms, err, errlen);
    while (rc == DLOCK__OPEN_AGAIN) {
        int64_t wake;
        int fd;
        short ev;
        dlock__cluster_refresh_poll(R, &fd, &ev, &wake);
        rc = dlock__cluster_refresh_step(R, dlock__poll_until(fd, ev, wake),
                                         err, errlen);
    }
    dlock__cluster_refresh_free(R);
    return rc;
}

/* See cluster.h. */
int dlock__cluster_route(dlock__nodeset *ns, uint16_t slot, dlock__node **out,
                         int64_t deadline_ms, char *err, size_t errlen)
{
    struct dlock__cluster *cl = ns->cluster;
    if (dlock__cluster_wants_refresh(ns)) {
        int rc = dlock__cluster_refresh(ns, deadline_ms, err, errlen);
        if (rc != DLOCK_OK && !atomic_load(&cl->loaded))
            return rc;
    }
    return dlock__cluster_route_now(ns, slot, out, err, errlen);
}
